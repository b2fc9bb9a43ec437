"""W8A8 with a GEMV-style decode kernel for small M (broadcast multiply + tl.sum, one
program per row and column block) beside the tl.dot kernel for larger M."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w8a8_inputs

ROUND_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2**23
GEMV_MAX_M = 4


@triton.jit
def _w8a8_gemv_kernel(x_ptr, w_ptr, sx_ptr, sw_ptr, y_ptr, N, K,
                      stride_xm, stride_xk, stride_wk, stride_wn, stride_ym, stride_yn,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    sx = tl.load(sx_ptr + m)
    sw = tl.load(sw_ptr + offs_n, mask=offs_n < N, other=1.0)
    acc = tl.zeros((BLOCK_N,), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(x_ptr + m * stride_xm + k * stride_xk, mask=k < K, other=0.0)
        v = tl.minimum(tl.maximum(a.to(tl.float32) / sx, -128.0), 127.0)
        q = ((v + ROUND_MAGIC) - ROUND_MAGIC).to(tl.int32)
        b = tl.load(w_ptr + k[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0)
        acc += tl.sum(q[:, None] * b.to(tl.int32), axis=0)
    y = acc.to(tl.float32) * sx * sw
    tl.store(y_ptr + m * stride_ym + offs_n * stride_yn, y.to(tl.float16), mask=offs_n < N)


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
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        v = tl.minimum(tl.maximum(a.to(tl.float32) / sx[:, None], -128.0), 127.0)
        q = ((v + ROUND_MAGIC) - ROUND_MAGIC).to(tl.int8)
        b = tl.load(w_ptr + k[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0)
        acc = tl.dot(q, b, acc, out_dtype=tl.int32)
    y = acc.to(tl.float32) * sx[:, None] * sw[None, :]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, y.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def w8a8_mm(x: torch.Tensor, qweight_t: torch.Tensor, input_scale: torch.Tensor,
            weight_scale: torch.Tensor) -> torch.Tensor:
    """W8A8 matrix multiply: y = dequant(quant(x) @ qweight_t); see handout section 4."""
    M, N, K = check_w8a8_inputs(x, qweight_t, input_scale, weight_scale)
    x = x.contiguous()
    input_scale = input_scale.to(torch.float32).contiguous()
    weight_scale = weight_scale.to(torch.float32).contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    args = (x, qweight_t, input_scale, weight_scale, y)
    strides = (x.stride(0), x.stride(1), qweight_t.stride(0), qweight_t.stride(1), y.stride(0), y.stride(1))

    if M <= GEMV_MAX_M:
        BLOCK_N, BLOCK_K = 64, 128
        _w8a8_gemv_kernel[(M, triton.cdiv(N, BLOCK_N))](*args, N, K, *strides, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    else:
        BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        _w8a8_kernel[grid](*args, M, N, K, *strides, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return y
