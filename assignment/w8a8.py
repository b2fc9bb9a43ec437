"""W8A8: fp16 activations quantized per token inside the kernel, int8 weights
quantized per output channel, int8 x int8 -> int32 on the tensor cores.

    y[m, n] = s_x[m] * s_w[n] * sum_k q_x[m, k] * q_w[n, k]
    q_x[m, k] = clamp(round_half_even(x[m, k] / s_x[m]), -128, 127)

YOUR TASK: write the body of ``_w8a8_kernel`` (its comments are a plan), then
delete the ``raise NotImplementedError`` near the end of ``w8a8_mm``.
handout.md, "4. Task 1: W8A8", explains the math; ``make hint TASK=w8a8 LEVEL=1``
prints the first of three hints. The file follows Triton's tutorial 03-matrix-multiplication: the
kernel first, then a wrapper that checks the inputs, allocates the output and
launches the kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w8a8_inputs


@triton.jit
def _w8a8_kernel(
    # Pointers to the tensors
    x_ptr, w_ptr, sx_ptr, sw_ptr, y_ptr,
    # Matrix sizes
    M, N, K,
    # Strides: how many elements to move in memory for one step along a dimension
    stride_xm, stride_xk, stride_wk, stride_wn, stride_ym, stride_yn,
    # Meta-parameters: compile-time constants, one compiled kernel per choice
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """Compute one [BLOCK_M, BLOCK_N] tile of y; grid (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)).

    x_ptr   x [M, K] float16
    w_ptr   qweight_t [K, N] int8, a transposed view: stride_wk == 1, stride_wn == K
    sx_ptr  input_scale, M float32 values (one per row of x)
    sw_ptr  weight_scale, N float32 values (one per output channel)
    y_ptr   y [M, N] float16, the output
    """
    # The plan. Write each step as a few lines of Triton, then delete `pass`.
    #
    # 1. Which tile of y is mine? Program (pid_m, pid_n) of the grid owns the
    #    rows offs_m and the columns offs_n of y (tutorial 03 builds such index
    #    vectors from the program id and a range). offs_k indexes one K step.
    # 2. Load the per-token scales of my rows and the per-channel scales of my
    #    columns. With M = 1 or M = 33 some of my rows do not exist: mask them,
    #    and choose the value a masked scale gets so that nothing later divides
    #    by zero.
    # 3. Start an integer accumulator of shape [BLOCK_M, BLOCK_N].
    # 4. Walk along K, BLOCK_K at a time. In each step:
    #    a. load the x tile [BLOCK_M, BLOCK_K]; mask the rows past M and the
    #       columns past K (K is not always a multiple of BLOCK_K);
    #    b. quantize it with each row's scale, exactly as the docstring of
    #       w8a8_mm says: divide, clamp, round half to even, convert to int8.
    #       Which of these must come before the conversion, and why is
    #       rounding the step that needs care in Triton? (handout, section 4)
    #    c. load the weight tile [BLOCK_K, BLOCK_N] through stride_wk and
    #       stride_wn, masked the same way;
    #    d. multiply the two int8 tiles on the tensor cores and add the exact
    #       integer result to the accumulator.
    # 5. Dequantize once: the accumulator in float32 times the scale of its row
    #    and the scale of its column.
    # 6. Store the tile as float16, masked so that no element outside y is
    #    written.
    pass


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
        input_scale: [M, 1] float32 or float16 per-token scale.
        weight_scale: [N, 1] float32 or float16 per-output-channel scale.
            Either scale may be fp16 (the course's own layers compute them
            so); the wrapper converts both to float32 once, and the
            arithmetic is float32.

    Returns:
        y: [M, N] float16, ``y[m, n] = input_scale[m] * weight_scale[n] *
        sum_k clamp(round(x[m, k] / input_scale[m]), -128, 127) * qweight_t[k, n]``
        with round half to even and int32 accumulation.

    Raises:
        ValueError: wrong dtype, rank or shape of any input.
    """
    M, N, K = check_w8a8_inputs(x, qweight_t, input_scale, weight_scale)
    x = x.contiguous()
    # The kernel reads float32 scales: convert fp16 ones once, here.
    input_scale = input_scale.to(torch.float32).contiguous()
    weight_scale = weight_scale.to(torch.float32).contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)

    # A first tile shape that works; choosing a better one is part of the task
    # (handout: "Levers of performance"). tl.dot needs every side >= 16.
    BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _w8a8_kernel[grid](
        x, qweight_t, input_scale, weight_scale, y,
        M, N, K,
        x.stride(0), x.stride(1), qweight_t.stride(0), qweight_t.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
    )
    # Until the kernel has a body, y holds whatever memory it was given.
    # Delete this line when your kernel is written.
    raise NotImplementedError("W8A8: the body of _w8a8_kernel is not written yet (assignment/w8a8.py); "
                              "write it, then delete this raise in w8a8_mm")
    return y
