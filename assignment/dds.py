"""DDS: dense fp16 x times a BSR-sparse fp16 weight with 32x32 blocks.

    y[m, 32i + r] = sum over stored blocks (i, j) of  x[m, 32j : 32j+32] . W_ij[r, :]

YOUR TASK: write ``_dds_kernel`` and launch it from ``dds_mm``. handout.md,
section "Task 3", walks through it.
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

    # TODO(1): read where block row pid_n starts and ends: crow[pid_n], crow[pid_n + 1].
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    # TODO(2): loop over the stored blocks i of this row. For each one:
    #          - col = col_indices[i]: the block covers input columns col*32 .. col*32+31
    #          - load x[offs_m, col*32 + offs_b] as [BLOCK_M, BLOCK] (mask m >= M)
    #          - load values[i] transposed, as [BLOCK (k), BLOCK (n)]:
    #            values[i][n, k] sits at values_ptr + i*BLOCK*BLOCK + n*BLOCK + k
    #          - acc = tl.dot(x_tile, w_tile, acc)
    # TODO(3): store acc as float16 into y[offs_m, pid_n*32 + offs_b] (an empty
    #          block row must still write its zeros).


def dds_mm(x: torch.Tensor, weight_bsr: torch.Tensor) -> torch.Tensor:
    """Dense x BSR-sparse matrix multiply: y = x @ W^T, skipping zero blocks.

    Args:
        x: [M, K] float16, contiguous.
        weight_bsr: torch.sparse_bsr tensor of shape [N, K] (N, K multiples of
            32), blocksize (32, 32), float16 values [nnz_blocks, 32, 32];
            crow_indices / col_indices int64 or int32.

    Returns:
        y: [M, N] float16 = x @ W^T (fp32 accumulation).

    Raises:
        ValueError: wrong dtype, rank, layout, blocksize or K mismatch.
    """
    M, N, K = check_dds_inputs(x, weight_bsr)
    # TODO(4): allocate y [M, N] float16, get values / crow_indices / col_indices
    #          from weight_bsr, compute the grid and launch _dds_kernel.
    raise NotImplementedError("DDS: dds_mm is not implemented yet (assignment/dds.py, TODO 1-4)")
