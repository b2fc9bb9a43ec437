"""Experiment (untracked): W4A16 decode with the K split across the warps of one program (batched 3-D dot)."""
import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs, split_k_range, split_k_reduce, split_k_workspace


@triton.jit
def _nibbles4(packed):
    biased = packed ^ -0x77777778
    shift = (4 * tl.arange(0, 8))[None, None, :, None]
    bits = ((biased >> shift) & 0xF) | 0x6400
    return bits.to(tl.int16).to(tl.float16, bitcast=True) - 1032.0


@triton.jit
def _decode_kernel(x_ptr, qw_ptr, s_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K, group_size,
                   stride_xm, stride_xk, stride_qr, stride_qn, stride_sg, stride_sn, stride_ym, stride_yn,
                   GROUPED: tl.constexpr, SPLIT_K: tl.constexpr, WARP_SPLIT: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    STEP: tl.constexpr = WARP_SPLIT * BLOCK_K
    BLOCK_R: tl.constexpr = BLOCK_K // 8
    k_start, k_end = split_k_range(pid_k, K, SPLIT_K, STEP)
    offs_b = tl.arange(0, WARP_SPLIT)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    safe_m = offs_m % M
    safe_n = offs_n % N
    kk = offs_b[:, None, None] * BLOCK_K + offs_k[None, None, :]  # [B, 1, BK]
    rr = offs_b[:, None, None, None] * BLOCK_R + offs_r[None, :, None, None]  # [B, BR, 1, 1]
    x_ptrs = x_ptr + safe_m[None, :, None] * stride_xm + (k_start + kk) * stride_xk
    q_ptrs = qw_ptr + (k_start // 8 + rr) * stride_qr + safe_n[None, None, None, :] * stride_qn
    acc = tl.zeros((WARP_SPLIT, BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, STEP):
        k_left = k_end - k0
        a = tl.load(x_ptrs, mask=(offs_m[None, :, None] < M) & (kk < k_left), other=0.0)
        packed = tl.load(q_ptrs, mask=rr < k_left // 8, other=0)
        w = _nibbles4(packed)
        if GROUPED:
            g = (k0 + 8 * rr) // group_size
            w = w * tl.load(s_ptr + g * stride_sg + safe_n[None, None, None, :] * stride_sn, mask=8 * rr < k_left,
                            other=0.0)
        w = tl.reshape(w, (WARP_SPLIT, BLOCK_K, BLOCK_N))
        acc = tl.dot(a, w, acc)
        x_ptrs += STEP * stride_xk
        q_ptrs += BLOCK_R * WARP_SPLIT * stride_qr
    acc = tl.sum(acc, axis=0)
    if not GROUPED:
        acc = acc * tl.load(s_ptr + safe_n * stride_sn).to(tl.float32)[None, :]
    acc, store = split_k_reduce(acc, ws_ptr, cnt_ptr, 0, pid_n, pid_k, offs_m, offs_n, M, N, BLOCK_N, SPLIT_K)
    if store:
        y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
        tl.store(y_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def launch(x, qweight, scales, cfg):
    M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
    assert M <= 16
    cfg = dict(cfg)
    split_k = cfg["SPLIT_K"]
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    tiles = triton.cdiv(N, cfg["BLOCK_N"])
    ws, counters = split_k_workspace(y, split_k, tiles, torch.float32)
    _decode_kernel[(tiles, split_k)](
        x, qweight, scales, y, ws, counters, M, N, K, group_size,
        x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1),
        scales.stride(0), scales.stride(1), y.stride(0), y.stride(1),
        GROUPED=scales.shape[0] > 1, BLOCK_M=16, **cfg)
    return y
