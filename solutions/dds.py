"""DDS: dense fp16 x times a BSR-sparse fp16 weight with 32x32 blocks.

    y[m, 32i + r] = sum over stored blocks (i, j) of  x[m, 32j : 32j+32] . W_ij[r, :]

Block row i of W holds output channels 32i..32i+31, so one program computes
the [BLOCK_M, 32] tile of y for one block row: it walks that row's stored
blocks (crow_indices[i] .. crow_indices[i+1]) and for each one gathers the 32
matching columns of x. Zero blocks cost nothing, an empty block row writes
zeros. Programs are ordered block-row fastest, so all block rows for one tile
of x run at about the same time and read it from L2, not from memory.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import BSR_BLOCK, check_dds_inputs


@triton.jit
def _dds_kernel(
    x_ptr, values_ptr, crow_ptr, col_ptr, y_ptr, M, num_block_rows,
    stride_xm, stride_xk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK: tl.constexpr, BLOCKS_PER_STEP: tl.constexpr,
):
    """One [BLOCK_M, BLOCK] tile of y: rows pid_m * BLOCK_M.., block row pid_n."""
    pid = tl.program_id(0)
    pid_n = pid % num_block_rows
    pid_m = pid // num_block_rows

    # Each step takes BLOCKS_PER_STEP stored blocks of the row at once: the
    # gathered x columns and the stacked blocks make one dot of depth
    # BLOCKS_PER_STEP * 32, which keeps the tensor cores busier than a 32-deep one.
    STEP_K: tl.constexpr = BLOCKS_PER_STEP * BLOCK
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_b = tl.arange(0, BLOCK)
    offs_s = tl.arange(0, STEP_K)
    slot = offs_s // BLOCK     # which stored block of the step
    within = offs_s % BLOCK    # column inside that block
    x_rows = x_ptr + (offs_m % M)[:, None] * stride_xm
    # values[i] is W_ij as [BLOCK (n), BLOCK (k)], row-major; read it as its
    # transpose [k, n], which is K-major, the layout the tensor cores want.
    w_tile = offs_b[None, :] * BLOCK + within[:, None]

    start = tl.load(crow_ptr + pid_n)
    end = tl.load(crow_ptr + pid_n + 1)
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    for i in range(start, end, BLOCKS_PER_STEP):
        blk = i + slot
        ok = blk < end
        col = tl.load(col_ptr + blk, mask=ok, other=0)
        a = tl.load(x_rows + (col * BLOCK + within)[None, :] * stride_xk, mask=ok[None, :], other=0.0)
        w = tl.load(values_ptr + blk[:, None] * (BLOCK * BLOCK) + w_tile, mask=ok[:, None], other=0.0)
        acc = tl.dot(a, w, acc)

    offs_n = pid_n * BLOCK + offs_b
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(tl.float16), mask=offs_m[:, None] < M)


def _config(M: int, N: int, K: int) -> dict:
    """Tile shape for one problem; measured on H200 (docs/performance.md)."""
    if M <= 16:
        return dict(BLOCK_M=32, BLOCKS_PER_STEP=4, num_warps=4, num_stages=3)
    if M <= 256:
        return dict(BLOCK_M=64, BLOCKS_PER_STEP=4, num_warps=4, num_stages=2)
    if M <= 8192:
        return dict(BLOCK_M=128, BLOCKS_PER_STEP=2, num_warps=4, num_stages=2)
    return dict(BLOCK_M=256, BLOCKS_PER_STEP=1, num_warps=4, num_stages=2)


def _launch(x, weight_bsr, cfg: dict) -> torch.Tensor:
    M, K = x.shape
    N = weight_bsr.shape[0]
    num_block_rows = N // BSR_BLOCK
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    values = weight_bsr.values().contiguous()
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * num_block_rows,)
    _dds_kernel[grid](
        x, values, weight_bsr.crow_indices(), weight_bsr.col_indices(), y, M, num_block_rows,
        x.stride(0), x.stride(1), y.stride(0), y.stride(1),
        BLOCK=BSR_BLOCK, **cfg)
    return y


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
    if N == 0:
        return torch.empty((M, 0), device=x.device, dtype=torch.float16)
    return _launch(x.contiguous(), weight_bsr, _config(M, N, K))
