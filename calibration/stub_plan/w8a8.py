"""W8A8: fp16 activations quantized per token inside the kernel, int8 weights
quantized per output channel, int8 x int8 -> int32 on the tensor cores.

    y[m, n] = s_x[m] * s_w[n] * sum_k q_x[m, k] * q_w[n, k]
    q_x[m, k] = clamp(round_half_even(x[m, k] / s_x[m]), -128, 127)

Calibration fixture, a first draft: the stub's numbered plan followed literally,
the way a first-time Triton user reads the handout, with the stub's block sizes
and no tuning (written from the student bundle alone). The rubric's thresholds
give such a draft at most 60 % of a task's performance points (docs/grading.md).
The file follows Triton's tutorial 03-matrix-multiplication: the
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
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    sx = tl.load(sx_ptr + offs_m, mask=offs_m < M, other=1.0)
    sw = tl.load(sw_ptr + offs_n, mask=offs_n < N, other=1.0)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & ((k0 + offs_k)[None, :] < K), other=0.0)
        v = a.to(tl.float32) / sx[:, None]
        v = tl.minimum(tl.maximum(v, -128.0), 127.0)
        # round half to even: adding 1.5 * 2**23 pushes the fraction bits out,
        # and the float32 addition itself rounds to nearest even
        v = (v + 12582912.0) - 12582912.0
        qa = v.to(tl.int8)
        b = tl.load(w_ptr + (k0 + offs_k)[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                    mask=((k0 + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0)
        acc = tl.dot(qa, b, acc, out_dtype=tl.int32)

    out = acc.to(tl.float32) * sx[:, None] * sw[None, :]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, out.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


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
    return y
