"""DDS with several block rows per program (developer tool; sweep needs a GPU).

    python -m bench.dds_grouped

The solution's DDS kernel computes a [BLOCK_M, 32] tile of y per program, so
each dot is at most 32 wide. Here a program owns G block rows ([BLOCK_M, 32 G]
of y) and walks the union of their block columns; a block that one of the G
rows does not store is read as zeros. A plan pass (one program per group)
writes, for each group, the list of union columns and a [block row, block
column] -> stored-block map (-1 where none).
"""

from __future__ import annotations

import itertools

import torch
import triton
import triton.language as tl

from bench.problems import dds_problem
from grader.sandbox.timing import median_ms
from solutions import dds as dds_mod
from solutions.utils import BSR_BLOCK


@triton.jit
def _plan_kernel(crow_ptr, col_ptr, map_ptr, list_ptr, count_ptr, NB, KB,
                 G: tl.constexpr, BLOCK_KB: tl.constexpr, CHUNK: tl.constexpr):
    """Group g: map[row, kb] for its G block rows, then the union column list and its length."""
    g = tl.program_id(0)
    rows = g * G + tl.arange(0, G)
    offs_c = tl.arange(0, BLOCK_KB)
    for c0 in range(0, KB, BLOCK_KB):
        ok = (rows[:, None] < NB) & (c0 + offs_c < KB)[None, :]
        tl.store(map_ptr + rows[:, None] * KB + (c0 + offs_c)[None, :], -1, mask=ok)
    tl.debug_barrier()
    offs_b = tl.arange(0, CHUNK)
    for r in tl.static_range(G):
        row = g * G + r
        start = tl.load(crow_ptr + row, mask=row < NB, other=0)
        end = tl.load(crow_ptr + row + 1, mask=row < NB, other=0)
        for b0 in range(start, end, CHUNK):
            blk = b0 + offs_b
            col = tl.load(col_ptr + blk, mask=blk < end, other=0)
            tl.store(map_ptr + row * KB + col, blk.to(tl.int32), mask=blk < end)
    tl.debug_barrier()
    count = 0
    for c0 in range(0, KB, BLOCK_KB):
        ok = (rows[:, None] < NB) & (c0 + offs_c < KB)[None, :]
        m = tl.load(map_ptr + rows[:, None] * KB + (c0 + offs_c)[None, :], mask=ok, other=-1)
        used = (tl.max(m, axis=0) >= 0).to(tl.int32)
        pos = count + tl.cumsum(used, axis=0) - 1
        tl.store(list_ptr + g * KB + pos, c0 + offs_c, mask=used > 0)
        count += tl.sum(used, axis=0)
    tl.store(count_ptr + g, count)


