"""Candidate kernels that load tiles with TMA tensor descriptors (developer experiment, GPU).

    python -m bench.tma_experiments [dds|w8a8|w4a16 ...]

Each candidate is checked against the grader's reference, then timed next to
the solution's current path and fp16 torch.matmul in the same run.
"""

from __future__ import annotations

import itertools
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from bench.problems import dds_problem, w4a16_problem, w8a8_problem
from bench.sweep import _ms
from grader.compare import check_output
from grader.references import REFERENCES
from solutions import dds as dds_mod
from solutions import w4a16 as w4a16_mod
from solutions import w8a8 as w8a8_mod
from solutions.utils import BSR_BLOCK, grouped_tile, split_k_range, split_k_reduce, split_k_workspace


# ---------------------------------------------------------------- DDS grouped

@triton.jit
def _grouped_tma_kernel(x_desc, w_desc, y_desc, list_ptr, count_ptr, KB, num_groups,
                        G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK: tl.constexpr, STEPS: tl.constexpr,
                        LIST_CAP: tl.constexpr):
    pid = tl.program_id(0)
    pid_g = pid % num_groups
    pid_m = pid // num_groups
    BLOCK_N: tl.constexpr = G * BLOCK
    count = tl.load(count_ptr + pid_g)
    offs_l = tl.arange(0, LIST_CAP)
    # Entries past count point at block column KB, wholly outside x and w: TMA reads zeros there.
    union = tl.load(list_ptr + pid_g * KB + offs_l, mask=offs_l < count, other=KB)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(0, count, STEPS):
        for s in tl.static_range(STEPS):
            kb = tl.sum(tl.where(offs_l == t + s, union, 0))
            a = x_desc.load([pid_m * BLOCK_M, kb * BLOCK])
            w = w_desc.load([pid_g * BLOCK_N, kb * BLOCK])
            acc = tl.dot(a, w.T, acc)
    y_desc.store([pid_m * BLOCK_M, pid_g * BLOCK_N], acc.to(tl.float16))


def dds_grouped_tma(x, bsr, cfg):
    M, K = x.shape
    N = bsr.shape[0]
    NB, KB = N // BSR_BLOCK, K // BSR_BLOCK
    G, bm = cfg["G"], cfg["BLOCK_M"]
    groups = triton.cdiv(NB, G)
    values = bsr.values().contiguous()
    w = torch.empty((N, K), device=x.device, dtype=torch.float16)
    union_cols = torch.empty((groups, KB), device=x.device, dtype=torch.int32)
    union_len = torch.empty((groups,), device=x.device, dtype=torch.int32)
    dds_mod._densify_kernel[(NB, triton.cdiv(KB, 4))](
        values, bsr.crow_indices(), bsr.col_indices(), w, union_cols, union_len, NB, KB, K,
        G=G, BLOCK=BSR_BLOCK, CHUNK=4, ROW_CAP=triton.next_power_of_2(KB), UNION_CHUNK=32)
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    x_desc = TensorDescriptor.from_tensor(x, [bm, BSR_BLOCK])
    w_desc = TensorDescriptor.from_tensor(w, [G * BSR_BLOCK, BSR_BLOCK])
    y_desc = TensorDescriptor.from_tensor(y, [bm, G * BSR_BLOCK])
    _grouped_tma_kernel[(triton.cdiv(M, bm) * groups,)](
        x_desc, w_desc, y_desc, union_cols, union_len, KB, groups, BLOCK=BSR_BLOCK,
        LIST_CAP=max(triton.next_power_of_2(KB), cfg["STEPS"]), **cfg)
    return y


def run_dds():
    cfgs = [dict(G=g, BLOCK_M=bm, STEPS=st, num_warps=w, num_stages=ns)
            for g, (bm, w), st, ns in itertools.product((4, 8), ((128, 4), (128, 8), (256, 8)), (1, 2, 4), (3, 4))
            if g * 32 * bm <= 256 * 128]
    for M, d in itertools.product((4096, 16384, 65536), (1.0, 0.5)):
        x, bsr, w = dds_problem(M, 1024, 1024, d)
        _check("dds tma", dds_grouped_tma(x, bsr, cfgs[0]), REFERENCES["dds"](x, bsr))
        base = _ms(lambda: x @ w.t())
        sol = _ms(lambda: dds_mod.dds_mm(x, bsr))
        print(f"dds {M} @{d:.0%}: fp16 {base*1e3:.1f} us, solution {sol*1e3:.1f} us x{base/sol:5.2f}", flush=True)
        _best("dds tma", (M, d), base, lambda c: dds_grouped_tma(x, bsr, c), cfgs)


