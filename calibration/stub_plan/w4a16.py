"""W4A16: fp16 activations times int4 weights packed 8 per int32.

    y[m, n] = sum_k x[m, k] * q[n, k] * s[k // group_size, n]

``qweight[r, n]`` holds ``q[n, 8r + j]`` in bits 4j..4j+3, each a signed
(two's-complement) int4 in [-8, 7].

Calibration fixture, a first draft: the stub's numbered plan followed literally,
the way a first-time Triton user reads the handout, with the stub's block sizes
and no tuning (written from the student bundle alone). The rubric's thresholds
give such a draft at most 60 % of a task's performance points (docs/grading.md).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs


@triton.jit
def _w4a16_kernel(
    # Pointers to the tensors
    x_ptr, qw_ptr, s_ptr, y_ptr,
    # Sizes: K counts unpacked weights; group_size == K when there is one scale per channel
    M, N, K, group_size,
    # Strides: how many elements to move in memory for one step along a dimension
    stride_xm, stride_xk, stride_qr, stride_qn, stride_sg, stride_sn, stride_ym, stride_yn,
    # Meta-parameters: compile-time constants, one compiled kernel per choice
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """Compute one [BLOCK_M, BLOCK_N] tile of y; grid (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)).

    x_ptr   x [M, K] float16
    qw_ptr  qweight [K // 8, N] int32: 8 packed weights per element (stride_qr, stride_qn)
    s_ptr   scales [G, N] float16, G = K // group_size (stride_sg, stride_sn)
    y_ptr   y [M, N] float16, the output
    BLOCK_K counts unpacked weights, so it is a multiple of 8.
    """
    # The plan. Write each step as a few lines of Triton, then delete `pass`.
    #
    # 1. Which tile of y is mine? The rows offs_m and the columns offs_n, as in
    #    Task 1; offs_k indexes the BLOCK_K values of k of one K step.
    # 2. Start a float32 accumulator of shape [BLOCK_M, BLOCK_N].
    # 3. Walk along K, BLOCK_K at a time. In each step:
    #    a. load the x tile [BLOCK_M, BLOCK_K], masked at the edges of M and K;
    #    b. load the packed words that hold the weights of this step's k for my
    #       columns. Which row r of qweight holds a given k, and which nibble j
    #       of that word is it? Several k share one word: is it better to load
    #       a word once per k, or once?
    #    c. unpack: bring nibble j of each word out as a signed value in
    #       [-8, 7]. Reading the nibble as a number in [0, 15] is the classic
    #       bug (-1 becomes 15); the worked example in the handout shows how to
    #       keep the sign;
    #    d. make the weight tile [BLOCK_K, BLOCK_N] in float16 and apply the
    #       scales: which row of `scales` belongs to weight k? With a single
    #       scale per channel (group_size == K) the scale may instead wait for
    #       step 4. Why may it?
    #    e. multiply the x tile by the weight tile on the tensor cores and add
    #       the result to the accumulator.
    # 4. Store the tile as float16, masked so that no element outside y is
    #    written.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + offs_k
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
        # row r = k // 8 of qweight holds weight k, in nibble j = k % 8
        r = ks // 8
        j = ks % 8
        w_mask = (ks[:, None] < K) & (offs_n[None, :] < N)
        words = tl.load(qw_ptr + r[:, None] * stride_qr + offs_n[None, :] * stride_qn,
                        mask=w_mask, other=0)
        # signed unpack: nibble j to the top (shift left by 28 - 4j), then
        # arithmetic shift right by 28
        q = (words << (28 - 4 * j)[:, None]) >> 28
        # scale of weight k: row k // group_size of scales
        s = tl.load(s_ptr + (ks // group_size)[:, None] * stride_sg + offs_n[None, :] * stride_sn,
                    mask=w_mask, other=0.0)
        w = (q.to(tl.float32) * s.to(tl.float32)).to(tl.float16)
        acc = tl.dot(a, w, acc)

    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


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
    x = x.contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)

    # A first tile shape that works; choosing a better one is part of the task
    # (handout: "Levers of performance"). tl.dot needs every side >= 16.
    BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _w4a16_kernel[grid](
        x, qweight, scales, y,
        M, N, K, group_size,
        x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1),
        scales.stride(0), scales.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
    )
    return y
