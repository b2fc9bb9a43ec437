"""Plain-PyTorch references for the three kernels, computed by the grader.

They reproduce the quantization exactly (W8A8: exact integer accumulation in
float64), so the comparison tolerances can be tight.
"""

from __future__ import annotations

import torch


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """[K // 8, N] int32 -> [N, K] int64 in [-8, 7] (signed nibbles)."""
    R, N = packed.shape
    words = packed.to(torch.int64) & 0xFFFFFFFF
    nibbles = torch.stack([(words >> (4 * j)) & 0xF for j in range(8)], dim=1)  # [R, 8, N]
    nibbles = torch.where(nibbles >= 8, nibbles - 16, nibbles)
    return nibbles.reshape(R * 8, N).t()


def w8a8_reference(x, qweight_t, input_scale, weight_scale) -> torch.Tensor:
    """fp16 [M, N], bit-exact: int32-exact accumulation, then acc * s_x * s_w in fp32."""
    xq = torch.clamp(torch.round(x.float() / input_scale), -128, 127)
    acc = xq.double() @ qweight_t.double()  # exact: |acc| < 2**53
    return (acc.float() * input_scale * weight_scale.t()).to(torch.float16)


def w8a8_rounding_slack(x, qweight_t, input_scale, weight_scale, ulps: int = 4) -> torch.Tensor:
    """float64 [M, N]: how far a faithful W8A8 kernel may be from the reference.

    A kernel may compute x / s with Triton's fast approximate division (about
    2 ulp on a GPU) or as x * (1 / s). Where x / s lies within ``ulps`` ulp of
    a rounding boundary (k + 0.5), either integer is a faithful quantization,
    and the product moves by s_x * s_w * |w_q| for that element. That includes
    exact ties, unless the row's scale is a power of two: then every faithful
    division is exact and a tie must round half to even (the rounding_ties
    case is built that way).
    """
    t = x.float() / input_scale
    boundary = torch.floor(t) + 0.5
    ulp = torch.finfo(torch.float32).eps * t.abs().clamp_min(1.0)
    exact_scale = torch.frexp(input_scale.float()).mantissa == 0.5  # [M, 1]: s = 2^e
    ambiguous = ((t - boundary).abs() <= ulps * ulp) & ~((t == boundary) & exact_scale)
    wq = qweight_t.double().abs()  # [K, N]
    return (ambiguous.double() @ wq) * input_scale.double() * weight_scale.double().t()


def w4a16_reference(x, qweight, scales) -> torch.Tensor:
    """float64 [M, N]: x @ (q * s)^T with the dequantized weight exact in fp32."""
    q = unpack_int4(qweight)
    N, K = q.shape
    s = scales.float().repeat_interleave(K // scales.shape[0], dim=0).t()  # [N, K]
    return x.double() @ (q.float() * s).double().t()


def dds_reference(x, weight_bsr) -> torch.Tensor:
    """float64 [M, N]: x @ W^T with W the dense form of the BSR weight."""
    return x.double() @ weight_bsr.to_dense().double().t()


REFERENCES = {"w8a8": w8a8_reference, "w4a16": w4a16_reference, "dds": dds_reference}
