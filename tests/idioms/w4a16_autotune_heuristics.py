"""W4A16 with @triton.autotune (4 configs, key=[...]) over @triton.heuristics: PER_CHANNEL
(one scale per column) applies the scale once to the fp32 tile after the K loop."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3),
    ],
    key=["M", "N", "K", "group_size"],
)
@triton.heuristics({"PER_CHANNEL": lambda args: args["group_size"] == args["K"]})
@triton.jit
def _w4a16_kernel(x_ptr, qw_ptr, s_ptr, y_ptr, M, N, K, group_size,
                  stride_xm, stride_xk, stride_qr, stride_qn, stride_sg, stride_sn, stride_ym, stride_yn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PER_CHANNEL: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    n_mask = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        words = tl.load(qw_ptr + (k // 8)[:, None] * stride_qr + offs_n[None, :] * stride_qn,
                        mask=(k[:, None] < K) & n_mask[None, :], other=0)
        w = ((words << (28 - (k % 8) * 4)[:, None]) >> 28).to(tl.float16)
        if not PER_CHANNEL:
            s = tl.load(s_ptr + (k // group_size)[:, None] * stride_sg + offs_n[None, :] * stride_sn,
                        mask=(k[:, None] < K) & n_mask[None, :], other=0.0)
            w = w * s
        acc = tl.dot(a, w, acc)
    if PER_CHANNEL:
        s = tl.load(s_ptr + offs_n * stride_sn, mask=n_mask, other=0.0)
        acc = acc * s.to(tl.float32)[None, :]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & n_mask[None, :])


def w4a16_mm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W4A16 matrix multiply: y = x @ dequant(qweight)^T; see handout section 5."""
    M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
    x = x.contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))  # noqa: E731
    _w4a16_kernel[grid](
        x, qweight, scales, y, M, N, K, group_size,
        x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1),
        scales.stride(0), scales.stride(1), y.stride(0), y.stride(1),
    )
    return y
