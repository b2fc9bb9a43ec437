"""W4A16: fp16 activations times int4 weights packed 8 per int32.

    y[m, n] = sum_k x[m, k] * q[n, k] * s[k // group_size, n]

``qweight[r, n]`` holds ``q[n, 8r + j]`` in bits 4j..4j+3. Instead of
expanding each packed word into 8 rows of a [BLOCK_K, BLOCK_N] tile, the kernel
keeps the packed tile as it is ([BLOCK_K // 8, BLOCK_N], every word loaded
once) and splits the dot along j: nibble j of every word multiplies the x
columns k = 8r + j, a strided slice of the x tile. Eight dots of depth
BLOCK_K // 8 then add up to the full product.

With one scale per channel the scale is applied once, to the fp32 result, so
the dot sees exact small integers; with group-wise scales each nibble tile is
scaled in fp16 before its dot.
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
    GROUPED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of y. BLOCK_K counts unpacked k (a multiple of 128)."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % rows_in_group
    pid_n = (pid % group) // rows_in_group

    BLOCK_R: tl.constexpr = BLOCK_K // 8  # packed rows per K tile
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_r = tl.arange(0, BLOCK_R)
    safe_m = offs_m % M
    safe_n = offs_n % N
    x_rows = x_ptr + safe_m[:, None] * stride_xm
    q_ptrs = qw_ptr + offs_r[:, None] * stride_qr + safe_n[None, :] * stride_qn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        r_ok = offs_r < (K - k0) // 8
        packed = tl.load(q_ptrs, mask=r_ok[:, None], other=0)
        for j in tl.static_range(8):
            k = k0 + offs_r * 8 + j  # the x columns that nibble j multiplies
            a = tl.load(x_rows + k[None, :] * stride_xk, mask=r_ok[None, :], other=0.0)
            # Move nibble j to the top bits, then shift back arithmetically:
            # that sign-extends it into [-8, 7].
            w = ((packed << (28 - 4 * j)) >> 28).to(tl.float16)
            if GROUPED:
                s = tl.load(s_ptr + (k // group_size)[:, None] * stride_sg + safe_n[None, :] * stride_sn,
                            mask=r_ok[:, None], other=0.0)
                w = w * s
            acc = tl.dot(a, w, acc)
        q_ptrs += BLOCK_R * stride_qr

    if not GROUPED:
        acc = acc * tl.load(s_ptr + safe_n * stride_sn).to(tl.float32)[None, :]
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _config(M: int, N: int, K: int) -> dict:
    """Tile shape for one problem; measured on H100 (see docs/performance.md)."""
    if M <= 16:
        return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=512, GROUP_M=1, num_warps=4, num_stages=4)
    if M <= 128:
        return dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=256, GROUP_M=8, num_warps=4, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3)


def _launch(x, qweight, scales, group_size: int, cfg: dict) -> torch.Tensor:
    M, K = x.shape
    N = qweight.shape[1]
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    _w4a16_kernel[grid](
        x, qweight, scales, y, M, N, K, group_size,
        x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1),
        scales.stride(0), scales.stride(1), y.stride(0), y.stride(1),
        GROUPED=scales.shape[0] > 1, **cfg)
    return y


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
    return _launch(x.contiguous(), qweight, scales, group_size, _config(M, N, K))
