"""W8A8: fp16 activations quantized per token inside the kernel, int8 weights
quantized per output channel, int8 x int8 -> int32 on the tensor cores.

    y[m, n] = s_x[m] * s_w[n] * sum_k q_x[m, k] * q_w[n, k]
    q_x[m, k] = clamp(round_half_even(x[m, k] / s_x[m]), -128, 127)

YOUR TASK: write ``_w8a8_kernel`` and launch it from ``w8a8_mm``. handout.md,
section "Task 1", walks through it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w8a8_inputs


@triton.jit
def _w8a8_kernel(
    x_ptr, w_ptr, sx_ptr, sw_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_wk, stride_wn, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of y; launch on a grid (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    # TODO(1): load this tile's per-token scales s_x[offs_m] and per-channel
    #          scales s_w[offs_n] (mask rows >= M and columns >= N).
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        # TODO(2): load the x tile [BLOCK_M, BLOCK_K] (fp16; mask k >= K and m >= M).
        # TODO(3): quantize it: clamp(round(x / s_x), -128, 127) as int8. Divide in
        #          float32 with tl.math.div_rn (correctly rounded, like PyTorch's /).
        #          Rounding must be half-to-even: see the handout for a trick that
        #          works both on the GPU and in the CPU interpreter.
        # TODO(4): load the weight tile [BLOCK_K, BLOCK_N] (int8) through the
        #          strides of the K-major view qweight_t (stride_wk == 1).
        # TODO(5): acc = tl.dot(q_x, w, acc, out_dtype=tl.int32)
        pass
    # TODO(6): dequantize, y = acc * s_x[:, None] * s_w[None, :] in float32, and
    #          store it as float16 with a mask for the ragged edges.


def w8a8_mm(
    x: torch.Tensor,
    qweight_t: torch.Tensor,
    input_scale: torch.Tensor,
    weight_scale: torch.Tensor,
) -> torch.Tensor:
    """W8A8 matrix multiply: y = dequant(quant(x) @ qweight_t).

    Args:
        x: [M, K] float16, contiguous activations.
        qweight_t: [K, N] int8, the transposed view ``qweight.t()`` of the
            [N, K] int8 weight (strides (1, K)); may be non-contiguous.
        input_scale: [M, 1] float32 per-token scale.
        weight_scale: [N, 1] float32 per-output-channel scale.

    Returns:
        y: [M, N] float16, ``y[m, n] = input_scale[m] * weight_scale[n] *
        sum_k clamp(round(x[m, k] / input_scale[m]), -128, 127) * qweight_t[k, n]``
        with round half to even and int32 accumulation.

    Raises:
        ValueError: wrong dtype, rank or shape of any input.
    """
    M, N, K = check_w8a8_inputs(x, qweight_t, input_scale, weight_scale)
    # TODO(7): allocate y [M, N] float16, compute the grid and launch _w8a8_kernel.
    raise NotImplementedError("W8A8: w8a8_mm is not implemented yet (assignment/w8a8.py, TODO 1-7)")
