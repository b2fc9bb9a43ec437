"""DDS: dense fp16 x times a BSR-sparse fp16 weight with 32x32 blocks.

    y[m, 32i + r] = sum over stored blocks (i, j) of  x[m, 32j : 32j+32] . W_ij[r, :]

Tutorial-style baseline: the stub's plan written out in the simplest way. The kernel keeps the
stub's signature: tests/kernels/test_stubs.py splices this body into the stub to check the stub's wrapper.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import BSR_BLOCK, check_dds_inputs


@triton.jit
def _dds_kernel(
    x_ptr, values_ptr, crow_ptr, col_ptr, y_ptr, M,
    stride_xm, stride_xk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK: tl.constexpr,
):
    """One [BLOCK_M, BLOCK] tile of y for block row pid_n; grid (cdiv(M, BLOCK_M), N // BLOCK)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_b = tl.arange(0, BLOCK)

    start = tl.load(crow_ptr + pid_n)
    end = tl.load(crow_ptr + pid_n + 1)
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    for i in range(start, end):
        col = tl.load(col_ptr + i)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + (col * BLOCK + offs_b)[None, :] * stride_xk,
                    mask=offs_m[:, None] < M, other=0.0)
        w = tl.load(values_ptr + i * BLOCK * BLOCK + offs_b[None, :] * BLOCK + offs_b[:, None])
        acc = tl.dot(x, w, acc)
    offs_n = pid_n * BLOCK + offs_b
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc.to(tl.float16),
             mask=offs_m[:, None] < M)


def dds_mm(x: torch.Tensor, weight_bsr: torch.Tensor) -> torch.Tensor:
    """Dense x BSR-sparse matrix multiply: y = x @ W^T, skipping zero blocks.

    Shapes, dtypes and errors: the docstring in assignment/dds.py.
    """
    M, N, K = check_dds_inputs(x, weight_bsr)
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 64), N // BSR_BLOCK)
    _dds_kernel[grid](x, weight_bsr.values(), weight_bsr.crow_indices(), weight_bsr.col_indices(), y, M,
                      x.stride(0), x.stride(1), y.stride(0), y.stride(1), BLOCK_M=64, BLOCK=BSR_BLOCK)
    return y
