"""W4A16 that unpacks nibbles with shifts and masks inside the K loop: each packed word is
loaded once, and tl.static_range(8) takes nibble j of every word for the k = 8r + j of x."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs


@triton.jit
def _w4a16_kernel(x_ptr, qw_ptr, s_ptr, y_ptr, M, N, K, group_size,
                  stride_xm, stride_xk, stride_qr, stride_qn, stride_sg, stride_sn, stride_ym, stride_yn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    """BLOCK_R packed rows (8 * BLOCK_R values of k) per K step."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_r = tl.arange(0, BLOCK_R)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for r0 in range(0, K // 8, BLOCK_R):
        r = r0 + offs_r
        words = tl.load(qw_ptr + r[:, None] * stride_qr + offs_n[None, :] * stride_qn,
                        mask=(r[:, None] < K // 8) & (offs_n[None, :] < N), other=0)
        for j in tl.static_range(8):
            k = r * 8 + j                                  # the k that nibble j of row r holds
            nib = (words >> (4 * j)) & 0xF                 # [0, 15]
            q = nib - ((nib & 0x8) << 1)                   # two's complement: 8..15 -> -8..-1
            s = tl.load(s_ptr + (k // group_size)[:, None] * stride_sg + offs_n[None, :] * stride_sn,
                        mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
            a = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                        mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
            acc = tl.dot(a, q.to(tl.float16) * s, acc)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def w4a16_mm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W4A16 matrix multiply: y = x @ dequant(qweight)^T; see handout section 5."""
    M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
    x = x.contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    BLOCK_M, BLOCK_N, BLOCK_R = 32, 64, 16   # tl.dot needs BLOCK_R >= 16
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _w4a16_kernel[grid](
        x, qweight, scales, y, M, N, K, group_size,
        x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1),
        scales.stride(0), scales.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_R=BLOCK_R,
    )
    return y
