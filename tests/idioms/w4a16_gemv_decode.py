"""W4A16 with a GEMV-style decode kernel for small M (broadcast multiply + tl.sum over the
unpacked weight tile) beside a tl.dot kernel for larger M; a shared @triton.jit unpack helper."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs

GEMV_MAX_M = 4


@triton.jit
def _dequant_tile(qw_ptr, s_ptr, k, offs_n, N, K, group_size, stride_qr, stride_qn, stride_sg, stride_sn):
    """The fp16 weight tile [len(k), len(offs_n)]: signed nibble k % 8 of word k // 8, times its scale."""
    mask = (k[:, None] < K) & (offs_n[None, :] < N)
    words = tl.load(qw_ptr + (k // 8)[:, None] * stride_qr + offs_n[None, :] * stride_qn, mask=mask, other=0)
    q = (words << (28 - (k % 8) * 4)[:, None]) >> 28
    s = tl.load(s_ptr + (k // group_size)[:, None] * stride_sg + offs_n[None, :] * stride_sn, mask=mask, other=0.0)
    return q.to(tl.float16) * s


@triton.jit
def _w4a16_gemv_kernel(x_ptr, qw_ptr, s_ptr, y_ptr, N, K, group_size,
                       stride_xm, stride_xk, stride_qr, stride_qn, stride_sg, stride_sn, stride_ym, stride_yn,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(x_ptr + m * stride_xm + k * stride_xk, mask=k < K, other=0.0)
        w = _dequant_tile(qw_ptr, s_ptr, k, offs_n, N, K, group_size, stride_qr, stride_qn, stride_sg, stride_sn)
        acc += tl.sum(a.to(tl.float32)[:, None] * w.to(tl.float32), axis=0)
    tl.store(y_ptr + m * stride_ym + offs_n * stride_yn, acc.to(tl.float16), mask=offs_n < N)


@triton.jit
def _w4a16_kernel(x_ptr, qw_ptr, s_ptr, y_ptr, M, N, K, group_size,
                  stride_xm, stride_xk, stride_qr, stride_qn, stride_sg, stride_sn, stride_ym, stride_yn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        w = _dequant_tile(qw_ptr, s_ptr, k, offs_n, N, K, group_size, stride_qr, stride_qn, stride_sg, stride_sn)
        acc = tl.dot(a, w, acc)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def w4a16_mm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W4A16 matrix multiply: y = x @ dequant(qweight)^T; see handout section 5."""
    M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
    x = x.contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    args = (x, qweight, scales, y)
    strides = (x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1),
               scales.stride(0), scales.stride(1), y.stride(0), y.stride(1))
    if M <= GEMV_MAX_M:
        BLOCK_N, BLOCK_K = 64, 64
        _w4a16_gemv_kernel[(M, triton.cdiv(N, BLOCK_N))](*args, N, K, group_size, *strides,
                                                          BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    else:
        BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        _w4a16_kernel[grid](*args, M, N, K, group_size, *strides, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return y
