"""W4A16 unpack and operand-order variants, timed side by side (developer tool, GPU only).

    python -m bench.w4a16_variants

Per-channel scales only. Two choices are varied:
  SWAP:   compute y^T = W x^T, so the unpacked weight is the left dot operand
          (on Hopper the left operand of wgmma may come from registers, the
          right one must be in shared memory) and the MMA's M side is N;
  GATHER: build the [K, N] (or [N, K]) int4 tile by loading each packed word
          once per nibble (the cache serves the repeats) and shifting by
          4 * (k % 8), instead of loading it once and reshaping
          [K/8, 8, N] -> [K, N].
"""

from __future__ import annotations

import itertools

import torch
import triton
import triton.language as tl

from bench.problems import w4a16_problem
from grader.sandbox.timing import median_ms
from solutions import w4a16 as w4a16_mod
from solutions.utils import grouped_tile, split_k_range, split_k_reduce, tile_counters


@triton.jit
def _variant_kernel(
    x_ptr, qw_ptr, s_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K,
    stride_xm, stride_xk, stride_qr, stride_qn, stride_ym, stride_yn,
    SWAP: tl.constexpr, GATHER: tl.constexpr, SPLIT_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    pid_k = tl.program_id(1)
    k_start, k_end = split_k_range(pid_k, K, SPLIT_K, BLOCK_K)
    BLOCK_R: tl.constexpr = BLOCK_K // 8
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    safe_m = offs_m % M
    safe_n = offs_n % N
    up = 28 - 4 * tl.arange(0, 8)
    if SWAP:
        x_ptrs = x_ptr + safe_m[None, :] * stride_xm + (k_start + offs_k)[:, None] * stride_xk  # [BK, BM]
        if GATHER:
            q_ptrs = qw_ptr + ((k_start + offs_k) // 8)[None, :] * stride_qr + safe_n[:, None] * stride_qn
            shift = (28 - 4 * (offs_k % 8))[None, :]
        else:
            q_ptrs = qw_ptr + (k_start // 8 + offs_r)[None, :] * stride_qr + safe_n[:, None] * stride_qn
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        x_ptrs = x_ptr + safe_m[:, None] * stride_xm + (k_start + offs_k)[None, :] * stride_xk  # [BM, BK]
        if GATHER:
            q_ptrs = qw_ptr + ((k_start + offs_k) // 8)[:, None] * stride_qr + safe_n[None, :] * stride_qn
            shift = (28 - 4 * (offs_k % 8))[:, None]
        else:
            q_ptrs = qw_ptr + (k_start // 8 + offs_r)[:, None] * stride_qr + safe_n[None, :] * stride_qn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)

    for k0 in range(k_start, k_end, BLOCK_K):
        x = tl.load(x_ptrs)
        packed = tl.load(q_ptrs)
        if SWAP:
            if GATHER:
                w = (packed << shift) >> 28
            else:
                w = tl.reshape((packed[:, :, None] << up[None, None, :]) >> 28, (BLOCK_N, BLOCK_K))
            acc = tl.dot(w.to(tl.float16), x, acc)
        else:
            if GATHER:
                w = (packed << shift) >> 28
            else:
                w = tl.reshape((packed[:, None, :] << up[None, :, None]) >> 28, (BLOCK_K, BLOCK_N))
            acc = tl.dot(x, w.to(tl.float16), acc)
        x_ptrs += BLOCK_K * stride_xk
        q_ptrs += BLOCK_R * stride_qr

    scale = tl.load(s_ptr + safe_n).to(tl.float32)
    if SWAP:
        acc = acc * scale[:, None]
        offs = offs_m[None, :] * N + offs_n[:, None]
        mask = (offs_m[None, :] < M) & (offs_n[:, None] < N)
        y_ptrs = y_ptr + offs_m[None, :] * stride_ym + offs_n[:, None] * stride_yn
    else:
        acc = acc * scale[None, :]
        offs = offs_m[:, None] * N + offs_n[None, :]
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    finisher = True
    if SPLIT_K > 1:
        acc, finisher = split_k_reduce(acc, ws_ptr, cnt_ptr, pid_m * tl.cdiv(N, BLOCK_N) + pid_n, pid_k,
                                       offs, mask, M * N, SPLIT_K)
    if finisher:
        tl.store(y_ptrs, acc.to(tl.float16), mask=mask)


def run_variant(x, qweight, scales, cfg):
    """Launch the variant kernel; K must divide into SPLIT_K * BLOCK_K tiles."""
    M, K = x.shape
    N = qweight.shape[1]
    assert K % (cfg["SPLIT_K"] * cfg["BLOCK_K"]) == 0
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    ws = torch.empty((cfg["SPLIT_K"], M, N), device=x.device, dtype=torch.float32)
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    _variant_kernel[(tiles, cfg["SPLIT_K"])](
        x, qweight, scales, y, ws, tile_counters(x.device, tiles), M, N, K,
        x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1), y.stride(0), y.stride(1), **cfg)
    return y


def _cfgs(tiles, M):
    out = []
    for (sk, bm, bn, bk, warps, stages), swap, gather in itertools.product(tiles, (False, True), (False, True)):
        out.append(dict(SWAP=swap, GATHER=gather, SPLIT_K=sk, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                        GROUP_M=1 if M <= 16 else 8, num_warps=warps, num_stages=stages))
    return out


SMALL = [(8, 16, 64, 128, 4, 4), (4, 16, 128, 256, 4, 4), (2, 16, 128, 512, 4, 3), (4, 16, 256, 256, 4, 3),
         (8, 16, 128, 256, 4, 4), (1, 16, 64, 512, 4, 3)]
LARGE = [(1, 128, 128, 64, 8, 3), (1, 128, 256, 64, 8, 3), (1, 256, 128, 64, 8, 3), (1, 64, 128, 128, 4, 4),
         (1, 128, 128, 128, 8, 3), (1, 64, 64, 128, 4, 4)]


def main():
    for M, N, K in [(1, 4096, 4096), (16, 4096, 4096), (1, 11008, 4096), (1, 4096, 11008),
                    (256, 4096, 4096), (4096, 4096, 4096)]:
        x, qw, s, w = w4a16_problem(M, N, K)
        ref = w4a16_mod.w4a16_mm(x, qw, s)  # tested against the exact reference
        base = median_ms(lambda: x @ w.t(), reps=20)
        sol = median_ms(lambda: w4a16_mod.w4a16_mm(x, qw, s), reps=20)
        rows = []
        for cfg in _cfgs(SMALL if M <= 16 else LARGE, M):
            if K % (cfg["SPLIT_K"] * cfg["BLOCK_K"]):
                continue
            try:
                out = run_variant(x, qw, s, cfg)
                err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                t = median_ms(lambda: run_variant(x, qw, s, cfg), reps=20)
            except Exception as e:  # out of shared memory, unsupported layout
                print(f"  skip {cfg}: {type(e).__name__}: {str(e)[:80]}", flush=True)
                continue
            rows.append((t, err, cfg))
        rows.sort(key=lambda r: r[0])
        print(f"== {M}x{N}x{K}: fp16 {base*1e3:.1f} us, solution {sol*1e3:.1f} us (x{base/sol:.2f})", flush=True)
        for t, err, cfg in rows[:8]:
            print(f"   {t*1e3:7.1f} us x{base/t:5.2f} err {err:.1e} {cfg}", flush=True)
        for swap, gather in itertools.product((False, True), (False, True)):
            best = [r for r in rows if r[2]["SWAP"] == swap and r[2]["GATHER"] == gather][:1]
            if best:
                print(f"   best swap={swap:d} gather={gather:d}: {best[0][0]*1e3:.1f} us", flush=True)


if __name__ == "__main__":
    main()
