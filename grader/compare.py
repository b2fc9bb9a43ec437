"""Compare a submission's output with the reference and say what differs.

The rule, the same for every task (docs/grading.md), with each task's
tolerance and sanity bound from its module in grader/tasks/:

    |out - ref| <= tol * (|ref| + rms(ref)) [+ slack]    elementwise, against the exact reference
    ||out - x W^T|| / ||x W^T|| <= sanity                 against the unquantized fp16 layer
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .tasks import get


@dataclass
class Check:
    passed: bool
    message: str
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    bad: int = 0


def _indices(mask: torch.Tensor, limit: int = 5) -> list[tuple[int, ...]]:
    return [tuple(int(i) for i in idx) for idx in mask.nonzero()[:limit].tolist()]


def reference_and_slack(task: str, args):
    """The exact reference on ``args`` and the extra deviation every faithful
    kernel may need there (W8A8: ambiguous roundings; None for the others)."""
    return get(task).reference_and_slack(args)


def allowed_error(ref: torch.Tensor, task: str, slack: torch.Tensor | None = None) -> torch.Tensor:
    """Per element, how far an output may be from ``ref`` (float64): the rule of
    docs/grading.md, in one place for the check and the diagnosis."""
    r = ref.double()
    tol = get(task).tolerance
    rms = float(r.pow(2).mean().sqrt()) if r.numel() else 0.0
    bound = tol * (r.abs() + rms)
    if slack is not None:
        bound = bound + slack.to(bound.device).double() * (1 + tol)
    return bound


def check_task_output(out, task: str, args, ref_slack=None) -> Check:
    """Tight check of a kernel's output on ``args`` against the exact reference
    (``ref_slack``: ``reference_and_slack(task, args)`` when already computed)."""
    ref, slack = ref_slack or reference_and_slack(task, args)
    return check_output(out, ref, task, tuple(ref.shape), slack)


def check_output(out, ref: torch.Tensor, task: str, expected_shape: tuple[int, int],
                 slack: torch.Tensor | None = None) -> Check:
    """Tight check of ``out`` (fp16 [M, N]) against ``ref``; ``slack`` (optional,
    [M, N]) is extra absolute deviation allowed per element."""
    if not isinstance(out, torch.Tensor):
        return Check(False, f"returned {type(out).__name__}, expected a torch.Tensor")
    if out.layout != torch.strided:
        return Check(False, f"returned a {out.layout} tensor, expected a dense (strided) tensor")
    if out.dtype != torch.float16:
        return Check(False, f"output dtype is {out.dtype}, expected torch.float16")
    if tuple(out.shape) != tuple(expected_shape):
        return Check(False, f"output shape is {tuple(out.shape)}, expected {tuple(expected_shape)}")
    y = out.to(ref.device).double()
    r = ref.double()
    nonfinite = ~torch.isfinite(y)
    if nonfinite.any():
        n = int(nonfinite.sum())
        return Check(False, f"{n} of {y.numel()} output elements are NaN or Inf, first at "
                            f"{_indices(nonfinite)}", bad=n)
    tol = get(task).tolerance
    rms = float(r.pow(2).mean().sqrt()) if r.numel() else 0.0
    err = (y - r).abs()
    bound = allowed_error(r, task, slack)
    bad = err > bound
    max_abs = float(err.max()) if err.numel() else 0.0
    rel = err / r.abs().clamp_min(max(rms, 1e-30))
    max_rel = float(rel.max()) if rel.numel() else 0.0
    n_bad = int(bad.sum())
    if n_bad == 0:
        # The measure the rule compares: how much of its allowed error the worst element uses.
        used = float((err / bound.clamp_min(1e-300)).max()) if err.numel() else 0.0
        rule = f"tol {tol:g} x (|ref| + rms(ref))" + (" + rounding slack" if slack is not None else "")
        return Check(True, f"within tolerance: the worst element uses {used:.0%} of its allowed error "
                           f"({rule}); max abs error {max_abs:.3g}", max_abs, max_rel)
    first = _indices(bad)
    samples = ", ".join(f"{i}: got {float(y[i]):.5g}, expected {float(r[i]):.5g}" for i in first[:3])
    return Check(False, f"{n_bad} of {y.numel()} elements differ beyond tolerance {tol:g} "
                        f"(|err| <= tol * (|ref| + rms(ref)), rms(ref) = {rms:.3g}); "
                        f"max abs error {max_abs:.4g}, max rel error {max_rel:.4g}; "
                        f"first bad at {first}; {samples}", max_abs, max_rel, n_bad)


def check_sanity(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, task: str) -> Check:
    """Loose check against the unquantized fp16 nn.Linear: relative Frobenius error."""
    ref = x.double() @ weight.double().t()
    norm = float(ref.norm())
    if norm == 0.0:
        ok = float(out.double().abs().max()) == 0.0 if out.numel() else True
        return Check(ok, "fp16 layer output is all zero" + ("" if ok else "; the kernel's is not"))
    rel = float((out.to(ref.device).double() - ref).norm()) / norm
    limit = get(task).sanity
    ok = rel <= limit
    return Check(ok, f"relative error vs the fp16 nn.Linear {rel:.3g} (limit {limit:g})"
                 + ("" if ok else ": the result is not the layer's output"))
