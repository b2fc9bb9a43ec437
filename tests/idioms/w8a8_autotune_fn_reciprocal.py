"""W8A8 autotuned in function form (_kernel_tuned = triton.autotune(...)(_kernel)),
quantizing with x * (1.0 / s) as the handout allows."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w8a8_inputs

ROUND_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2**23


@triton.jit
def _w8a8_kernel(x_ptr, w_ptr, sx_ptr, sw_ptr, y_ptr, M, N, K,
                 stride_xm, stride_xk, stride_wk, stride_wn, stride_ym, stride_yn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    sx = tl.load(sx_ptr + offs_m, mask=offs_m < M, other=1.0)
    sw = tl.load(sw_ptr + offs_n, mask=offs_n < N, other=1.0)
    inv_sx = 1.0 / sx   # one division per row, a multiply per element

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        v = a.to(tl.float32) * inv_sx[:, None]
        v = tl.minimum(tl.maximum(v, -128.0), 127.0)
        q = ((v + ROUND_MAGIC) - ROUND_MAGIC).to(tl.int8)
        b = tl.load(w_ptr + k[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0)
        acc = tl.dot(q, b, acc, out_dtype=tl.int32)

    y = acc.to(tl.float32) * sx[:, None] * sw[None, :]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, y.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


_w8a8_kernel_tuned = triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 128}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256}, num_warps=4, num_stages=4),
    ],
    key=["M", "N", "K"],
)(_w8a8_kernel)


def w8a8_mm(x: torch.Tensor, qweight_t: torch.Tensor, input_scale: torch.Tensor,
            weight_scale: torch.Tensor) -> torch.Tensor:
    """W8A8 matrix multiply: y = dequant(quant(x) @ qweight_t); see handout section 4."""
    M, N, K = check_w8a8_inputs(x, qweight_t, input_scale, weight_scale)
    x = x.contiguous()
    input_scale = input_scale.to(torch.float32).contiguous()
    weight_scale = weight_scale.to(torch.float32).contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))  # noqa: E731
    _w8a8_kernel_tuned[grid](
        x, qweight_t, input_scale, weight_scale, y, M, N, K,
        x.stride(0), x.stride(1), qweight_t.stride(0), qweight_t.stride(1), y.stride(0), y.stride(1),
    )
    return y
