"""W4A16 with block pointers: x and the packed words loaded through tl.make_block_ptr with
boundary_check and tl.advance, each word loaded once and expanded to its 8 k; block-pointer store."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs


@triton.jit
def _w4a16_kernel(x_ptr, qw_ptr, s_ptr, y_ptr, M, N, K, group_size,
                  stride_xm, stride_xk, stride_qr, stride_qn, stride_sg, stride_sn, stride_ym, stride_yn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    x_block = tl.make_block_ptr(base=x_ptr, shape=(M, K), strides=(stride_xm, stride_xk),
                                offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K), order=(1, 0))
    w_block = tl.make_block_ptr(base=qw_ptr, shape=(K // 8, N), strides=(stride_qr, stride_qn),
                                offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K // 8, BLOCK_N), order=(1, 0))
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    shifts = 28 - (offs_k % 8) * 4   # brings nibble k % 8 to the top of its word

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(x_block, boundary_check=(0, 1), padding_option="zero")
        packed = tl.load(w_block, boundary_check=(0, 1), padding_option="zero")   # [BLOCK_K // 8, BLOCK_N]
        words = tl.reshape(tl.broadcast_to(packed[:, None, :], (BLOCK_K // 8, 8, BLOCK_N)), (BLOCK_K, BLOCK_N))
        q = (words << shifts[:, None]) >> 28                                     # signed, in [-8, 7]
        k = k0 + offs_k
        s = tl.load(s_ptr + (k // group_size)[:, None] * stride_sg + offs_n[None, :] * stride_sn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, q.to(tl.float16) * s, acc)
        x_block = tl.advance(x_block, (0, BLOCK_K))
        w_block = tl.advance(w_block, (BLOCK_K // 8, 0))

    y_block = tl.make_block_ptr(base=y_ptr, shape=(M, N), strides=(stride_ym, stride_yn),
                                offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N),
                                order=(1, 0))
    tl.store(y_block, acc.to(tl.float16), boundary_check=(0, 1))


def w4a16_mm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W4A16 matrix multiply: y = x @ dequant(qweight)^T; see handout section 5."""
    M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
    x = x.contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    BLOCK_M, BLOCK_N, BLOCK_K = 32, 64, 64
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _w4a16_kernel[grid](
        x, qweight, scales, y, M, N, K, group_size,
        x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1),
        scales.stride(0), scales.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
    )
    return y
