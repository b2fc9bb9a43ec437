"""DDS: dense fp16 x times a BSR-sparse fp16 weight with 32x32 blocks.

    y[m, 32i + r] = sum over stored blocks (i, j) of  x[m, 32j : 32j+32] . W_ij[r, :]

YOUR TASK: write the body of ``_dds_kernel`` (its comments are a plan), then
delete the ``raise NotImplementedError`` near the end of ``dds_mm``.
handout.md, "6. Task 3: DDS", draws one BSR block row; ``make hint TASK=dds LEVEL=1``
prints the first of three hints.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import BSR_BLOCK, check_dds_inputs


@triton.jit
def _dds_kernel(
    # Pointers to the tensors
    x_ptr, values_ptr, crow_ptr, col_ptr, y_ptr,
    # Sizes
    M,
    # Strides: how many elements to move in memory for one step along a dimension
    stride_xm, stride_xk, stride_ym, stride_yn,
    # Meta-parameters: compile-time constants, one compiled kernel per choice
    BLOCK_M: tl.constexpr, BLOCK: tl.constexpr,
):
    """Compute the [BLOCK_M, BLOCK] tile of y for rows pid_m and block row pid_n;
    grid (cdiv(M, BLOCK_M), N // BLOCK).

    x_ptr       x [M, K] float16
    values_ptr  the stored blocks, [nnz_blocks, BLOCK, BLOCK] float16, contiguous;
                block b holds values[b][r, c] = W[BLOCK * i + r, BLOCK * j + c]
    crow_ptr    crow_indices, N // BLOCK + 1 entries (int32 or int64)
    col_ptr     col_indices, nnz_blocks entries (int32 or int64)
    y_ptr       y [M, N] float16, the output
    BLOCK       the block size, 32
    """
    # The plan. Write each step as a few lines of Triton, then delete `pass`.
    #
    # 1. Which tile of y is mine? The rows offs_m (from pid_m, as in Task 1)
    #    and the BLOCK output columns of block row pid_n.
    # 2. Which stored blocks belong to block row pid_n? Two neighbouring
    #    entries of crow_indices bound them (see the drawn example in the
    #    handout).
    # 3. Start a float32 accumulator of shape [BLOCK_M, BLOCK].
    # 4. For each stored block b of my block row:
    #    a. col_indices[b] is its block column j: which BLOCK columns of x does
    #       the block multiply?
    #    b. load those columns of x for my rows as a [BLOCK_M, BLOCK] tile,
    #       masking the rows past M;
    #    c. load block b as the [BLOCK (k), BLOCK (n)] tile that the product
    #       needs. It is stored the other way round, as [n, k]: work out the
    #       address of element (k, n) from the layout in the docstring;
    #    d. multiply the two tiles on the tensor cores and add the result to
    #       the accumulator.
    # 5. Store the tile as float16 at my rows and my block row's columns of y,
    #    masking the rows past M. A block row with no stored blocks still owns
    #    its outputs: they are zeros, and they must be written.
    pass


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
    x = x.contiguous()
    values = weight_bsr.values().contiguous()  # the kernel reads it as one dense array
    crow, col = weight_bsr.crow_indices(), weight_bsr.col_indices()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)

    # A first tile height that works; choosing a better one is part of the
    # task (handout: "Levers of performance"). tl.dot needs every side >= 16.
    BLOCK_M = 64
    grid = (triton.cdiv(M, BLOCK_M), N // BSR_BLOCK)
    _dds_kernel[grid](
        x, values, crow, col, y,
        M,
        x.stride(0), x.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK=BSR_BLOCK,
    )
    # Until the kernel has a body, y holds whatever memory it was given.
    # Delete this line when your kernel is written.
    raise NotImplementedError("DDS: the body of _dds_kernel is not written yet (assignment/dds.py); "
                              "write it, then delete this raise in dds_mm")
    return y
