"""Name the likely cause of a failed correctness check from its error pattern.

``likely_cause(task, out, args, ref)`` compares where and how a kernel's output
differs from the reference with the signatures of known bugs and returns one
line for the report, e.g.

    likely cause: unsigned int4 unpacking: ... (handout: "5. Task 2: W4A16")

or None when no signature matches. Only failures are explained: an output that
passes the tight check of ``grader.compare`` never gets a cause. It runs on
the trusted side, on the reference's device, and never raises. Each signature
costs a few tensor operations; the dearest (W8A8's rounding slack, a W4A16 or
DDS hypothesis) is one matrix product of the reference's size.

The generic signatures (rows or columns never stored, NaN along an edge, a
wrong scale) live here; each task's own (W4A16's unsigned unpacking, DDS's
transposed blocks, ...) and their texts live in its module in grader/tasks/,
run at the stage the task names (``Task.signatures``).

Bug variants that show each signature live in tests/variants/;
tests/kernels/test_variants.py checks that every signature names its bug's cause and
no other, and that no faithful kernel and no reference solution gets one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .compare import allowed_error
from .tasks import TASKS, Task, get

# Handout sections the generic causes point to: headings of handout.md (a test checks them).
QUANTIZATION = "2. Quantization in one page"
TRITON = "3. Triton in one page"

# The causes every task can show: id -> (text, handout section; None: the
# task's). The troubleshooting table of handout.md quotes each text, and each
# task's own (a test checks it).
GENERIC_CAUSES = {
    "nothing_stored": ("the output was never stored (all NaN or 0): an empty grid, or a store that is "
                       "masked off", TRITON),
    "rows_not_stored": ("output row(s) {rows} never stored (every value there is wrong, every other row "
                        "right): the grid or the store mask misses them", TRITON),
    "cols_not_stored": ("output column(s) {cols} never stored (every value there is wrong, every other "
                        "column right): the grid or the store mask misses them", TRITON),
    "k_tail_mask": ("a missing K-tail mask: only the last row is NaN, as when the last K tile of x is "
                    "loaded without its mask and reads past the end of x", TRITON),
    "edge_mask": ("NaN only along {where}: a load on a ragged edge without its mask", TRITON),
    "scale": ("a wrong or missing scale: {how}", None),
    "out_of_bounds": ("kernel {kernel} {what} outside every tensor it was given: a load or store without "
                      "its mask on a ragged edge, or a wrong stride or offset", TRITON),
}


def cause_texts() -> dict[str, tuple[str, str | None]]:
    """Every cause the grader can print: id -> (text, handout section or None)."""
    texts = dict(GENERIC_CAUSES)
    for task in TASKS.values():
        texts.update(task.causes)
    return texts


@dataclass(frozen=True)
class Cause:
    id: str      # a key of cause_texts()
    line: str    # what the report prints


@dataclass(frozen=True)
class Failure:
    """A failed check, as every signature sees it (float64 on the reference's device)."""
    task: Task
    y: torch.Tensor        # the kernel's output
    ref: torch.Tensor      # the exact reference
    bad: torch.Tensor      # bool: exactly what grader.compare rejects
    bound: torch.Tensor    # the allowed error per element
    blank: torch.Tensor    # bool: looks never written (NaN, or 0 where the reference is not)
    finite: torch.Tensor   # bool
    args: tuple            # the kernel's arguments


def _cause(task: Task, cause_id: str, fields: dict) -> Cause:
    text, section = {**GENERIC_CAUSES, **task.causes}[cause_id]
    if section is None:
        section = (task.scale_section if cause_id == "scale" else None) or task.handout_section
    return Cause(cause_id, f'likely cause: {text.format(**fields)} (handout: "{section}")')


def outside_words(outside: dict) -> str:
    """'loaded 96 bytes and stored 64 bytes' from the bounds check's counts."""
    parts = [f"{verb} {outside[key]} bytes" for key, verb in (("loads", "loaded"), ("stores", "stored"))
             if outside.get(key)]
    return " and ".join(parts)


def out_of_bounds(task: str, outside: dict) -> str:
    """The likely-cause line of a call whose loads or stores left every tensor it knew
    (the interpreter's bounds check, grader/worker/movement.py)."""
    return _cause(get(task), "out_of_bounds", {"kernel": outside.get("kernel") or "?",
                                               "what": outside_words(outside)}).line


def likely_cause(task: str, out, args: tuple, ref: torch.Tensor | None = None) -> str | None:
    """One "likely cause: ..." line for a failed check of ``out`` on ``args``, or None.

    ``ref`` is the reference output for ``args`` (computed here when None).
    Never raises: a diagnosis is a hint and must not break grading.
    """
    cause = diagnose(task, out, args, ref)
    return cause.line if cause else None


def diagnose(task: str, out, args: tuple, ref: torch.Tensor | None = None) -> Cause | None:
    """The ``Cause`` behind a failed check, or None (no known signature, or nothing failed)."""
    try:
        return _diagnose(get(task), out, args, ref)
    except Exception:  # noqa: BLE001 - a hint must never break grading
        return None


def _diagnose(task: Task, out, args, ref):
    if not isinstance(out, torch.Tensor) or out.layout != torch.strided:
        return None
    if ref is None:
        ref, slack = task.reference_and_slack(args)
    else:
        slack = task.slack(*args) if task.slack else None
    if out.dim() != 2 or tuple(out.shape) != tuple(ref.shape) or out.numel() == 0:
        return None
    r = ref.double()
    y = out.to(r.device).double()
    finite = torch.isfinite(y)
    rms = float(r.pow(2).mean().sqrt())
    bound = allowed_error(r, task.name, slack)
    bad = ~finite | ((y - r).abs() > bound)  # exactly what grader.compare rejects
    if not bool(bad.any()):
        return None
    # A never-written element reads NaN where uninitialized memory is filled
    # with NaN (torch.use_deterministic_algorithms), 0 or a stale value
    # otherwise; a 0 where the reference is 0 too is no evidence either way.
    blank = ~finite | ((y == 0) & (r != 0))
    f = Failure(task, y, r, bad, bound, blank, finite, args)
    # Most specific first: the task's layout checks (whole empty block rows),
    # whole rows, the exact product of a known misreading; then patterns
    # another bug could imitate.
    stage = task.signatures.get
    checks = [
        *stage("first", ()),
        _blank_rows,
        *stage("specific", ()),
        *stage("late", ()),
        _blank_cols,
        _nan_band,
        lambda f: _scale(f, rms),
    ]
    for check in checks:
        found = check(f)
        if found:
            return _cause(task, *found)
    return None


# ------------------------------------------------------- where the errors are

def _span(idx: torch.Tensor) -> str:
    idx = idx.tolist()
    if len(idx) == 1:
        return str(idx[0])
    if idx == list(range(idx[0], idx[-1] + 1)):
        return f"{idx[0]}..{idx[-1]}"
    return ", ".join(map(str, idx[:6])) + (", ..." if len(idx) > 6 else "")


def _unwritten(bad, blank, nonzero, lines):
    """Whether the failing ``lines`` (a bool mask over dim 0 of the [lines, ...]
    tensors) look never written while every other line is right: blank from
    end to end (memory filled with NaN), or a trailing band in which nearly
    every value the reference has is wrong (stale memory, a few of whose
    values may land within the tolerance by chance)."""
    if bool(bad[~lines].any()):
        return False
    if bool(nonzero.any()) and not bool(lines.all()) and not bool(nonzero[~lines].any()):
        return False   # the only lines that are right are all-zero rows (x = 0): no evidence
    if bool(blank[lines].all()):
        return True
    idx = lines.nonzero().flatten()
    trailing = int(idx[-1]) == lines.numel() - 1 and idx.numel() == int(idx[-1] - idx[0]) + 1
    if not trailing or not 0 < idx.numel() < lines.numel():
        return False
    expected = nonzero[lines]
    return not bool(expected.any()) or float(bad[lines][expected].double().mean()) >= 0.9


def _blank_rows(f: Failure):
    """Whole rows never written, or the last row poisoned by a read past the end of x."""
    M = f.y.shape[0]
    bad_rows = f.bad.any(1)
    if not _unwritten(f.bad, f.blank, f.ref != 0, bad_rows):
        return None
    if bool(bad_rows.all()):
        return "nothing_stored", {}
    rows = bad_rows.nonzero().flatten()
    if f.task.ragged_k and rows.tolist() == [M - 1] and not bool(f.finite[M - 1].any()):
        # A K-tail read past the end of a row only leaves x in the last row;
        # the other rows read their neighbour, which meets a zero weight.
        return "k_tail_mask", {}
    return "rows_not_stored", {"rows": _span(rows)}


def _blank_cols(f: Failure):
    bad_cols = f.bad.any(0)
    if not _unwritten(f.bad.t(), f.blank.t(), (f.ref != 0).t(), bad_cols):
        return None
    return "cols_not_stored", {"cols": _span(bad_cols.nonzero().flatten())}


def _nan_band(f: Failure):
    """NaN, with every failure in a band along the last rows or the last columns."""
    if bool(f.finite.all()):
        return None
    M, N = f.y.shape
    first_row = int(f.bad.any(1).nonzero()[0])
    first_col = int(f.bad.any(0).nonzero()[0])
    if 0 < first_row and first_row >= M - 64:
        where = f"the last {M - first_row} row(s)"
    elif 0 < first_col and first_col >= N - 64:
        where = f"the last {N - first_col} column(s)"
    else:
        return None
    return "edge_mask", {"where": where}


def _scale(f: Failure, rms: float):
    """y = ref * f[m, n] with log f[m, n] = a[m] + b[n], f not 1: a wrong or missing scale."""
    y, r = f.y, f.ref
    use = f.finite & (r.abs() > 0.5 * rms)
    if not bool(use.any()):
        return None
    ratio = y / torch.where(use, r, torch.ones_like(r))
    if bool((ratio[use] <= 0).any()):
        return None
    log = torch.where(use, ratio.abs().log(), torch.zeros_like(r))
    w = use.double()
    a, b = torch.zeros_like(r[:, :1]), torch.zeros_like(r[:1, :])
    for _ in range(25):  # alternating least squares
        a = ((log - b) * w).sum(1, keepdim=True) / w.sum(1, keepdim=True).clamp_min(1)
        b = ((log - a) * w).sum(0, keepdim=True) / w.sum(0, keepdim=True).clamp_min(1)
    if bool(((log - a - b).abs() * w > 0.02).any()):
        return None
    if float(w.sum()) < 2 * (y.shape[0] + y.shape[1]):
        return None  # too few elements for a + b to be evidence (e.g. M = 1: any ratio fits)
    a, b = a[w.sum(1) > 0], b[:, w.sum(0) > 0]
    rows = bool((a - a.median()).abs().max() > 0.01)
    cols = bool((b - b.median()).abs().max() > 0.01)
    if cols and not rows:
        how = f"each output column is off by its own constant factor; check the {f.task.column_scale_hint}"
    elif rows and not cols:
        how = "each output row is off by its own constant factor; check the per-token scale"
    elif rows or cols:
        how = "y[m, n] is off by a factor a[m] * b[n]; check both scales"
    elif abs(float(a.median() + b.median())) > 0.01:
        how = "every output element is off by the same constant factor"
    else:
        return None
    return "scale", {"how": how}
