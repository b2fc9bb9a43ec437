"""The bench's fair limit for a Triton kernel: Triton's own fp16 GEMM.

The kernel is the one of Triton's tutorial 03 (matrix multiplication): an
fp16 ``tl.dot`` over K with an fp32 accumulator, programs grouped along M for
L2 reuse, autotuned over the tutorial's CUDA configurations on (M, N, K). It
computes ``x @ w.t()`` for the task's fp16 activation and fp16 weight, the
product fp16 torch.matmul computes, so that a quantized Triton kernel can be
read against what Triton itself reaches at the same shape (cuBLAS is the
other anchor, ``fp16`` in the bench's table).

    from bench.triton_fp16 import triton_fp16_matmul
    y = triton_fp16_matmul(x, w)        # x [M, K] fp16, w [N, K] fp16 -> [M, N] fp16
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def _config(m: int, n: int, k: int, stages: int, warps: int) -> triton.Config:
    return triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8},
                         num_stages=stages, num_warps=warps)


# Tutorial 03's fp16 configurations for CUDA (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps).
CONFIGS = [_config(*c) for c in ((128, 256, 64, 3, 8), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4),
                                 (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 32, 32, 4, 4),
                                 (64, 32, 32, 5, 2), (32, 64, 32, 5, 2))]


@triton.jit
def matmul_kernel(x_ptr, w_ptr, y_ptr, M, N, K,
                  stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    # Grouped ordering: GROUP_M rows of programs share their columns of w while they are in L2.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_in_group = GROUP_M * num_pid_n
    first_m = (pid // num_in_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % num_in_group) % group_m)
    pid_n = (pid % num_in_group) // group_m

    # Rows and columns past the edge wrap around (modulo M and N), as in the tutorial: their loads
    # stay in bounds without a mask, and the store's mask drops them.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn   # w.t() as [K, N]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    offs_ym = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_yn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    y_ptrs = y_ptr + offs_ym[:, None] * stride_ym + offs_yn[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(tl.float16), mask=(offs_ym[:, None] < M) & (offs_yn[None, :] < N))


autotuned_matmul_kernel = triton.autotune(configs=CONFIGS, key=["M", "N", "K"])(matmul_kernel)


def triton_fp16_matmul(x: torch.Tensor, w: torch.Tensor, kernel=autotuned_matmul_kernel, **meta) -> torch.Tensor:
    """``x @ w.t()`` by tutorial 03's kernel. ``kernel`` and ``meta`` let a caller launch the
    plain kernel with one configuration of its own (the interpreter cannot autotune)."""
    if x.dtype != torch.float16 or w.dtype != torch.float16:
        raise TypeError(f"triton_fp16_matmul takes fp16 x and w, got {x.dtype} and {w.dtype}")
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"expected x [M, K] and w [N, K], got {tuple(x.shape)} and {tuple(w.shape)}")
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)

    def grid(m):
        return (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]),)
    kernel[grid](x, w, y, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                 y.stride(0), y.stride(1), **meta)
    return y
