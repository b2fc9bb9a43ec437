"""DDS with a @triton.jit helper for one stored block and tl.static_range unrolling the block
loop by two (the second block of a pair masked off past the end of the row)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import BSR_BLOCK, check_dds_inputs

UNROLL = tl.constexpr(2)


@triton.jit
def _add_block(acc, x_ptr, values_ptr, col_ptr, b, valid, offs_m, M, stride_xm, stride_xk, BLOCK: tl.constexpr):
    """acc + x[offs_m, block column of b] @ values[b]^T; nothing added where not valid."""
    offs_b = tl.arange(0, BLOCK)
    j = tl.load(col_ptr + b, mask=valid, other=0)
    a = tl.load(x_ptr + offs_m[:, None] * stride_xm + (j * BLOCK + offs_b)[None, :] * stride_xk,
                mask=(offs_m[:, None] < M) & valid, other=0.0)
    w = tl.load(values_ptr + b * BLOCK * BLOCK + offs_b[:, None] + offs_b[None, :] * BLOCK, mask=valid, other=0.0)
    return tl.dot(a, w, acc)


@triton.jit
def _dds_kernel(x_ptr, values_ptr, crow_ptr, col_ptr, y_ptr, M,
                stride_xm, stride_xk, stride_ym, stride_yn,
                BLOCK_M: tl.constexpr, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_b = tl.arange(0, BLOCK)
    start = tl.load(crow_ptr + pid_n)
    end = tl.load(crow_ptr + pid_n + 1)
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    for b0 in range(start, end, UNROLL):
        for u in tl.static_range(UNROLL):
            b = b0 + u
            acc = _add_block(acc, x_ptr, values_ptr, col_ptr, b, b < end, offs_m, M, stride_xm, stride_xk, BLOCK)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + (pid_n * BLOCK + offs_b)[None, :] * stride_yn,
             acc.to(tl.float16), mask=offs_m[:, None] < M)


def dds_mm(x: torch.Tensor, weight_bsr: torch.Tensor) -> torch.Tensor:
    """Dense x BSR-sparse matrix multiply: y = x @ W^T; see handout section 6."""
    M, N, K = check_dds_inputs(x, weight_bsr)
    x = x.contiguous()
    values = weight_bsr.values().contiguous()
    crow, col = weight_bsr.crow_indices(), weight_bsr.col_indices()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    BLOCK_M = 64
    grid = (triton.cdiv(M, BLOCK_M), N // BSR_BLOCK)
    _dds_kernel[grid](x, values, crow, col, y, M, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                      BLOCK_M=BLOCK_M, BLOCK=BSR_BLOCK)
    return y
