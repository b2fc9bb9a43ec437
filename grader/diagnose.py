"""Name the likely cause of a failed correctness check from its error pattern.

``likely_cause(task, out, args, ref)`` compares where and how a kernel's output
differs from the reference with the signatures of known bugs and returns one
line for the report, e.g.

    likely cause: unsigned int4 unpacking: ... (handout: "Task 2: W4A16")

or None when no signature matches. It looks only at failures: an output that
passes the tight check (``grader.compare``) never gets a cause. It runs on the
trusted side, on the reference's device, and never raises. Each signature is
one or two tensor operations; the costliest (W8A8's rounding slack, a W4A16
or DDS hypothesis) is one matrix product of the reference's size.

Bug variants that produce each signature live in tests/variants/;
tests/test_variants.py checks that every signature names its bug and nothing
else, and that no faithful kernel ever gets one.
"""

from __future__ import annotations

import torch

from .compare import TOLERANCE
from .references import REFERENCES, unpack_int4, w8a8_rounding_slack

# Handout sections the causes point to (headings of handout.md, checked by a test).
QUANTIZATION = "2. Quantization in one page"
TRITON = "3. Triton in one page"
SECTION = {"w8a8": "Task 1: W8A8", "w4a16": "Task 2: W4A16", "dds": "Task 3: DDS"}

# A hypothesis "the kernel computed pred" holds when every element is this close
# to pred (in units of the task's tolerance): fp16 and accumulation rounding
# of the buggy kernel, nothing more.
MATCH = 4.0
BSR = 32


def _line(cause: str, section: str) -> str:
    return f'likely cause: {cause} (handout: "{section}")'


def likely_cause(task: str, out: torch.Tensor, args: tuple, ref: torch.Tensor | None = None) -> str | None:
    """One "likely cause: ..." line for a failed check of ``out`` on ``args``, or None.

    ``ref`` is the reference output for ``args`` (computed here when None).
    Never raises: a diagnosis is a hint, never a reason for the grader to fail.
    """
    try:
        return _diagnose(task, out, args, ref)
    except Exception:  # noqa: BLE001 - a hint must never break grading
        return None


def _diagnose(task, out, args, ref):
    if task not in SECTION or not isinstance(out, torch.Tensor) or out.layout != torch.strided:
        return None
    if ref is None:
        ref = REFERENCES[task](*args)
    if out.dim() != 2 or tuple(out.shape) != tuple(ref.shape) or out.numel() == 0:
        return None
    r = ref.double()
    y = out.to(r.device).double()
    finite = torch.isfinite(y)
    tol = TOLERANCE[task]
    rms = float(r.pow(2).mean().sqrt())
    bound = tol * (r.abs() + rms)
    if task == "w8a8":
        bound = bound + w8a8_rounding_slack(*args).to(r.device) * (1 + tol)
    bad = ~finite | ((y - r).abs() > bound)
    if not bool(bad.any()):
        return None  # the output passes: nothing to explain
    # Never-written elements look NaN (the harness's fill) or 0 where the reference is not.
    blank = ~finite | (y == 0)
    # Most specific first: whole empty block rows, whole rows, the exact product
    # of a known misreading, then patterns that other bugs could imitate.
    checks = [
        lambda: _empty_block_rows(y, bad, blank, args) if task == "dds" else None,
        lambda: _blank_rows(task, y, bad, blank, finite),
        lambda: _specific(task, y, r, bad, bound, args),
        lambda: _block_steps(y, bad, args) if task == "dds" else None,
        lambda: _blank_cols(y, bad, blank),
        lambda: _nan_band(y, bad, finite),
        lambda: _scale(task, y, r, finite, rms),
    ]
    for check in checks:
        cause = check()
        if cause:
            return cause
    return None


# --------------------------------------------------------------- where it fails

def _span(idx: torch.Tensor) -> str:
    idx = idx.tolist()
    if len(idx) == 1:
        return str(idx[0])
    if idx == list(range(idx[0], idx[-1] + 1)):
        return f"{idx[0]}..{idx[-1]}"
    return ", ".join(map(str, idx[:6])) + (", ..." if len(idx) > 6 else "")


