"""DDS with block pointers: the x tile and the transposed block (order=(0, 1), strides
(1, BLOCK)) loaded through tl.make_block_ptr, the y tile stored with boundary_check."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import BSR_BLOCK, check_dds_inputs


@triton.jit
def _dds_kernel(x_ptr, values_ptr, crow_ptr, col_ptr, y_ptr, M, N, K,
                stride_xm, stride_xk, stride_ym, stride_yn,
                BLOCK_M: tl.constexpr, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    start = tl.load(crow_ptr + pid_n).to(tl.int32)   # block pointers and descriptors take 32-bit offsets
    end = tl.load(crow_ptr + pid_n + 1).to(tl.int32)
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    for b in range(start, end):
        j = tl.load(col_ptr + b).to(tl.int32)
        x_block = tl.make_block_ptr(base=x_ptr, shape=(M, K), strides=(stride_xm, stride_xk),
                                    offsets=(pid_m * BLOCK_M, j * BLOCK), block_shape=(BLOCK_M, BLOCK), order=(1, 0))
        w_block = tl.make_block_ptr(base=values_ptr + b * BLOCK * BLOCK, shape=(BLOCK, BLOCK), strides=(1, BLOCK),
                                    offsets=(0, 0), block_shape=(BLOCK, BLOCK), order=(0, 1))
        a = tl.load(x_block, boundary_check=(0,), padding_option="zero")
        w = tl.load(w_block)
        acc = tl.dot(a, w, acc)
    y_block = tl.make_block_ptr(base=y_ptr, shape=(M, N), strides=(stride_ym, stride_yn),
                                offsets=(pid_m * BLOCK_M, pid_n * BLOCK), block_shape=(BLOCK_M, BLOCK), order=(1, 0))
    tl.store(y_block, acc.to(tl.float16), boundary_check=(0, 1))


def dds_mm(x: torch.Tensor, weight_bsr: torch.Tensor) -> torch.Tensor:
    """Dense x BSR-sparse matrix multiply: y = x @ W^T; see handout section 6."""
    M, N, K = check_dds_inputs(x, weight_bsr)
    x = x.contiguous()
    values = weight_bsr.values().contiguous()
    crow, col = weight_bsr.crow_indices(), weight_bsr.col_indices()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    BLOCK_M = 32
    grid = (triton.cdiv(M, BLOCK_M), N // BSR_BLOCK)
    _dds_kernel[grid](x, values, crow, col, y, M, N, K, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                      BLOCK_M=BLOCK_M, BLOCK=BSR_BLOCK)
    return y
