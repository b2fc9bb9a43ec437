"""W4A16: fp16 activations times int4 weights packed 8 per int32.

    y[m, n] = sum_k x[m, k] * q[n, k] * s[k // group_size, n]

``qweight[r, n]`` holds ``q[n, 8r + j]`` in bits 4j..4j+3, each a signed
(two's-complement) int4 in [-8, 7].

Tutorial-style baseline: the stub's plan written out in the simplest way. The kernel keeps the
stub's signature: tests/kernels/test_stubs.py splices this body into the stub to check the stub's wrapper.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs


@triton.jit
def _w4a16_kernel(
    x_ptr, qw_ptr, s_ptr, y_ptr, M, N, K, group_size,
    stride_xm, stride_xk, stride_qr, stride_qn, stride_sg, stride_sn, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of y; launch on a grid (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)).

    BLOCK_K counts unpacked k values and is a multiple of 8.
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        words = tl.load(qw_ptr + (k // 8)[:, None] * stride_qr + offs_n[None, :] * stride_qn,
                        mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0)
        shift = (28 - 4 * (k % 8))[:, None]
        w = ((words << shift) >> 28).to(tl.float16)
        s = tl.load(s_ptr + (k // group_size)[:, None] * stride_sg + offs_n[None, :] * stride_sn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(x, w * s, acc)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def w4a16_mm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W4A16 matrix multiply: y = x @ dequant(qweight)^T.

    Shapes, dtypes and errors: the docstring in assignment/w4a16.py.
    """
    M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    _w4a16_kernel[grid](x, qweight, scales, y, M, N, K, group_size,
                        x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1),
                        scales.stride(0), scales.stride(1), y.stride(0), y.stride(1),
                        BLOCK_M=64, BLOCK_N=64, BLOCK_K=64)
    return y
