"""Task 2, W4A16: fp16 activations times a signed int4 weight, packed eight to an int32.

    y[m, n] = sum_k x[m, k] * q[n, k] * scales[k // group_size, n]

``qweight`` is ``[K // 8, N]`` int32: nibble j (bits 4j..4j+3) of word
``[r, n]`` holds ``q[n, 8r + j]`` in two's complement (the handout's "Task 2: W4A16"). ``scales`` is
fp16 ``[K // group_size, N]``; one group (per-channel scales) by default.
"""

from __future__ import annotations

import torch

from .base import Option, Task
from .common import QUANT_BENCH_CASES, ZERO_ROWS, activations, matches, refresh_x


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """[N, K] int8 in [-8, 7] -> [K // 8, N] int32, nibble j of word r = q[n, 8r + j]."""
    N, K = q.shape
    words = torch.zeros(K // 8, N, dtype=torch.int64)
    for j in range(8):
        words |= (q[:, j::8].t().to(torch.int64) & 0xF) << (4 * j)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """[K // 8, N] int32 -> [N, K] int64 in [-8, 7] (signed nibbles)."""
    R, N = packed.shape
    words = packed.to(torch.int64) & 0xFFFFFFFF
    nibbles = torch.stack([(words >> (4 * j)) & 0xF for j in range(8)], dim=1)  # [R, 8, N]
    nibbles = torch.where(nibbles >= 8, nibbles - 16, nibbles)
    return nibbles.reshape(R * 8, N).t()


def build_inputs(M, N, K, g, zero_rows, group_size):
    gs = group_size or K
    w = torch.randn(N, K, generator=g).to(torch.float16)
    groups = w.float().reshape(N, K // gs, gs)
    scales = (groups.abs().amax(dim=2, keepdim=True) / 7).to(torch.float16).clamp_min(
        torch.finfo(torch.float16).tiny)  # after the cast: 1e-8 would round to 0 in fp16
    q = torch.clamp(torch.round(groups / scales.float()), -8, 7).to(torch.int8).reshape(N, K)
    x = activations(M, K, zero_rows, g)
    return (x, pack_int4(q), scales.squeeze(2).t().contiguous()), {"weight": w}


def _dequantized(qweight, scales) -> torch.Tensor:
    """fp32 [N, K]: the weight the kernel multiplies by, exact."""
    q = unpack_int4(qweight)
    N, K = q.shape
    s = scales.float().repeat_interleave(K // scales.shape[0], dim=0).t()  # [N, K]
    return q.float() * s


def reference(x, qweight, scales) -> torch.Tensor:
    """float64 [M, N]: x @ (q * s)^T with the dequantized weight exact in fp32."""
    return x.double() @ _dequantized(qweight, scales).double().t()


def shape_problem(shape, options) -> str | None:
    K = shape[2]
    if K % 8:
        return f"K must be a multiple of 8 (eight int4 weights per int32), got {K}"
    group = options.get("group_size")
    if group and K % group:
        return f"K ({K}) must be a multiple of group_size ({group})"
    return None


def floor_parts(shape, options) -> dict[str, int]:
    M, N, K = shape
    groups = K // (options.get("group_size") or K)
    return {"x": 2 * M * K, "qweight": N * K // 2, "scales": 2 * groups * N, "output": 2 * M * N}


def dot_flops(shape, options) -> int:
    M, N, K = shape
    return 2 * M * N * K


# ---------------------------------------------------------------- likely causes

def _misread_weight(f):
    """The product with a plausibly misread weight: unsigned nibbles, reversed nibbles, one scale for all K."""
    x, qweight, scales = f.args
    q = unpack_int4(qweight).double()  # [N, K]
    N, K = q.shape
    s = scales.double().repeat_interleave(K // scales.shape[0], dim=0).t()  # [N, K]
    xd = x.double()
    tol = TASK.tolerance
    if matches(f.y, f.ref + 16.0 * (xd @ ((q < 0).double() * s).t()), tol):
        return "unsigned_unpack", {}
    flipped = q.reshape(N, K // 8, 8).flip(-1).reshape(N, K)
    if matches(f.y, xd @ (flipped * s).t(), tol):
        return "nibble_order", {}
    unscaled = xd @ q.t()
    if matches(f.y, unscaled, tol):
        return "scale", {"how": "the scale is not applied"}
    if scales.shape[0] > 1:
        c = (f.y * unscaled).sum(0) / unscaled.pow(2).sum(0).clamp_min(1e-300)  # best scale per column
        if matches(f.y, unscaled * c, tol):
            return "group_scale", {}
    return None


# ---------------------------------------------------------------- the benchmark

def _tinygemm(args, extras):
    """torch._weight_int4pack_mm (bf16 activations, groups of 128) on the same weight."""
    x, w = args[0], extras["weight"]
    N, K = w.shape
    g = w.float().reshape(N, K // 128, 128)
    scale = (g.abs().amax(2, keepdim=True) / 7).clamp_min(1e-8)
    q = (torch.clamp(torch.round(g / scale), -8, 7) + 8).to(torch.int32).reshape(N, K)
    packed = torch._convert_weight_to_int4pack((q[:, 1::2] << 4 | q[:, ::2]).to(torch.uint8), 8)
    sz = torch.stack([scale.squeeze(2).t(), torch.zeros_like(scale.squeeze(2).t())], 2).to(torch.bfloat16)
    xb = x.to(torch.bfloat16)
    return lambda: torch._weight_int4pack_mm(xb, packed, 128, sz.contiguous())


TASK = Task(
    name="w4a16", file="w4a16.py", entry="w4a16_mm", title="W4A16 (QuantLinear_w4a16 -> w4a16_mm)",
    handout_section="5. Task 2: W4A16",
    arg_names=("x", "qweight", "scales"), activation_args=(0,),
    options={"zero_rows": ZERO_ROWS,
             "group_size": Option("int", 1, None, None, "K weights per scale (default: all of K)")},
    build_inputs=build_inputs, refresh_activations=refresh_x, reference=reference,
    # fp32 accumulation order and, for a weight dequantized in fp16, one more
    # rounding of each weight: 2e-3 is about four fp16 ulps, ten times less
    # than any real bug (a wrong nibble is an O(1) error).
    tolerance=2e-3,
    sanity=0.35,   # int4 rounds to 1/15 of each channel's range
    floor_parts=floor_parts, dot_flops=dot_flops, shape_problem=shape_problem,
    causes={
        "unsigned_unpack": ("unsigned int4 unpacking: exactly the error of every negative weight read as "
                            "q + 16; unpack signed (shift left, then arithmetic shift right)", None),
        "nibble_order": ("nibble order: weight k = 8r + j is in bits 4j..4j+3 of word r (the lowest k in the "
                         "lowest nibble); the kernel reads them the other way round", None),
        "group_scale": ("group-wise scales: each column looks scaled by one scale for all of K; weight k "
                        "needs scales[k // group_size, n]", None),
    },
    signatures={"specific": (_misread_weight,)},
    column_scale_hint="scale's index or group",
    bench_cases=QUANT_BENCH_CASES,
    anchors={"int4pack_mm": _tinygemm},
)