def _blank_rows(task, y, bad, blank, finite):
    """Every failing row blank from end to end, every other row right."""
    M = y.shape[0]
    bad_rows = bad.any(1)
    if not bool(blank[bad_rows].all()) or bool(bad[~bad_rows].any()):
        return None
    if bool(bad_rows.all()):
        return _line("no output element was written (all NaN or 0): is the kernel launched on an empty "
                     "grid, or is its store masked off?", TRITON)
    rows = bad_rows.nonzero().flatten()
    if task != "dds" and rows.tolist() == [M - 1] and not bool(finite[M - 1].any()):
        # only the last row's overrun leaves x (the others read their neighbour)
        return _line("a missing K-tail mask: only the last row is NaN, as when the last K tile of x "
                     "is loaded without its mask and reads past the end of x", TRITON)
    return _line(f"output row(s) {_span(rows)} never stored (NaN or 0): the grid or the store mask "
                 f"does not cover every row of y", TRITON)


def _blank_cols(y, bad, blank):
    bad_cols = bad.any(0)
    if not bool(blank[:, bad_cols].all()) or bool(bad[:, ~bad_cols].any()):
        return None
    return _line(f"output column(s) {_span(bad_cols.nonzero().flatten())} never stored (NaN or 0): the grid "
                 f"or the store mask does not cover every column of y", TRITON)


def _nan_band(y, bad, finite):
    """NaN, and every failure in a band along the last rows or the last columns: an edge read unmasked."""
    if bool(finite.all()):
        return None
    M, N = y.shape
    first_row = int(bad.any(1).nonzero()[0])
    first_col = int(bad.any(0).nonzero()[0])
    if 0 < first_row and first_row >= M - 64:
        where = f"the last {M - first_row} row(s)"
    elif 0 < first_col and first_col >= N - 64:
        where = f"the last {N - first_col} column(s)"
    else:
        return None
    return _line(f"NaN or garbage only in {where}: a load on a ragged edge without its mask", TRITON)


def _block_counts(y, args):
    return args[1].crow_indices().to(y.device).diff()


def _group_bad(y, bad):
    """[N // 32] bool: whether each block row's 32 output columns hold a failure."""
    return bad.view(y.shape[0], -1, BSR).any(2).any(0)


def _empty_block_rows(y, bad, blank, args):
    """DDS: exactly the outputs of the empty block rows fail, all of them."""
    if y.shape[1] % BSR:
        return None
    empty = _block_counts(y, args) == 0
    if not bool(empty.any()) or not torch.equal(_group_bad(y, bad), empty):
        return None
    groups = bad.view(y.shape[0], -1, BSR)[:, empty]
    if not bool(groups.all()):
        return None
    how = "never stored" if bool(blank.view(y.shape[0], -1, BSR)[:, empty].all()) else "wrong"
    return _line(f"the outputs of empty block rows are {how}: a block row with no stored blocks "
                 f"must still write zeros", SECTION["dds"])


def _block_steps(y, bad, args):
    """DDS: exactly the block rows whose block count is not a multiple of a step fail."""
    if y.shape[1] % BSR:
        return None
    count = _block_counts(y, args)
    group_bad = _group_bad(y, bad)
    for step in (2, 4, 8):
        ragged = count % step != 0
        if bool(ragged.any()) and torch.equal(group_bad, ragged):
            return _line(f"a missing tail mask in the block loop: only block rows whose number of stored "
                         f"blocks is not a multiple of {step} are wrong (the last step reads past the "
                         f"row's blocks)", SECTION["dds"])
    return None


# ------------------------------------------------------------ what it computed

def _matches(y, pred, tol) -> bool:
    """Whether ``y`` is ``pred`` up to the rounding of a kernel (MATCH x the task's tolerance)."""
    if not bool(torch.isfinite(y).all()):
        return False
    rms = float(pred.pow(2).mean().sqrt())
    return bool(((y - pred).abs() <= MATCH * tol * (pred.abs() + rms)).all())


def _specific(task, y, r, bad, bound, args):
    if task == "w8a8":
        return _w8a8_rounding(y, r, bad, bound, args)
    if task == "w4a16":
        return _w4a16_weights(y, r, args)
    return _dds_blocks(y, args)


def _w8a8_rounding(y, r, bad, bound, args):
    """Errors that only elements of x at exact ties, or outside the int8 range, can explain."""
    x, qweight_t, input_scale, weight_scale = args
    t = x.float() / input_scale
    wq = qweight_t.double().abs()
    scale = input_scale.double() * weight_scale.double().t()
    err = (y - r).abs()
    failing = bad & torch.isfinite(y)
    if not bool(failing.any()):
        return None
    ties = t == torch.floor(t) + 0.5
    if bool(ties.any()):
        step = (ties.double() @ wq) * scale  # one quantization step per tie
        if bool((err[failing] <= (bound + step * 1.01)[failing]).all()):
            return _line("rounding: only elements where x / s is exactly halfway between two integers "
                         "are off; round half to even (torch.round), not half away from zero",
                         QUANTIZATION)
    outside = (t <= -128.5) | (t >= 127.5)
    if bool(outside.any()):
        wrap = (outside.double() @ wq) * scale * 256  # a wrapped int8 is off by at most 256 steps
        if bool((err[failing] <= (bound + wrap * 1.01)[failing]).all()):
            return _line("no clamp: only rows where x / s leaves [-128, 127] are off; clamp before the "
                         "conversion to int8, which wraps around", SECTION["w8a8"])
    return None


