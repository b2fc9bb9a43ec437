"""Name the likely cause of a failed correctness check from its error pattern.

``likely_cause(task, out, args, ref)`` compares where and how a kernel's output
differs from the reference with the signatures of known bugs and returns one
line for the report, e.g.

    likely cause: unsigned int4 unpacking: ... (handout: "Task 2: W4A16")

or None when no signature matches. Only failures are explained: an output that
passes the tight check of ``grader.compare`` never gets a cause. It runs on
the trusted side, on the reference's device, and never raises. Each signature
costs a few tensor operations; the dearest (W8A8's rounding slack, a W4A16 or
DDS hypothesis) is one matrix product of the reference's size.

Bug variants that show each signature live in tests/variants/;
tests/test_variants.py checks that every signature names its bug's cause and
no other, and that no faithful kernel and no reference solution gets one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .compare import TOLERANCE, allowed_error, reference_and_slack
from .references import REFERENCES, unpack_int4, w8a8_rounding_slack

# Handout sections the causes point to: headings of handout.md (a test checks them).
QUANTIZATION = "2. Quantization in one page"
TRITON = "3. Triton in one page"
W8A8, W4A16, DDS = "Task 1: W8A8", "Task 2: W4A16", "Task 3: DDS"

# Every cause the grader can print: id -> (text, handout section). The
# troubleshooting table of handout.md quotes each text (a test checks it).
CAUSES = {
    "nothing_stored": ("the output was never stored (all NaN or 0): an empty grid, or a store that is "
                       "masked off", TRITON),
    "rows_not_stored": ("output row(s) {rows} never stored (every value there is wrong, every other row "
                        "right): the grid or the store mask misses them", TRITON),
    "cols_not_stored": ("output column(s) {cols} never stored (every value there is wrong, every other "
                        "column right): the grid or the store mask misses them", TRITON),
    "k_tail_mask": ("a missing K-tail mask: only the last row is NaN, as when the last K tile of x is "
                    "loaded without its mask and reads past the end of x", TRITON),
    "edge_mask": ("NaN only along {where}: a load on a ragged edge without its mask", TRITON),
    "ties": ("rounding mode: the errors come only from elements where x / s is exactly k + 0.5; round "
             "half to even (torch.round), not half away from zero", QUANTIZATION),
    "clamp": ("no clamp: the errors come only from elements where x / s lies outside [-128, 127]; clamp "
              "before the conversion to int8, which wraps around", W8A8),
    "scale": ("a wrong or missing scale: {how}", None),
    "unsigned_unpack": ("unsigned int4 unpacking: exactly the error of every negative weight read as "
                        "q + 16; unpack signed (shift left, then arithmetic shift right)", W4A16),
    "nibble_order": ("nibble order: weight k = 8r + j is in bits 4j..4j+3 of word r (the lowest k in the "
                     "lowest nibble); the kernel reads them the other way round", W4A16),
    "group_scale": ("group-wise scales: each column looks scaled by one scale for all of K; weight k "
                    "needs scales[k // group_size, n]", W4A16),
    "transposed_block": ("each 32x32 block is used transposed: values[b][r, c] is W[32i + r, 32j + c]; "
                         "the dot wants it as [k, n]", DDS),
    "empty_block_rows": ("the outputs of empty block rows are {how}: a block row with no stored blocks "
                         "must still write zeros", DDS),
    "block_loop_tail": ("a missing tail mask in the block loop: only block rows whose number of stored "
                        "blocks is not a multiple of {step} are wrong", DDS),
}
SECTION = {"w8a8": W8A8, "w4a16": W4A16, "dds": DDS}

# A hypothesis "the kernel computed pred" holds when every element is this
# close to pred, in units of the task's tolerance: a buggy kernel's own fp16
# and accumulation rounding, nothing more.
MATCH = 4.0
BSR = 32


@dataclass(frozen=True)
class Cause:
    id: str      # a key of CAUSES
    line: str    # what the report prints


def _cause(task: str, cause_id: str, **fields) -> Cause:
    text, section = CAUSES[cause_id]
    section = section or (QUANTIZATION if task == "w8a8" else SECTION[task])
    return Cause(cause_id, f'likely cause: {text.format(**fields)} (handout: "{section}")')


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
        return _diagnose(task, out, args, ref)
    except Exception:  # noqa: BLE001 - a hint must never break grading
        return None


def _diagnose(task, out, args, ref):
    if task not in SECTION or not isinstance(out, torch.Tensor) or out.layout != torch.strided:
        return None
    if ref is None:
        ref, slack = reference_and_slack(task, args)
    else:
        slack = w8a8_rounding_slack(*args) if task == "w8a8" else None
    if out.dim() != 2 or tuple(out.shape) != tuple(ref.shape) or out.numel() == 0:
        return None
    r = ref.double()
    y = out.to(r.device).double()
    finite = torch.isfinite(y)
    tol = TOLERANCE[task]
    rms = float(r.pow(2).mean().sqrt())
    bound = allowed_error(r, task, slack)
    bad = ~finite | ((y - r).abs() > bound)  # exactly what grader.compare rejects
    if not bool(bad.any()):
        return None
    # A never-written element reads NaN where uninitialized memory is filled
    # with NaN (torch.use_deterministic_algorithms), 0 or a stale value
    # otherwise; a 0 where the reference is 0 too is no evidence either way.
    blank = ~finite | ((y == 0) & (r != 0))
    # Most specific first: whole empty block rows, whole rows, the exact
    # product of a known misreading; then patterns another bug could imitate.
    checks = [
        lambda: _empty_block_rows(y, bad, blank, args, strict=True) if task == "dds" else None,
        lambda: _blank_rows(task, y, r, bad, blank, finite),
        lambda: _specific(task, y, r, bad, bound, args),
        lambda: _empty_block_rows(y, bad, blank, args, strict=False) if task == "dds" else None,
        lambda: _block_loop_tail(y, bad, finite, args) if task == "dds" else None,
        lambda: _blank_cols(task, y, r, bad, blank),
        lambda: _nan_band(task, y, bad, finite),
        lambda: _scale(task, y, r, finite, rms),
    ]
    for check in checks:
        cause = check()
        if cause:
            return cause
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


def _blank_rows(task, y, r, bad, blank, finite):
    """Whole rows never written, or the last row poisoned by a read past the end of x."""
    M = y.shape[0]
    bad_rows = bad.any(1)
    if not _unwritten(bad, blank, r != 0, bad_rows):
        return None
    if bool(bad_rows.all()):
        return _cause(task, "nothing_stored")
    rows = bad_rows.nonzero().flatten()
    if task != "dds" and rows.tolist() == [M - 1] and not bool(finite[M - 1].any()):
        # A K-tail read past the end of a row only leaves x in the last row;
        # the other rows read their neighbour, which meets a zero weight.
        return _cause(task, "k_tail_mask")
    return _cause(task, "rows_not_stored", rows=_span(rows))


def _blank_cols(task, y, r, bad, blank):
    bad_cols = bad.any(0)
    if not _unwritten(bad.t(), blank.t(), (r != 0).t(), bad_cols):
        return None
    return _cause(task, "cols_not_stored", cols=_span(bad_cols.nonzero().flatten()))


def _nan_band(task, y, bad, finite):
    """NaN, with every failure in a band along the last rows or the last columns."""
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
    return _cause(task, "edge_mask", where=where)


def _block_counts(y, args):
    return args[1].crow_indices().to(y.device).diff()


def _group_bad(y, bad):
    """[N // 32] bool: whether the 32 output columns of each block row hold a failure."""
    return bad.view(y.shape[0], -1, BSR).any(2).any(0)


def _empty_block_rows(y, bad, blank, args, strict: bool):
    """DDS: failures only in the outputs of empty block rows.

    ``strict``: exactly those outputs fail, every one of them (never stored
    into NaN-filled memory). Otherwise failures anywhere inside them
    only, as when they hold stale memory with a right 0 here and there.
    """
    if y.shape[1] % BSR:
        return None
    empty = _block_counts(y, args) == 0
    group_bad = _group_bad(y, bad)
    if not bool(group_bad.any()) or bool((group_bad & ~empty).any()):
        return None
    groups = y.shape[0], -1, BSR
    if strict and not (torch.equal(group_bad, empty) and bool(bad.view(groups)[:, empty].all())):
        return None
    how = "never stored" if bool(blank.view(groups)[:, empty].all()) else "wrong or never stored"
    return _cause("dds", "empty_block_rows", how=how)


def _block_loop_tail(y, bad, finite, args):
    """DDS: exactly the block rows whose block count is not a multiple of a step fail.

    Evidence that the count matters, not just which rows hold blocks: a
    non-empty row with a multiple of ``step`` blocks is right, or the last
    non-empty row is all NaN (its last step read past the end of the blocks).
    """
    if y.shape[1] % BSR:
        return None
    count = _block_counts(y, args)
    group_bad = _group_bad(y, bad)
    nonempty = (count > 0).nonzero().flatten()
    if nonempty.numel() == 0:
        return None
    last = int(nonempty[-1])
    last_nan = not bool(finite.view(y.shape[0], -1, BSR)[:, last].any())
    for step in (2, 4, 8):
        ragged = count % step != 0
        evidence = bool(((count > 0) & ~ragged).any()) or (bool(ragged[last]) and last_nan)
        if evidence and torch.equal(group_bad, ragged):
            return _cause("dds", "block_loop_tail", step=step)
    return None


# ------------------------------------------------ what the kernel computed

def _matches(y, pred, tol) -> bool:
    """Whether ``y`` is ``pred`` up to a kernel's rounding (MATCH x the task's tolerance)."""
    if not bool(torch.isfinite(y).all()):
        return False
    rms = float(pred.pow(2).mean().sqrt())
    return bool(((y - pred).abs() <= MATCH * tol * (pred.abs() + rms)).all())


def _specific(task, y, r, bad, bound, args):
    if task == "w8a8":
        return _w8a8_rounding(y, r, bad, bound, args) or _w8a8_missing_scale(y, r, args)
    if task == "w4a16":
        return _w4a16_weights(y, r, args)
    return _dds_blocks(y, args)


def _w8a8_missing_scale(y, r, args):
    """The product without one of the two scales (any M, where the pattern fit of ``_scale`` needs rows)."""
    _, _, input_scale, weight_scale = args
    tol = TOLERANCE["w8a8"]
    if _matches(y, r / weight_scale.double().t(), tol):
        return _cause("w8a8", "scale", how="the weight scale is not applied")
    if _matches(y, r / input_scale.double(), tol):
        return _cause("w8a8", "scale", how="the per-token scale is not applied")
    return None


def _w8a8_rounding(y, r, bad, bound, args):
    """Errors that only the elements of x at exact ties, or outside the int8 range, can explain."""
    x, qweight_t, input_scale, weight_scale = args
    t = x.float() / input_scale
    wq = qweight_t.double().abs()
    scale = input_scale.double() * weight_scale.double().t()
    failing = bad & torch.isfinite(y)
    if not bool(failing.any()) or bool((bad & ~failing).any()):
        return None
    err = (y - r).abs()[failing]
    ties = t == torch.floor(t) + 0.5
    if bool(ties.any()):
        step = (ties.double() @ wq) * scale  # one quantization step per tie
        if bool((err <= (bound + 1.01 * step)[failing]).all()):
            return _cause("w8a8", "ties")
    outside = (t <= -128.5) | (t >= 127.5)  # round(t) leaves [-128, 127]
    if bool(outside.any()):
        wrapped = (outside.double() @ wq) * scale * 256  # a wrapped int8 is off by up to 256 steps
        if bool((err <= (bound + 1.01 * wrapped)[failing]).all()):
            return _cause("w8a8", "clamp")
    return None


def _w4a16_weights(y, r, args):
    """The product with a plausibly misread weight: unsigned nibbles, reversed nibbles, one scale for all K."""
    x, qweight, scales = args
    q = unpack_int4(qweight).double()  # [N, K]
    N, K = q.shape
    s = scales.double().repeat_interleave(K // scales.shape[0], dim=0).t()  # [N, K]
    xd = x.double()
    tol = TOLERANCE["w4a16"]
    if _matches(y, r + 16.0 * (xd @ ((q < 0).double() * s).t()), tol):
        return _cause("w4a16", "unsigned_unpack")
    flipped = q.reshape(N, K // 8, 8).flip(-1).reshape(N, K)
    if _matches(y, xd @ (flipped * s).t(), tol):
        return _cause("w4a16", "nibble_order")
    unscaled = xd @ q.t()
    if _matches(y, unscaled, tol):
        return _cause("w4a16", "scale", how="the scale is not applied")
    if scales.shape[0] > 1:
        c = (y * unscaled).sum(0) / unscaled.pow(2).sum(0).clamp_min(1e-300)  # best scale per column
        if _matches(y, unscaled * c, tol):
            return _cause("w4a16", "group_scale")
    return None


def _dds_blocks(y, args):
    """The product with every stored 32x32 block transposed."""
    x, bsr = args
    blocks = torch.sparse_bsr_tensor(bsr.crow_indices(), bsr.col_indices(), bsr.values().transpose(1, 2),
                                     size=bsr.shape, check_invariants=False)
    pred = x.double() @ blocks.to_dense().double().t()
    if _matches(y, pred.to(y.device), TOLERANCE["dds"]):
        return _cause("dds", "transposed_block")
    return None


def _scale(task, y, r, finite, rms):
    """y = ref * f[m, n] with log f[m, n] = a[m] + b[n], f not 1: a wrong or missing scale."""
    use = finite & (r.abs() > 0.5 * rms)
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
        how = ("each output column is off by its own constant factor; check the "
               + ("weight scale" if task == "w8a8" else "scale's index or group"))
    elif rows and not cols:
        how = "each output row is off by its own constant factor; check the per-token scale"
    elif rows or cols:
        how = "y[m, n] is off by a factor a[m] * b[n]; check both scales"
    elif abs(float(a.median() + b.median())) > 0.01:
        how = "every output element is off by the same constant factor"
    else:
        return None
    return _cause(task, "scale", how=how)
