"""DDS: dense fp16 x times a BSR-sparse fp16 weight with 32x32 blocks.

    y[m, 32i + r] = sum over stored blocks (i, j) of  x[m, 32j : 32j+32] . W_ij[r, :]

Block row i of W holds output channels 32i..32i+31. Three kernels; the configs say which one each shape gets:

- ``_dds_kernel``, one block row per program, walks that row's stored blocks (crow_indices[i] ..
  crow_indices[i+1]) and gathers the 32 matching columns of x for each: zero blocks cost nothing. Block
  rows run fastest, so all block rows of one tile of x run together and read it from L2. Best at small M.
- ``_dds_rows_kernel``, the union walk: G block rows per program, each column of x loaded once for all G.
  The one-row kernel reads each column of x once per block row that stores it: at 25 % density 8 times x
  for N = 1024, more than a dense GEMM moves; G = 2 reads it 7 times.
- ``_densify_kernel`` then ``_grouped_kernel``: the union walk as a GEMM over a densified copy of the
  weight (two launches); dense weights at large M.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import BSR_BLOCK, check_dds_inputs

# ----------------------------------------------------------------------------- kernels

@triton.jit
def _dds_kernel(
    x_ptr, values_ptr, crow_ptr, col_ptr, y_ptr, M, num_block_rows,
    stride_xm, stride_xk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK: tl.constexpr, BLOCKS_PER_STEP: tl.constexpr,
):
    """One [BLOCK_M, BLOCK] tile of y: rows pid_m * BLOCK_M.., block row pid_n."""
    pid = tl.program_id(0)
    pid_n = pid % num_block_rows
    pid_m = pid // num_block_rows

    # Each step takes BLOCKS_PER_STEP stored blocks of the row: the gathered x columns and the stacked blocks
    # make one dot of depth BLOCKS_PER_STEP * 32, which keeps the tensor cores busier than a 32-deep one.
    STEP_K: tl.constexpr = BLOCKS_PER_STEP * BLOCK
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_b = tl.arange(0, BLOCK)
    offs_s = tl.arange(0, STEP_K)
    slot = offs_s // BLOCK     # which stored block of the step
    within = offs_s % BLOCK    # column inside that block
    x_rows = x_ptr + (offs_m % M)[:, None] * stride_xm
    # values[i] is W_ij as [n, k], row-major: read as its transpose [k, n], K-major as the tensor cores want.
    w_tile = offs_b[None, :] * BLOCK + within[:, None]

    start = tl.load(crow_ptr + pid_n)
    end = tl.load(crow_ptr + pid_n + 1)
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    for i in range(start, end, BLOCKS_PER_STEP):
        blk = i + slot
        ok = blk < end
        col = tl.load(col_ptr + blk, mask=ok, other=0)
        a = tl.load(x_rows + (col * BLOCK + within)[None, :] * stride_xk, mask=ok[None, :], other=0.0)
        w = tl.load(values_ptr + blk[:, None] * (BLOCK * BLOCK) + w_tile, mask=ok[:, None], other=0.0)
        acc = tl.dot(a, w, acc)

    offs_n = pid_n * BLOCK + offs_b
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(tl.float16), mask=offs_m[:, None] < M)


@triton.jit
def _pop_low_bit(bits):
    """(index of the lowest set bit of ``bits``, that bit alone, ``bits`` without it); int32. That bit is a power of
    two, which float32 holds exactly (bit 31 too: -2**31): its exponent field is the index, no count-trailing-zeros
    instruction needed. bits = 0 gives (-127, 0, 0)."""
    low = bits & -bits
    return ((low.to(tl.float32).to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, low, bits ^ low


@triton.jit
def _dds_rows_kernel(
    x_ptr, values_ptr, crow_ptr, col_ptr, y_ptr, M, N, NB, KB,
    stride_xm, stride_xk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK: tl.constexpr, G: tl.constexpr,
):
    """[BLOCK_M, G * BLOCK] tile of y: block rows of group pid_g, row tile pid_m.

    The program walks the union of its G block rows' columns and loads each union column of x once for all G
    rows; one dot of width G * BLOCK multiplies the rows' blocks there, zeros for rows that store none. Which
    row stores which column comes from crow_indices and col_indices in this call, 32 block columns at a time:
    one bit mask per row. BSR keeps a row's columns sorted (torch's invariant), so a row's next block is at
    w_offs, advanced at each union column the row stores: bit arithmetic, no index load for the pipeliner to
    wait on. Offsets into values are int32 (the wrapper keeps this kernel to weights under 2**31 elements).

    No branch around the dot: a per-row dot under "if the row stores this column" was miscompiled (Triton 3.6,
    ptxas 12.8, 4 warps: later rows reused the first row's wgmma descriptors of x; docs/performance.md).
    """
    pid = tl.program_id(0)
    num_groups = tl.cdiv(NB, G)
    pid_g = pid % num_groups
    pid_m = pid // num_groups
    GB: tl.constexpr = G * BLOCK
    CHUNK: tl.constexpr = 32   # block columns per mask: the bits of an int32

    offs_k = tl.arange(0, BLOCK)
    offs_n = tl.arange(0, GB)
    offs_c = tl.arange(0, CHUNK)
    # The weight tile [BLOCK (k), GB (n)]: n = 32 r + i is row i of the block of the group's row r; values[b] is
    # W_ij as [i, k] row-major, read transposed (K-major, as the dot wants it).
    w_tile = (offs_n % BLOCK)[None, :] * BLOCK + offs_k[:, None]
    row_of_n = offs_n // BLOCK
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    x_rows = x_ptr + (offs_m % M)[:, None] * stride_xm + offs_k[None, :] * stride_xk

    # Per block row, scalars in tuples of G: its next stored block (index, element offset), the end of its blocks.
    nexts = ()
    ends = ()
    w_offs = ()
    for r in tl.static_range(G):
        row = pid_g * G + r
        start = tl.load(crow_ptr + row, mask=row < NB, other=0).to(tl.int32)
        nexts = nexts + (start,)
        ends = ends + (tl.load(crow_ptr + row + 1, mask=row < NB, other=0).to(tl.int32),)
        w_offs = w_offs + (start * (BLOCK * BLOCK),)
    acc = tl.zeros((BLOCK_M, GB), dtype=tl.float32)

    for c0 in range(0, KB, CHUNK):
        # Bit t of a row's mask: the row stores the block at column c0 + t (with sorted columns, its next ones).
        bitss = ()
        union = tl.zeros((), dtype=tl.int32)
        for r in tl.static_range(G):
            nxt = nexts[r] + offs_c
            rel = tl.load(col_ptr + nxt, mask=nxt < ends[r], other=-1).to(tl.int32) - c0
            inside = (rel >= 0) & (rel < CHUNK)
            bits = tl.sum(tl.where(inside, 1 << tl.where(inside, rel, 0), 0), axis=0)   # distinct: sum = or
            nexts = nexts[:r] + (nexts[r] + tl.sum(inside.to(tl.int32), axis=0),) + nexts[r + 1:]
            bitss = bitss + (bits,)
            union = union | bits
        count = tl.sum((union >> offs_c) & 1, axis=0)

        rem = union
        for _ in range(count):
            j, low, rem = _pop_low_bit(rem)
            a = tl.load(x_rows + (c0 + j) * BLOCK * stride_xk)   # x[:, this column]
            # Per output column of the tile: its row's next block's offset, and 1 if that row stores this column.
            w_off = tl.zeros((GB,), dtype=tl.int32)
            has = tl.zeros((GB,), dtype=tl.int32)
            new_offs = ()
            for r in tl.static_range(G):
                stored = ((bitss[r] & low) != 0).to(tl.int32)
                w_off = tl.where(row_of_n == r, w_offs[r], w_off)
                has = tl.where(row_of_n == r, stored, has)
                new_offs = new_offs + (w_offs[r] + stored * (BLOCK * BLOCK),)
            w = tl.load(values_ptr + (w_off[None, :] + w_tile), mask=has[None, :] != 0, other=0.0)
            acc = tl.dot(a, w, acc)
            w_offs = new_offs

    offs_y = pid_g * GB + offs_n
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_y[None, :] * stride_yn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_y[None, :] < N))


@triton.jit
def _densify_kernel(values_ptr, crow_ptr, col_ptr, w_ptr, list_ptr, count_ptr, NB, KB, K,
                    G: tl.constexpr, BLOCK: tl.constexpr, CHUNK: tl.constexpr, ROW_CAP: tl.constexpr,
                    UNION_CHUNK: tl.constexpr):
    """Program (i, c): the dense rows of block row i at block columns c * CHUNK .. c * CHUNK + CHUNK - 1 of w
    ([NB * BLOCK, K] fp16, the weight with its zero blocks written out). Program (g * G, 0) also writes group g's
    union column list (list: [groups, KB] int32, increasing) and its length (count: [groups] int32)."""
    i = tl.program_id(0)
    offs_s = tl.arange(0, ROW_CAP)
    offs_b = tl.arange(0, BLOCK)
    start = tl.load(crow_ptr + i)
    end = tl.load(crow_ptr + i + 1)
    cols = tl.load(col_ptr + start + offs_s, mask=offs_s < end - start, other=-1)
    kb = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    # Which stored block (if any) sits at each block column of the chunk.
    hit = cols[:, None] == kb[None, :]                                          # [ROW_CAP, CHUNK]
    blk = tl.sum(tl.where(hit, start + offs_s[:, None], 0), axis=0)
    found = tl.max(hit.to(tl.int32), axis=0) > 0
    r = offs_b[:, None, None]                                                   # [BLOCK, CHUNK, BLOCK]
    c = offs_b[None, None, :]
    v = tl.load(values_ptr + blk[None, :, None] * (BLOCK * BLOCK) + r * BLOCK + c,
                mask=found[None, :, None], other=0.0)
    tl.store(w_ptr + (i * BLOCK + r) * K + kb[None, :, None] * BLOCK + c, v, mask=(kb < KB)[None, :, None])

    if (tl.program_id(1) == 0) & (i % G == 0):
        count = 0
        for c0 in range(0, KB, UNION_CHUNK):
            col = c0 + tl.arange(0, UNION_CHUNK)
            used = tl.zeros((UNION_CHUNK,), dtype=tl.int32)
            for r_g in tl.static_range(G):
                row = i + r_g
                s = tl.load(crow_ptr + row, mask=row < NB, other=0)
                e = tl.load(crow_ptr + row + 1, mask=row < NB, other=0)
                row_cols = tl.load(col_ptr + s + offs_s, mask=offs_s < e - s, other=-1)
                used = tl.maximum(used, tl.max((row_cols[:, None] == col[None, :]).to(tl.int32), axis=0))
            pos = count + tl.cumsum(used, axis=0) - 1
            tl.store(list_ptr + (i // G) * KB + pos, col, mask=used > 0)
            count += tl.sum(used, axis=0)
        tl.store(count_ptr + i // G, count)


@triton.jit
def _grouped_kernel(
    x_ptr, w_ptr, list_ptr, count_ptr, y_ptr, M, N, K, KB, num_groups,
    stride_xm, stride_xk, stride_ym, stride_yn,
    G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK: tl.constexpr, STEPS: tl.constexpr, LIST_CAP: tl.constexpr,
):
    """One [BLOCK_M, G * BLOCK] tile of y: rows pid_m * BLOCK_M.., block rows of group pid_g. w is the densified
    [N, K] weight. Each step takes STEPS union columns: x[:, those columns] ([BLOCK_M, STEPS * BLOCK]) times
    w[group rows, those columns]^T ([STEPS * BLOCK, G * BLOCK]), zeros where a row stores no block."""
    pid = tl.program_id(0)
    pid_g = pid % num_groups
    pid_m = pid // num_groups
    BLOCK_N: tl.constexpr = G * BLOCK
    STEP_K: tl.constexpr = STEPS * BLOCK
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_g * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_s = tl.arange(0, STEP_K)
    x_rows = x_ptr + (offs_m % M)[:, None] * stride_xm
    w_rows = w_ptr + (offs_n % N)[None, :] * K

    count = tl.load(count_ptr + pid_g)
    # The whole union list lives in registers: a column index loaded inside the loop would make every x and w
    # load depend on a load of the same iteration, which the software pipeliner cannot run ahead of.
    offs_l = tl.arange(0, LIST_CAP)
    union = tl.load(list_ptr + pid_g * KB + offs_l, mask=offs_l < count, other=-1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(0, count, STEPS):
        tt = t + tl.arange(0, STEPS)
        kb = tl.sum(tl.where(offs_l[None, :] == tt[:, None], union[None, :], 0), axis=1)   # union[tt]
        kb = tl.where(tt < count, kb, -1)
        # The column offsets are data; the hints say they form runs of BLOCK contiguous columns, so the loads
        # are vectorized like a dense GEMM's (without them: 7-10x slower).
        kb_k = tl.reshape(tl.broadcast_to(kb[:, None], (STEPS, BLOCK)), (STEP_K,))
        ok = tl.max_constancy(kb_k, [BLOCK]) >= 0
        k_off = tl.max_contiguous(tl.multiple_of(kb_k * BLOCK + offs_s % BLOCK, [BLOCK]), [BLOCK])
        a = tl.load(x_rows + k_off[None, :] * stride_xk, mask=ok[None, :], other=0.0)
        w = tl.load(w_rows + k_off[:, None], mask=ok[:, None], other=0.0)
        acc = tl.dot(a, w, acc)

    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# ----------------------------------------------------------------------------- configs
# Each config holds one kernel's constexprs (they say which kernel runs: _kernel_of), num_warps and num_stages.
# Names: BLOCK_M, then blocks per step (bps), group (g) or union columns per step (steps); warps (w), stages (s).
# Times: H100, `python -m bench.sweep dds` of 2026-11-25, N = K = 1024, fp16 torch.matmul in brackets; the rest in
# docs/performance.md.
CONFIGS = {
    # _dds_kernel. Small M: few programs, each timed by its chain of dependent loads (crow, col, then x and W);
    # more blocks per step shorten it: 16 at M = 16, 10.3 us at 100 % [8.1-8.3] (32 rows, 4 per step: 13.7).
    "m16_bps4_s2": triton.Config(dict(BLOCK_M=16, BLOCKS_PER_STEP=4), num_warps=4, num_stages=2),
    "m16_bps16_s1": triton.Config(dict(BLOCK_M=16, BLOCKS_PER_STEP=16), num_warps=4, num_stages=1),
    # M = 256: 8 blocks per step from 25 %, 12.1 us at 100 % [8.4-8.5] (4 per step: 13.5); 4 per step at 5 %.
    "m64_bps4_s2": triton.Config(dict(BLOCK_M=64, BLOCKS_PER_STEP=4), num_warps=4, num_stages=2),
    "m64_bps8_s2": triton.Config(dict(BLOCK_M=64, BLOCKS_PER_STEP=8), num_warps=4, num_stages=2),
    # The large-M choice before the union walk, now _ONE_ROW_FALLBACK (weights of 2**31 elements or more).
    "m128_bps2_s2": triton.Config(dict(BLOCK_M=128, BLOCKS_PER_STEP=2), num_warps=4, num_stages=2),
    # _dds_rows_kernel. The accumulator ([BLOCK_M, 32 G] fp32) bounds BLOCK_M x G at 128 x warps. G = 1 (a row's
    # own blocks, loads pipelined over the bit walk) at M = 1024: 10.2 us at 25 % [9.5] (one-row kernel: 12.6).
    "rows_m128_g1_s4": triton.Config(dict(BLOCK_M=128, G=1), num_warps=4, num_stages=4),
    # G = 2 up to 25 %: 97.9 us at 65536 @ 5 % [183.8], 17.7 at 4096 @ 25 % [18.1] (one-row kernel: 21.3).
    "rows_m128_g2_s3": triton.Config(dict(BLOCK_M=128, G=2), num_warps=4, num_stages=3),
    # G = 4 from 50 %: 21.1 us at 4096 @ 50 % [18.4]; 4 stages are 4-7 % faster than 3.
    "rows_m128_g4_s4": triton.Config(dict(BLOCK_M=128, G=4), num_warps=4, num_stages=4),
    # _densify_kernel + _grouped_kernel, dense weights at M >= 16384: 259.2 us at 65536 [200.3] (union walk: 281.5).
    "m256_g4_steps2_w8_s3": triton.Config(dict(G=4, BLOCK_M=256, STEPS=2), num_warps=8, num_stages=3),
}

# When set, every call runs this config: the tests force each path with it, bench/sweep.py times configs by it.
FORCE_CONFIG: triton.Config | None = None

# The union walk keeps int32 offsets into values: a weight of 2**31 elements or more (4 GB) takes this config.
_ONE_ROW_FALLBACK = "m128_bps2_s2"


def _select_config(M: int, N: int, K: int, nnz_blocks: int) -> str:
    """The name of the config for one problem: measured on an H100 (figures at CONFIGS)."""
    density = nnz_blocks / max(1, (N // BSR_BLOCK) * (K // BSR_BLOCK))
    if M <= 16:
        return "m16_bps4_s2" if density <= 0.1 else "m16_bps16_s1"
    if M <= 256:
        return "m64_bps4_s2" if density <= 0.1 else "m64_bps8_s2"
    if M <= 2048:     # few row tiles: the most programs (one per block row)
        return "rows_m128_g1_s4"
    if density <= 0.375:
        return "rows_m128_g2_s3"
    if density > 0.75 and M >= 16384:
        return "m256_g4_steps2_w8_s3"
    return "rows_m128_g4_s4"


def _kernel_of(cfg: triton.Config) -> str:
    """Which kernel a config is for, by its constexprs: one_row, rows (the union walk) or grouped."""
    if "BLOCKS_PER_STEP" in cfg.kwargs:
        return "one_row"
    return "grouped" if "STEPS" in cfg.kwargs else "rows"


# ----------------------------------------------------------------------------- wrapper
def dds_mm(x: torch.Tensor, weight_bsr: torch.Tensor) -> torch.Tensor:
    """Dense x BSR-sparse matrix multiply: y = x @ W^T, skipping zero blocks.

    Args:
        x: [M, K] float16, contiguous.
        weight_bsr: torch.sparse_bsr tensor of shape [N, K] (N, K multiples of
            32), blocksize (32, 32), float16 values [nnz_blocks, 32, 32];
            crow_indices / col_indices int64 or int32.

    Returns:
        y: [M, N] float16 = x @ W^T (fp32 accumulation).

    Raises:
        ValueError: wrong dtype, rank, layout, blocksize or K mismatch.
    """
    M, N, K = check_dds_inputs(x, weight_bsr)
    if M == 0:  # no rows: an empty result, as nn.Linear gives
        return torch.empty((0, N), device=x.device, dtype=torch.float16)
    if N == 0:
        return torch.empty((M, 0), device=x.device, dtype=torch.float16)
    x, values = x.contiguous(), weight_bsr.values().contiguous()
    crow, col = weight_bsr.crow_indices(), weight_bsr.col_indices()
    cfg = FORCE_CONFIG if FORCE_CONFIG is not None else CONFIGS[_select_config(M, N, K, values.shape[0])]
    if _kernel_of(cfg) == "rows" and values.numel() >= 2**31:   # int32 offsets into values
        cfg = CONFIGS[_ONE_ROW_FALLBACK]
    meta, options = cfg.kwargs, dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    NB, KB = N // BSR_BLOCK, K // BSR_BLOCK
    tiles = triton.cdiv(M, meta["BLOCK_M"])
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    if _kernel_of(cfg) == "one_row":
        _dds_kernel[(tiles * NB, 1, 1)](x, values, crow, col, y, M, NB, x.stride(0), x.stride(1),
                                         y.stride(0), y.stride(1), BLOCK=BSR_BLOCK, **meta, **options)
    elif _kernel_of(cfg) == "rows":
        groups = triton.cdiv(NB, meta["G"])
        _dds_rows_kernel[(tiles * groups, 1, 1)](x, values, crow, col, y, M, N, NB, KB, x.stride(0), x.stride(1),
                                                  y.stride(0), y.stride(1), BLOCK=BSR_BLOCK, **meta, **options)
    else:   # densify, then the GEMM over the union columns of each group of G block rows
        groups = triton.cdiv(NB, meta["G"])
        w = torch.empty((N, K), device=x.device, dtype=torch.float16)
        union_cols = torch.empty((groups, KB), device=x.device, dtype=torch.int32)
        union_len = torch.empty((groups,), device=x.device, dtype=torch.int32)
        _densify_kernel[(NB, triton.cdiv(KB, 4), 1)](values, crow, col, w, union_cols, union_len, NB, KB, K,
                                                      G=meta["G"], BLOCK=BSR_BLOCK, CHUNK=4,
                                                      ROW_CAP=triton.next_power_of_2(KB), UNION_CHUNK=32)
        _grouped_kernel[(tiles * groups, 1, 1)](x, w, union_cols, union_len, y, M, N, K, KB, groups,
                                                 x.stride(0), x.stride(1), y.stride(0), y.stride(1), BLOCK=BSR_BLOCK,
                                                 LIST_CAP=triton.next_power_of_2(KB), **meta, **options)
    return y
