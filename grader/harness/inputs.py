"""Random inputs for one graded call, rebuilt bit-for-bit from (case, seed, device).

Only the harness draws inputs: it keeps a private copy for the reference and
puts another into the arena the worker reads. They are drawn on the device
that runs the kernel, so full-size GPU cases cost no host work.
"""

from __future__ import annotations

import warnings

import torch

BSR_BLOCK = 32


def _gen(seed: int, device: str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _activations(M: int, K: int, zero_rows: int, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(M, K, generator=g)
    # A few larger entries per row, as real activations have: they set the
    # per-token scale, so the rest of the row uses fewer int8 levels.
    spikes = torch.randint(0, K, (M, 2), generator=g)
    x.scatter_(1, spikes, 8.0 * torch.randn(M, 2, generator=g))
    if zero_rows:
        x[torch.randperm(M, generator=g)[:zero_rows]] = 0.0
    return x.to(torch.float16)


def _row_scale(t: torch.Tensor, qmax: int) -> torch.Tensor:
    return (t.abs().amax(dim=1, keepdim=True).float() / qmax).clamp_min(1e-8)


def pack_int4_reference(q: torch.Tensor) -> torch.Tensor:
    """[N, K] int8 in [-8, 7] -> [K // 8, N] int32, nibble j of word r = q[n, 8r + j]."""
    N, K = q.shape
    words = torch.zeros(K // 8, N, dtype=torch.int64)
    for j in range(8):
        words |= (q[:, j::8].t().to(torch.int64) & 0xF) << (4 * j)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def w8a8_inputs(M, N, K, g, zero_rows=0, ties=False):
    w = torch.randn(N, K, generator=g).to(torch.float16)
    weight_scale = _row_scale(w, 127)
    qweight = torch.clamp(torch.round(w.float() / weight_scale), -128, 127).to(torch.int8)
    if ties:
        # x / scale = k + 0.5 exactly: round-half-to-even and clamping are visible.
        input_scale = torch.full((M, 1), 0.25)
        x = ((torch.randint(-140, 140, (M, K), generator=g) + 0.5) * 0.25).to(torch.float16)
    else:
        x = _activations(M, K, zero_rows, g)
        input_scale = _row_scale(x, 127)
    # The kernel gets the transposed view of the [N, K] weight, strides (1, K).
    return (x, qweight.t(), input_scale, weight_scale), {"weight": w}


def w4a16_inputs(M, N, K, g, zero_rows=0, group_size=None):
    gs = group_size or K
    w = torch.randn(N, K, generator=g).to(torch.float16)
    groups = w.float().reshape(N, K // gs, gs)
    scales = (groups.abs().amax(dim=2, keepdim=True) / 7).to(torch.float16).clamp_min(
        torch.finfo(torch.float16).tiny)  # after the cast: 1e-8 would round to 0 in fp16
    q = torch.clamp(torch.round(groups / scales.float()), -8, 7).to(torch.int8).reshape(N, K)
    x = _activations(M, K, zero_rows, g)
    return (x, pack_int4_reference(q), scales.squeeze(2).t().contiguous()), {"weight": w}


def dds_inputs(M, N, K, g, zero_rows=0, density=0.25, empty_rows=0, index_dtype="int64"):
    rows, cols = N // BSR_BLOCK, K // BSR_BLOCK
    keep = torch.zeros(rows * cols, dtype=torch.bool)
    keep[torch.randperm(rows * cols, generator=g)[: round(density * rows * cols)]] = True
    keep = keep.view(rows, cols)
    if empty_rows:
        keep[torch.randperm(rows, generator=g)[:empty_rows]] = False
    mask = keep.repeat_interleave(BSR_BLOCK, 0).repeat_interleave(BSR_BLOCK, 1)
    w = (torch.randn(N, K, generator=g) * mask).to(torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse BSR support is in beta"
        bsr = w.to_sparse_bsr((BSR_BLOCK, BSR_BLOCK))
        if index_dtype == "int32":
            bsr = torch.sparse_bsr_tensor(bsr.crow_indices().int(), bsr.col_indices().int(),
                                          bsr.values(), size=bsr.shape)
    x = _activations(M, K, zero_rows, g)
    return (x, bsr), {"weight": w}


BUILDERS = {"w8a8": w8a8_inputs, "w4a16": w4a16_inputs, "dds": dds_inputs}


def make_inputs(task: str, shape, options: dict, seed: int, device: str = "cpu"):
    """(args for the kernel call, extras for the checks), on ``device``.

    The same (task, shape, options, seed, device) always gives the same numbers.
    """
    M, N, K = shape
    with torch.device(device):  # every factory call below allocates on ``device``
        return BUILDERS[task](M, N, K, _gen(seed, device), **options)


# The kernel arguments' names (assignment/*.py); a BSR weight's parts are
# "<name>.crow_indices", "<name>.col_indices" and "<name>.values".
ARG_NAMES = {"w8a8": ("x", "qweight_t", "input_scale", "weight_scale"), "w4a16": ("x", "qweight", "scales"),
             "dds": ("x", "weight_bsr")}

# Which kernel arguments are a call's activations (fresh for every timed call);
# the others are the layer's weights.
ACTIVATION_ARGS = {"w8a8": (0, 2), "w4a16": (0,), "dds": (0,)}


def fresh_activations(task: str, args: dict, seed: int) -> None:
    """Refill a call's activations in place (``args``: index -> tensor) with new
    random values; W8A8's per-token scale follows its new rows."""
    x = args[0]
    g = torch.Generator(device=x.device).manual_seed(seed)
    x.copy_(torch.randn(x.shape, generator=g, device=x.device, dtype=torch.float32))
    if task == "w8a8":
        args[2].copy_(_row_scale(x, 127))
