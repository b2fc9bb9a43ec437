"""W8A8: fp16 activations quantized per token inside the kernel, int8 weights
quantized per output channel, int8 x int8 -> int32 on the tensor cores.

    y[m, n] = s_x[m] * s_w[n] * sum_k q_x[m, k] * q_w[n, k]
    q_x[m, k] = clamp(round_half_even(x[m, k] / s_x[m]), -128, 127)

Two regimes share one GEMM kernel:
- small M (decode): a GEMV in disguise. The weight is the only large operand,
  so tiles are narrow in N (many programs to stream it) and deep in K, and x is
  quantized on the fly inside the K loop (it is tiny and stays in L1).
- large M: quantizing inside the GEMM would redo the same work for every N
  tile; one cheap pass writes q_x as int8 first, then both dot operands are
  loaded as int8, K-major, straight into shared memory.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w8a8_inputs

# Adding then subtracting 1.5 * 2**23 rounds a float32 of magnitude < 2**22 to
# the nearest integer, ties to even (the hardware's default rounding), and it
# works the same on the GPU and in the CPU interpreter.
_ROUND_MAGIC = tl.constexpr(12582912.0)


@triton.jit
def _quantize_int8(x, scale):
    """clamp(round_half_even(x / scale), -128, 127) as int8; x float32 [BM, BK], scale [BM, 1]."""
    v = tl.math.div_rn(x, scale)  # correctly rounded, like torch's x / s
    v = tl.minimum(tl.maximum(v, -128.0), 127.0)
    v = (v + _ROUND_MAGIC) - _ROUND_MAGIC
    return v.to(tl.int8)


@triton.jit
def _quantize_rows_kernel(
    x_ptr, sx_ptr, xq_ptr, M, K,
    stride_xm, stride_xk, stride_qm, stride_qk,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """q_x = quantize(x, s_x) for one [BLOCK_M, BLOCK_K] tile."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk, mask=mask, other=0.0)
    s = tl.load(sx_ptr + offs_m, mask=offs_m < M, other=1.0)
    q = _quantize_int8(x.to(tl.float32), s[:, None])
    tl.store(xq_ptr + offs_m[:, None] * stride_qm + offs_k[None, :] * stride_qk, q, mask=mask)


@triton.jit
def _w8a8_gemm_kernel(
    a_ptr, w_ptr, sx_ptr, sw_ptr, y_ptr, M, N, K,
    stride_am, stride_ak, stride_wk, stride_wn, stride_ym, stride_yn,
    QUANTIZE_A: tl.constexpr, EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """y[BLOCK_M, BLOCK_N] tile of dequant(A_q @ W_q).

    A is x (fp16, quantized here when QUANTIZE_A) or q_x (int8); W is the
    [K, N] K-major view of the int8 weight.
    """
    # Grouped launch order: GROUP_M consecutive M tiles share each W tile in L2.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Out-of-range rows/columns read a valid row/column instead of being
    # masked; their results are dropped by the masked store.
    safe_m = offs_m % M
    safe_n = offs_n % N
    a_ptrs = a_ptr + safe_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + safe_n[None, :] * stride_wn
    s_x = tl.load(sx_ptr + safe_m)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_ok = offs_k < K - k0
            a = tl.load(a_ptrs, mask=k_ok[None, :], other=0)
            w = tl.load(w_ptrs, mask=k_ok[:, None], other=0)
        if QUANTIZE_A:
            a = _quantize_int8(a.to(tl.float32), s_x[:, None])
        acc = tl.dot(a, w, acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk

    s_w = tl.load(sw_ptr + safe_n)
    y = acc.to(tl.float32) * s_x[:, None] * s_w[None, :]
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, y.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _gemm_config(M: int, N: int, K: int) -> dict:
    """Tile shape for one problem; measured on H100 (see docs/performance.md)."""
    if M <= 16:
        return dict(QUANTIZE_A=True, BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1,
                    num_warps=4, num_stages=4)
    if M <= 128:
        return dict(QUANTIZE_A=True, BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=8,
                    num_warps=4, num_stages=4)
    return dict(QUANTIZE_A=False, BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8,
                num_warps=8, num_stages=3)


def _launch(x, qweight_t, input_scale, weight_scale, cfg: dict) -> torch.Tensor:
    M, K = x.shape
    N = qweight_t.shape[1]
    cfg = dict(cfg)
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    a = x
    if not cfg["QUANTIZE_A"]:
        a = torch.empty((M, K), device=x.device, dtype=torch.int8)
        grid = (triton.cdiv(M, 64), triton.cdiv(K, 128))
        _quantize_rows_kernel[grid](
            x, input_scale, a, M, K, x.stride(0), x.stride(1), a.stride(0), a.stride(1),
            BLOCK_M=64, BLOCK_K=128, num_warps=4)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    _w8a8_gemm_kernel[grid](
        a, qweight_t, input_scale, weight_scale, y, M, N, K,
        a.stride(0), a.stride(1), qweight_t.stride(0), qweight_t.stride(1),
        y.stride(0), y.stride(1),
        EVEN_K=(K % cfg["BLOCK_K"] == 0), **cfg)
    return y


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
    x = x.contiguous()
    return _launch(x, qweight_t, input_scale.contiguous(), weight_scale.contiguous(),
                   _gemm_config(M, N, K))
