"""W8A8, bug: rounds half up (``floor(v + 0.5)``) instead of half to even.
Only exact ties differ: 2.5 -> 3 instead of 2, -1.5 -> -1 instead of -2."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w8a8_inputs

_MAGIC = tl.constexpr(12582912.0)


@triton.jit
def _w8a8_kernel(
    x_ptr, w_ptr, sx_ptr, sw_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_wk, stride_wn, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of y; launch on a grid (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    s_x = tl.load(sx_ptr + offs_m, mask=offs_m < M, other=1.0)
    s_w = tl.load(sw_ptr + offs_n, mask=offs_n < N, other=0.0)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        v = tl.math.div_rn(x.to(tl.float32), s_x[:, None])
        v = tl.minimum(tl.maximum(v, -128.0), 127.0)
        q = tl.floor(v + 0.5).to(tl.int8)
        w = tl.load(w_ptr + k[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0)
        acc = tl.dot(q, w, acc, out_dtype=tl.int32)
    y = acc.to(tl.float32) * s_x[:, None] * s_w[None, :]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, y.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def w8a8_mm(
    x: torch.Tensor,
    qweight_t: torch.Tensor,
    input_scale: torch.Tensor,
    weight_scale: torch.Tensor,
) -> torch.Tensor:
    """W8A8 matrix multiply: y = dequant(quant(x) @ qweight_t).

    Shapes, dtypes and errors: the docstring in assignment/w8a8.py.
    """
    M, N, K = check_w8a8_inputs(x, qweight_t, input_scale, weight_scale)
    input_scale, weight_scale = input_scale.to(torch.float32), weight_scale.to(torch.float32)
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    _w8a8_kernel[grid](x, qweight_t, input_scale, weight_scale, y, M, N, K,
                       x.stride(0), x.stride(1), qweight_t.stride(0), qweight_t.stride(1),
                       y.stride(0), y.stride(1), BLOCK_M=64, BLOCK_N=64, BLOCK_K=64)
    return y
