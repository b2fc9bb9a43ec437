"""W4A16 with split-K: a third grid axis splits K, each program adds its fp32 partial tile
into a zeroed fp32 buffer with tl.atomic_add; the buffer is cast to fp16 at the end."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs


@triton.jit
def _w4a16_splitk_kernel(x_ptr, qw_ptr, s_ptr, acc_ptr, M, N, K, group_size, k_per_split,
                         stride_xm, stride_xk, stride_qr, stride_qn, stride_sg, stride_sn, stride_am, stride_an,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        k = k0 + offs_k
        k_mask = k < k_end
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & k_mask[None, :], other=0.0)
        words = tl.load(qw_ptr + (k // 8)[:, None] * stride_qr + offs_n[None, :] * stride_qn,
                        mask=k_mask[:, None] & (offs_n[None, :] < N), other=0)
        q = (words << (28 - (k % 8) * 4)[:, None]) >> 28
        s = tl.load(s_ptr + (k // group_size)[:, None] * stride_sg + offs_n[None, :] * stride_sn,
                    mask=k_mask[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, q.to(tl.float16) * s, acc)
    tl.atomic_add(acc_ptr + offs_m[:, None] * stride_am + offs_n[None, :] * stride_an, acc,
                  mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def w4a16_mm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W4A16 matrix multiply: y = x @ dequant(qweight)^T; see handout section 5."""
    M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
    x = x.contiguous()
    acc = torch.zeros((M, N), device=x.device, dtype=torch.float32)
    BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K = 16, 64, 64, 4
    k_per_split = triton.cdiv(triton.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K   # whole K steps per split
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N), triton.cdiv(K, k_per_split))
    _w4a16_splitk_kernel[grid](
        x, qweight, scales, acc, M, N, K, group_size, k_per_split,
        x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1),
        scales.stride(0), scales.stride(1), acc.stride(0), acc.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
    )
    return acc.to(torch.float16)
