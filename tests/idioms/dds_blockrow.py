"""DDS with one program per block row: it reads its two crow_indices entries once and, for
every tile of rows of x, walks its stored blocks through col_indices."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import BSR_BLOCK, check_dds_inputs


@triton.jit
def _dds_kernel(x_ptr, values_ptr, crow_ptr, col_ptr, y_ptr, M,
                stride_xm, stride_xk, stride_ym, stride_yn,
                BLOCK_M: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)   # my block row: outputs row * BLOCK .. row * BLOCK + BLOCK - 1
    start = tl.load(crow_ptr + row)
    end = tl.load(crow_ptr + row + 1)
    offs_b = tl.arange(0, BLOCK)
    for m0 in range(0, M, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        m_mask = offs_m < M
        acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
        for b in range(start, end):
            j = tl.load(col_ptr + b)
            a = tl.load(x_ptr + offs_m[:, None] * stride_xm + (j * BLOCK + offs_b)[None, :] * stride_xk,
                        mask=m_mask[:, None], other=0.0)
            # block b is stored [n, k] row-major; read it as [k, n]: k steps by 1, n by BLOCK
            w = tl.load(values_ptr + b * BLOCK * BLOCK + offs_b[:, None] + offs_b[None, :] * BLOCK)
            acc = tl.dot(a, w, acc)
        tl.store(y_ptr + offs_m[:, None] * stride_ym + (row * BLOCK + offs_b)[None, :] * stride_yn,
                 acc.to(tl.float16), mask=m_mask[:, None])


def dds_mm(x: torch.Tensor, weight_bsr: torch.Tensor) -> torch.Tensor:
    """Dense x BSR-sparse matrix multiply: y = x @ W^T; see handout section 6."""
    M, N, K = check_dds_inputs(x, weight_bsr)
    x = x.contiguous()
    values = weight_bsr.values().contiguous()
    crow, col = weight_bsr.crow_indices(), weight_bsr.col_indices()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    BLOCK_M = 64
    _dds_kernel[(N // BSR_BLOCK,)](x, values, crow, col, y, M, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                                   BLOCK_M=BLOCK_M, BLOCK=BSR_BLOCK)
    return y