# ---------------------------------------------------------------- W8A8 decode, swapped operands

@triton.jit
def _w8a8_swap_kernel(a_ptr, w_desc, w_ptr, sx_ptr, sw_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K,
                      stride_am, stride_ak, stride_wn, stride_wk, stride_ym, stride_yn,
                      SPLIT_K: tl.constexpr, USE_TMA: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y^T tile [BLOCK_N, BLOCK_M] = W[BLOCK_N, K] @ q_x^T: the weight is the wgmma's 64-row operand."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    k_start, k_end = split_k_range(pid_k, K, SPLIT_K, BLOCK_K)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    safe_m = offs_m % M
    safe_n = offs_n % N
    a_ptrs = a_ptr + safe_m[:, None] * stride_am + (k_start + offs_k)[None, :] * stride_ak
    w_ptrs = w_ptr + safe_n[:, None] * stride_wn + (k_start + offs_k)[None, :] * stride_wk
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.int32)
    for k0 in range(k_start, k_end, BLOCK_K):
        k_ok = offs_k < k_end - k0
        a = tl.load(a_ptrs, mask=k_ok[None, :], other=0)
        if USE_TMA:
            w = w_desc.load([pid_n * BLOCK_N, k0])
        else:
            w = tl.load(w_ptrs, mask=k_ok[None, :], other=0)
        acc = tl.dot(w, a.T, acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk
    acc = acc.T
    acc, store = split_k_reduce(acc, ws_ptr, cnt_ptr, 0, pid_n, pid_k, offs_m, offs_n, M, N, BLOCK_N, SPLIT_K)
    if store:
        s_x = tl.load(sx_ptr + safe_m)
        s_w = tl.load(sw_ptr + safe_n)
        y = acc.to(tl.float32) * s_x[:, None] * s_w[None, :]
        tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, y.to(tl.float16),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def w8a8_swap(x, wt, sx, sw, cfg):
    M, K = x.shape
    N = wt.shape[1]
    cfg = dict(cfg)
    split_k, bn, bk = cfg["SPLIT_K"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    a = torch.empty((M, K), device=x.device, dtype=torch.int8)
    w8a8_mod._quantize_rows_kernel[(M, triton.cdiv(K, 256))](
        x, sx, a, M, K, x.stride(0), x.stride(1), a.stride(0), a.stride(1), BLOCK_M=1, BLOCK_K=256, PDL=False,
        num_warps=4)
    w = wt.t()  # [N, K], K contiguous
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    tiles = triton.cdiv(N, bn)
    ws, counters = split_k_workspace(y, split_k, tiles, torch.int32)
    w_desc = TensorDescriptor.from_tensor(w, [bn, bk])
    _w8a8_swap_kernel[(tiles, split_k)](
        a, w_desc, w, sx, sw, y, ws, counters, M, N, K, a.stride(0), a.stride(1), w.stride(0), w.stride(1),
        y.stride(0), y.stride(1), BLOCK_M=16, **cfg)
    return y


def run_w8a8():
    cfgs = [dict(SPLIT_K=sk, BLOCK_N=bn, BLOCK_K=bk, USE_TMA=tma, num_warps=4, num_stages=st)
            for sk, bn, bk, tma, st in itertools.product((1, 2, 4, 8), (64, 128), (128, 256), (True, False), (3, 4))]
    for M, N, K in [(1, 4096, 4096), (16, 4096, 4096), (1, 11008, 4096), (1, 4096, 11008), (16, 11008, 4096)]:
        x, wt, sx, sw, w = w8a8_problem(M, N, K)
        _check("w8a8 swap", w8a8_swap(x, wt, sx, sw, cfgs[0]), REFERENCES["w8a8"](x, wt, sx, sw))
        base = _ms(lambda: x @ w.t())
        sol = _ms(lambda: w8a8_mod.w8a8_mm(x, wt, sx, sw))
        print(f"w8a8 {(M, N, K)}: fp16 {base*1e3:.1f} us, solution {sol*1e3:.1f} us x{base/sol:5.2f}", flush=True)
        _best("w8a8 swap", (M, N, K), base, lambda c: w8a8_swap(x, wt, sx, sw, c), cfgs)


# ---------------------------------------------------------------- W4A16 with TMA loads

@triton.jit
def _w4a16_tma_kernel(x_desc, q_desc, s_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K, stride_sn, stride_ym, stride_yn,
                      DEQUANTIZED: tl.constexpr, SPLIT_K: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Per-channel scales only (experiment): x and the (packed or dequantized) weight through TMA."""
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    pid_k = tl.program_id(1)
    k_start, k_end = split_k_range(pid_k, K, SPLIT_K, BLOCK_K)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        a = x_desc.load([pid_m * BLOCK_M, k0])
        if DEQUANTIZED:
            w = q_desc.load([k0, pid_n * BLOCK_N])
        else:
            w = w4a16_mod._unpack_int4(q_desc.load([k0 // 8, pid_n * BLOCK_N]), BLOCK_K, BLOCK_N).to(tl.float16)
        acc = tl.dot(a, w, acc)
    if not DEQUANTIZED:
        acc = acc * tl.load(s_ptr + (offs_n % N) * stride_sn).to(tl.float32)[None, :]
    acc, store = split_k_reduce(acc, ws_ptr, cnt_ptr, pid_m, pid_n, pid_k, offs_m, offs_n, M, N, BLOCK_N, SPLIT_K)
    if store:
        tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc.to(tl.float16),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))



def w4a16_tma(x, qw, s, cfg):
    M, K = x.shape
    N = qw.shape[1]
    cfg = dict(cfg)
    bm, bn, bk, split_k = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["SPLIT_K"]
    if cfg["DEQUANTIZED"]:
        w = w4a16_mod._dequantize(qw, s, K)
        q_desc = TensorDescriptor.from_tensor(w, [bk, bn])
    else:
        q_desc = TensorDescriptor.from_tensor(qw, [bk // 8, bn])
    x_desc = TensorDescriptor.from_tensor(x, [bm, bk])
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    ws, counters = split_k_workspace(y, split_k, tiles, torch.float32)
    _w4a16_tma_kernel[(tiles, split_k)](x_desc, q_desc, s, y, ws, counters, M, N, K, s.stride(1),
                                        y.stride(0), y.stride(1), **cfg)
    return y


def run_w4a16():
    small = [dict(DEQUANTIZED=False, SPLIT_K=sk, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=4,
                  num_stages=st)
             for sk, bn, bk, st in itertools.product((4, 8), (64, 128), (128, 256), (3, 5))]
    mid = [dict(DEQUANTIZED=False, SPLIT_K=sk, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, GROUP_M=8, num_warps=w,
                num_stages=st)
           for sk, (bm, w), bn, st in itertools.product((1, 2), ((128, 4), (256, 8)), (64, 128), (3, 4))]
    large = [dict(DEQUANTIZED=True, SPLIT_K=1, BLOCK_M=128, BLOCK_N=bn, BLOCK_K=64, GROUP_M=8, num_warps=w,
                  num_stages=st)
             for bn, w, st in ((128, 4, 4), (128, 8, 4), (256, 8, 3), (256, 8, 4))]
    for cfgs, shapes in ((small, [(1, 4096, 4096), (16, 4096, 4096), (1, 4096, 11008)]),
                         (mid, [(256, 4096, 4096), (256, 11008, 4096), (256, 4096, 11008)]),
                         (large + mid, [(1024, 4096, 4096), (1024, 11008, 4096)]),
                         (large, [(4096, 4096, 4096)])):
        for M, N, K in shapes:
            x, qw, s, w = w4a16_problem(M, N, K)
            _check("w4a16 tma", w4a16_tma(x, qw, s, cfgs[0]), REFERENCES["w4a16"](x, qw, s))
            base = _ms(lambda: x @ w.t())
            sol = _ms(lambda: w4a16_mod.w4a16_mm(x, qw, s))
            print(f"w4a16 {(M, N, K)}: fp16 {base*1e3:.1f} us, solution {sol*1e3:.1f} us x{base/sol:5.2f}",
                  flush=True)
            _best("w4a16 tma", (M, N, K), base, lambda c: w4a16_tma(x, qw, s, c), cfgs)


# ---------------------------------------------------------------- decode: wide tiles (long DRAM runs)

def run_decode_wide():
    """Decode tiles that read longer contiguous runs of the weight per row."""
    w8 = [dict(SPLIT_K=sk, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=w, num_stages=st, PDL=True)
          for sk, bn, bk, w, st in itertools.product((1, 2, 4, 8), (32, 64), (512, 1024), (4,), (2, 3, 4))
          if bn * bk * st <= 160 * 1024]
    w8_swap = [dict(SPLIT_K=sk, BLOCK_N=bn, BLOCK_K=bk, USE_TMA=tma, num_warps=w, num_stages=st)
               for sk, bn, bk, tma, w, st in itertools.product((1, 2, 4, 8), (64,), (512, 1024), (True, False), (4,),
                                                               (2, 3, 4))
               if bn * bk * st <= 160 * 1024]
    for M, N, K in [(1, 4096, 4096), (16, 4096, 4096), (1, 11008, 4096), (1, 4096, 11008)]:
        x, wt, sx, sw, w = w8a8_problem(M, N, K)
        base = _ms(lambda: x @ w.t())
        sol = _ms(lambda: w8a8_mod.w8a8_mm(x, wt, sx, sw))
        print(f"w8a8 {(M, N, K)}: fp16 {base*1e3:.1f} us, solution {sol*1e3:.1f} us x{base/sol:5.2f}", flush=True)
        _best("w8a8 wide", (M, N, K), base, lambda c: w8a8_mod._launch(x, wt, sx, sw, c), w8)
        _best("w8a8 wide swap", (M, N, K), base, lambda c: w8a8_swap(x, wt, sx, sw, c), w8_swap)
    w4 = [dict(SPLIT_K=sk, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=w, num_stages=st)
          for sk, bn, bk, w, st in itertools.product((4, 8, 16), (256, 512), (32, 64, 128), (4, 8), (3, 4))
          if bn * bk <= 256 * 128]
    w4_tma = [dict(DEQUANTIZED=False, **c) for c in w4 if c["BLOCK_N"] <= 256]
    for M, N, K in [(1, 4096, 4096), (16, 4096, 4096), (1, 11008, 4096), (1, 4096, 11008)]:
        x, qw, s, w = w4a16_problem(M, N, K)
        base = _ms(lambda: x @ w.t())
        sol = _ms(lambda: w4a16_mod.w4a16_mm(x, qw, s))
        print(f"w4a16 {(M, N, K)}: fp16 {base*1e3:.1f} us, solution {sol*1e3:.1f} us x{base/sol:5.2f}", flush=True)
        _best("w4a16 wide", (M, N, K), base, lambda c: w4a16_mod._launch(x, qw, s, K, c), w4)
        _best("w4a16 wide tma", (M, N, K), base, lambda c: w4a16_tma(x, qw, s, c), w4_tma)


# ---------------------------------------------------------------- helpers

def _check(name, out, ref):
    check = check_output(out, ref, name.split()[0], tuple(ref.shape))
    if not check.passed:
        raise SystemExit(f"{name}: wrong result: {check.message}")


def _best(name, shape, base_ms, fn_of_cfg, cfgs, keep=4):
    rows = []
    for cfg in cfgs:
        try:
            t = _ms(lambda: fn_of_cfg(cfg))
        except Exception as e:  # out of shared memory, unsupported layout
            print(f"  skip {cfg}: {type(e).__name__}: {str(e)[:100]}", flush=True)
            continue
        rows.append((t, cfg))
    rows.sort(key=lambda r: r[0])
    for t, cfg in rows[:keep]:
        print(f"{name} {shape} base {base_ms*1e3:8.1f}us  {t*1e3:8.1f}us  x{base_ms/t:5.2f}  {cfg}", flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for which in sys.argv[1:] or ["dds", "w8a8", "w4a16"]:
        globals()[f"run_{which}"]()
