"""W4A16: fp16 activations times int4 weights packed 8 per int32.

    y[m, n] = sum_k x[m, k] * q[n, k] * s[k // group_size, n]

``qweight[r, n]`` holds ``q[n, 8r + j]`` in bits 4j..4j+3, each a signed
(two's-complement) int4 in [-8, 7].

YOUR TASK: write ``_w4a16_kernel`` and launch it from ``w4a16_mm``. handout.md,
section "Task 2", walks through it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs


@triton.jit
def _w4a16_kernel(
    x_ptr, qw_ptr, s_ptr, y_ptr, M, N, K, group_size,
    stride_xm, stride_xk, stride_qr, stride_qn, stride_sg, stride_sn, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of y; launch on a grid (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)).

    BLOCK_K counts unpacked k values and is a multiple of 8.
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # TODO(1): load the x tile [BLOCK_M, BLOCK_K] (mask k >= K and m >= M).
        # TODO(2): load the packed words that hold k0 + offs_k: row (k0 + offs_k) // 8
        #          of qweight. Loading a [BLOCK_K, BLOCK_N] tile where 8 rows share a
        #          word is the simple way; the handout shows a faster one.
        # TODO(3): extract nibble j = k % 8 as a SIGNED value in [-8, 7]:
        #          shift it to the top of the int32, then arithmetic-shift right by 28.
        #          (q >> 4j) & 0xF is the classic wrong answer: it reads -1 as 15.
        # TODO(4): convert to float16, multiply by the scales of group k // group_size,
        #          and acc = tl.dot(x_tile, w_tile, acc).
        pass
    # TODO(5): store acc as float16 with a mask for the ragged edges.


def w4a16_mm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W4A16 matrix multiply: y = x @ dequant(qweight)^T.

    Args:
        x: [M, K] float16, contiguous; K a multiple of 8.
        qweight: [K // 8, N] int32; ``qweight[r, n]`` holds the signed int4
            ``W_q[n, 8r + j]`` in bits 4j..4j+3 (lowest k in the lowest nibble).
        scales: [G, N] float16 with G = K // group_size; G = 1 means one scale
            per output channel, group_size in {32, 64, 128} is group-wise.

    Returns:
        y: [M, N] float16, ``y[m, n] = sum_k x[m, k] * W_q[n, k] * scales[k // group_size, n]``.

    Raises:
        ValueError: wrong dtype, rank or shape, or K not a multiple of 8.
    """
    M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
    # TODO(6): allocate y [M, N] float16, compute the grid and launch _w4a16_kernel.
    raise NotImplementedError("W4A16: w4a16_mm is not implemented yet (assignment/w4a16.py, TODO 1-6)")