def _w4a16_weights(y, r, args):
    """The product with a plausibly misread int4 weight: unsigned nibbles, reversed nibble order."""
    x, qweight, scales = args
    q = unpack_int4(qweight).double()  # [N, K]
    N, K = q.shape
    s = scales.double().repeat_interleave(K // scales.shape[0], dim=0).t()  # [N, K]
    xd = x.double()
    tol = TOLERANCE["w4a16"]
    unsigned = r + 16.0 * (xd @ ((q < 0).double() * s).t())
    if _matches(y, unsigned, tol):
        return _line("unsigned int4 unpacking: exactly the error of every negative weight read as q + 16; "
                     "the unpack must be signed (shift left, then arithmetic shift right)", SECTION["w4a16"])
    flipped = q.reshape(N, K // 8, 8).flip(-1).reshape(N, K)
    if _matches(y, xd @ (flipped * s).t(), tol):
        return _line("nibble order: weight k = 8r + j is in bits 4j..4j+3 of word r (lowest k in the "
                     "lowest nibble), the kernel reads them the other way round", SECTION["w4a16"])
    if scales.shape[0] > 1:
        unscaled = xd @ q.t()  # one scale per column for all of K fits y exactly
        c = (y * unscaled).sum(0) / unscaled.pow(2).sum(0).clamp_min(1e-300)
        if _matches(y, unscaled * c, tol):
            return _line("group-wise scales: each column looks scaled by one scale for all of K; weight k "
                         "needs scales[k // group_size, n]", SECTION["w4a16"])
    return None


def _dds_blocks(y, args):
    """The product with every stored 32x32 block transposed."""
    x, bsr = args
    blocks = torch.sparse_bsr_tensor(bsr.crow_indices(), bsr.col_indices(), bsr.values().transpose(1, 2),
                                     size=bsr.shape)
    pred = x.double() @ blocks.to_dense().double().t()
    if _matches(y, pred.to(y.device), TOLERANCE["dds"]):
        return _line("each 32x32 block is used transposed: values[b][r, c] is W[32i + r, 32j + c], and the "
                     "dot wants it as [k, n]", SECTION["dds"])
    return None


def _scale(task, y, r, finite, rms):
    """y = ref * a[m] * b[n] with a or b not all 1: a wrong or missing scale."""
    use = finite & (r.abs() > 0.5 * rms)
    ratio = torch.where(use, y / torch.where(use, r, torch.ones_like(r)), torch.ones_like(r))
    if not bool(use.any()) or bool((ratio[use] <= 0).any()):
        return None
    log = torch.where(use, ratio.abs().log(), torch.zeros_like(r))
    w = use.double()
    a = torch.zeros_like(r[:, :1])
    b = torch.zeros_like(r[:1, :])
    for _ in range(25):  # alternating least squares: log(y / ref) ~ a[m] + b[n]
        a = ((log - b) * w).sum(1, keepdim=True) / w.sum(1, keepdim=True).clamp_min(1)
        b = ((log - a) * w).sum(0, keepdim=True) / w.sum(0, keepdim=True).clamp_min(1)
    if bool(((log - a - b).abs() * w > 0.02).any()):
        return None
    a, b = a[w.sum(1) > 0], b[:, w.sum(0) > 0]
    rows = bool((a - a.median()).abs().max() > 0.01)
    cols = bool((b - b.median()).abs().max() > 0.01)
    section = QUANTIZATION if task == "w8a8" else SECTION[task]
    if cols and not rows:
        which = "the weight scale" if task == "w8a8" else "the scale (its index or group)"
        return _line(f"a wrong or missing scale: each output column is off by its own constant factor; "
                     f"check {which}", section)
    if rows and not cols:
        return _line("a wrong or missing scale: each output row is off by its own constant factor; "
                     "check the per-token scale", section)
    if rows or cols:
        return _line("a wrong or missing scale: y[m, n] is off by a factor a[m] * b[n]", section)
    if abs(float(a.median() + b.median())) > 0.01:
        return _line("a wrong scale: every output element is off by the same constant factor", section)
    return None