@triton.jit
def _grouped_kernel(
    x_ptr, values_ptr, map_ptr, list_ptr, count_ptr, y_ptr, M, NB, KB, num_groups,
    stride_xm, stride_xk, stride_ym, stride_yn,
    G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK: tl.constexpr, STEPS: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_g = pid % num_groups
    pid_m = pid // num_groups
    BLOCK_N: tl.constexpr = G * BLOCK
    STEP_K: tl.constexpr = STEPS * BLOCK
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_s = tl.arange(0, STEP_K)
    rows_g = pid_g * G + tl.arange(0, G)
    x_rows = x_ptr + (offs_m % M)[:, None] * stride_xm
    # values[blk] is W_blk as [n, k] row-major; read it as [k, n].
    w_inner = (offs_n % BLOCK)[None, :] * BLOCK + (offs_s % BLOCK)[:, None]

    count = tl.load(count_ptr + pid_g)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(0, count, STEPS):
        tt = t + tl.arange(0, STEPS)
        kb = tl.load(list_ptr + pid_g * KB + tt, mask=tt < count, other=-1)             # [STEPS]
        idx = tl.load(map_ptr + rows_g[None, :] * KB + kb[:, None],
                      mask=(kb[:, None] >= 0) & (rows_g[None, :] < NB), other=-1)      # [STEPS, G]
        # The expanded indices are constant over each 32 x 32 block, so the x
        # columns and block values are runs of 32 contiguous elements; the
        # hints let the compiler vectorize loads whose addresses come from data.
        kb_k = tl.max_constancy(tl.reshape(tl.broadcast_to(kb[:, None], (STEPS, BLOCK)), (STEP_K,)), [BLOCK])
        idx_kn = tl.reshape(tl.broadcast_to(idx[:, None, :, None], (STEPS, BLOCK, G, BLOCK)), (STEP_K, BLOCK_N))
        idx_kn = tl.max_constancy(idx_kn, [BLOCK, BLOCK])
        x_off = tl.max_contiguous(tl.multiple_of(kb_k * BLOCK + offs_s % BLOCK, [BLOCK]), [BLOCK])
        a = tl.load(x_rows + x_off[None, :] * stride_xk, mask=(kb_k >= 0)[None, :], other=0.0)
        w_off = tl.max_contiguous(tl.multiple_of(idx_kn * (BLOCK * BLOCK) + w_inner, [BLOCK, 1]), [BLOCK, 1])
        w = tl.load(values_ptr + w_off, mask=idx_kn >= 0, other=0.0)
        acc = tl.dot(a, w, acc)

    cols = pid_g * BLOCK_N + offs_n
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + cols[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (cols[None, :] < NB * BLOCK))


def run_grouped(x, weight_bsr, cfg):
    M, K = x.shape
    N = weight_bsr.shape[0]
    NB, KB = N // BSR_BLOCK, K // BSR_BLOCK
    G = cfg["G"]
    groups = triton.cdiv(NB, G)
    dev = x.device
    bmap = torch.empty((NB, KB), device=dev, dtype=torch.int32)
    cols = torch.empty((groups, KB), device=dev, dtype=torch.int32)
    count = torch.empty((groups,), device=dev, dtype=torch.int32)
    _plan_kernel[(groups,)](weight_bsr.crow_indices(), weight_bsr.col_indices(), bmap, cols, count, NB, KB,
                            G=G, BLOCK_KB=min(256, triton.next_power_of_2(KB)), CHUNK=64)
    y = torch.empty((M, N), device=dev, dtype=torch.float16)
    _grouped_kernel[(triton.cdiv(M, cfg["BLOCK_M"]) * groups,)](
        x, weight_bsr.values(), bmap, cols, count, y, M, NB, KB, groups,
        x.stride(0), x.stride(1), y.stride(0), y.stride(1), BLOCK=BSR_BLOCK, **cfg)
    return y


def main():
    cfgs = [dict(G=g, BLOCK_M=bm, STEPS=s, num_warps=w, num_stages=3)
            for g, bm, s, w in itertools.product((2, 4), (64, 128), (1, 2), (4, 8))]
    for M, d in itertools.product((4096, 16384, 65536), (0.25, 0.5, 1.0)):
        x, bsr, w = dds_problem(M, 1024, 1024, d)
        ref = dds_mod.dds_mm(x, bsr)
        base = median_ms(lambda: x @ w.t(), reps=20)
        sol = median_ms(lambda: dds_mod.dds_mm(x, bsr), reps=20)
        rows = []
        for cfg in cfgs:
            try:
                out = run_grouped(x, bsr, cfg)
                err = (out.float() - ref.float()).abs().max().item()
                t = median_ms(lambda: run_grouped(x, bsr, cfg), reps=20)
            except Exception as e:  # shared memory, layout
                print(f"  skip {cfg}: {type(e).__name__}: {str(e)[:80]}", flush=True)
                continue
            rows.append((t, err, cfg))
        rows.sort(key=lambda r: r[0])
        print(f"== dds {M} @{d:.0%}: fp16 {base*1e3:.1f} us, solution {sol*1e3:.1f} us", flush=True)
        for t, err, cfg in rows[:4]:
            print(f"   {t*1e3:7.1f} us  dense/t {base/t:5.2f}  err {err:.1e}  {cfg}", flush=True)


if __name__ == "__main__":
    main()
