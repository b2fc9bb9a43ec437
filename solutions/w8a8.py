"""W8A8: fp16 activations quantized per token in the kernel, int8 weights per output channel, int8 x int8 -> int32.

    y[m, n] = s_x[m] * s_w[n] * sum_k q_x[m, k] * q_w[n, k]
    q_x[m, k] = clamp(round_half_even(x[m, k] / s_x[m]), -128, 127)

``_quantize_rows_kernel`` quantizes x once (in the GEMM the division would be redone per N tile);
``_w8a8_gemm_kernel`` multiplies q_x by the weight, both int8 and K-major, and dequantizes. The configs
give each M its tiles: a weight stream at small M, split-K in between, grouped TMA tiles at large M.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # programmatic dependent launch
from triton.tools.tensor_descriptor import TensorDescriptor  # TMA, described on the host

from .utils import check_w8a8_inputs

# ----------------------------------------------------------------------------- kernels
# Helpers copied between w8a8.py and w4a16.py (the grader stages one file per task;
# tests/kernels/test_api.py checks).

@triton.jit
def _release_next_kernel(PDL: tl.constexpr):
    """Let a kernel launched after this one with ``launch_pdl=True`` start now."""
    if PDL:
        gdc_launch_dependents()


@triton.jit
def _wait_for_previous_kernel(PDL: tl.constexpr):
    """With PDL, wait until the previous kernel has finished and its writes are visible."""
    if PDL:
        gdc_wait()


@triton.jit
def _grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of ``pid`` in tutorial 03's grouped order: GROUP_M row tiles share a column tile in L2."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    return first_m + (pid % group) % rows_in_group, (pid % group) // rows_in_group


@triton.jit
def _split_k_range(pid_k, K, SPLIT_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """[k_start, k_end) of split ``pid_k`` out of SPLIT_K: whole BLOCK_K tiles, the last one ragged."""
    k_per_split = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_start = pid_k * k_per_split
    return k_start, min(K, k_start + k_per_split)


@triton.jit
def _split_k_reduce(acc, ws_ptr, cnt_ptr, pid_m, pid_n, pid_k, offs_m, offs_n, M, N,
                    BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr):
    """(acc, store): tile (pid_m, pid_n)'s SPLIT_K partial sums added up without a second kernel. Each
    program stores its partial in ws[pid_k] and bumps the tile's counter; the last to arrive sums them
    in a fixed order (deterministic), resets the counter and stores the tile; the others store nothing."""
    last = True
    if SPLIT_K > 1:
        tile = pid_m * tl.cdiv(N, BLOCK_N) + pid_n
        offs = offs_m[:, None] * N + offs_n[None, :]
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(ws_ptr + pid_k * M * N + offs, acc, mask=mask)
        tl.debug_barrier()  # every thread's partial is written before the counter moves
        last = tl.atomic_add(cnt_ptr + tile, 1) == SPLIT_K - 1  # acq_rel: sees the others' partials
        if last:
            acc = tl.zeros_like(acc)
            for s in range(SPLIT_K):
                acc += tl.load(ws_ptr + s * M * N + offs, mask=mask, other=0, cache_modifier=".cg")
            tl.store(cnt_ptr + tile, 0)  # leave the counter zeroed for the next call
    return acc, last


# x + 1.5 * 2**23 - 1.5 * 2**23 rounds |x| < 2**22 to an integer, ties to even, on the GPU and in the interpreter.
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
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr,
):
    """q_x = quantize(x, s_x) for one [BLOCK_M, BLOCK_K] tile."""
    _release_next_kernel(PDL)  # the GEMM may start now; it waits for q_x before reading it
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk, mask=mask, other=0.0)
    s = tl.load(sx_ptr + offs_m, mask=offs_m < M, other=1.0)
    q = _quantize_int8(x.to(tl.float32), s[:, None])
    tl.store(xq_ptr + offs_m[:, None] * stride_qm + offs_k[None, :] * stride_qk, q, mask=mask)


@triton.jit
def _w8a8_gemm_kernel(
    a_ptr, w_ptr, a_desc, w_desc, sx_ptr, sw_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K,
    stride_am, stride_ak, stride_wk, stride_wn, stride_ym, stride_yn,
    EVEN_K: tl.constexpr, SPLIT_K: tl.constexpr, PDL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    TMA: tl.constexpr = False,
):
    """One [BLOCK_M, BLOCK_N] tile of y = dequant(A @ W), A = q_x, W the K-major [K, N] view of the weight;
    SPLIT_K programs per tile. TMA loads whole tiles, zero past the edges: no addresses or masks to compute."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    pid_k = tl.program_id(1)  # each of the SPLIT_K programs of a tile sums its own slice of K
    k_start, k_end = _split_k_range(pid_k, K, SPLIT_K, BLOCK_K)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = k_start + tl.arange(0, BLOCK_K)
    # Rows/columns past M/N read a valid one instead of being masked; the masked store drops them.
    safe_m = offs_m % M
    safe_n = offs_n % N
    a_ptrs = a_ptr + safe_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + safe_n[None, :] * stride_wn
    s_x = tl.load(sx_ptr + safe_m)

    _wait_for_previous_kernel(PDL)  # A is written by the quantize pass
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(k_start, k_end, BLOCK_K):
        if TMA:  # split-K slices are whole BLOCK_K tiles, so only the last one is ragged, at K itself
            a = a_desc.load([pid_m * BLOCK_M, k0])
            w = w_desc.load([pid_n * BLOCK_N, k0]).T
        elif EVEN_K:
            a = tl.load(a_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_ok = offs_k < k_end - (k0 - k_start)
            a = tl.load(a_ptrs, mask=k_ok[None, :], other=0)
            w = tl.load(w_ptrs, mask=k_ok[:, None], other=0)
        acc = tl.dot(a, w, acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk

    acc, store = _split_k_reduce(acc, ws_ptr, cnt_ptr, pid_m, pid_n, pid_k, offs_m, offs_n, M, N, BLOCK_N, SPLIT_K)
    if store:
        s_w = tl.load(sw_ptr + safe_n)
        y = acc.to(tl.float32) * s_x[:, None] * s_w[None, :]
        y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
        tl.store(y_ptrs, y.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# ----------------------------------------------------------------------------- configs
def _config(block_m: int, block_n: int, block_k: int, split_k: int = 1, warps: int = 4, stages: int = 3,
            group_m: int = 8, pdl: bool = False, tma: bool = False) -> tuple[str, triton.Config]:
    """(name, config): BLOCK_MxBLOCK_NxBLOCK_K, split-K (sk), warps (w), group (g), stages (s), pdl, tma."""
    name = (f"{block_m}x{block_n}x{block_k}" + ("" if split_k == 1 else f"_sk{split_k}")
            + ("" if warps == 4 else f"_w{warps}") + ("" if group_m <= 8 else f"_g{group_m}") + f"_s{stages}"
            + "_pdl" * pdl + "_tma" * tma)
    return name, triton.Config(dict(SPLIT_K=split_k, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                                    GROUP_M=group_m, PDL=pdl, TMA=tma), num_warps=warps, num_stages=stages)


# Times: H100, `python -m bench.sweep w8a8` of 2026-11-25; the rest in docs/performance.md.
CONFIGS = dict([
    # M <= 16 (decode) is bound by streaming the weight: 512-byte runs of 64 rows, 5 stages: 15.3-15.5 us
    # at 4096^2 (split-K 4: 16.0-18.4). PDL: the GEMM waits, resident, while x is quantized: 0.7-1.3 us.
    _config(16, 64, 512, stages=5, group_m=1, pdl=True),
    # M = 65-512: split-K where K is long or the tiles few, reduced in the same kernel.
    _config(64, 128, 128, 2, stages=4),
    _config(128, 64, 128, 2, stages=4),
    _config(128, 64, 128),
    _config(64, 64, 128, stages=4),
    _config(64, 128, 128, stages=4),
    # M = 17-64, N <= 8192: still a weight stream, 32 rows per program: 18.1 us at 64 x 4096^2 (split-K 2: 22.7).
    _config(64, 32, 512, stages=4, group_m=1),
    # M > 512: grouped tile order and TMA loads: 138.7 us at 4096^3 (pointers: 143.7). An int8 dot waits
    # for its wgmma every K tile; at 96 KB of shared memory two CTAs share an SM and hide the wait.
    _config(128, 128, 128, tma=True),
])

# When set, every call runs this config: the tests force each path with it, bench/sweep.py times configs by it.
FORCE_CONFIG: triton.Config | None = None


def _select_config(M: int, N: int, K: int) -> str:
    """The name of the config for one problem; measured on H200 and H100 (docs/performance.md)."""
    if M <= 16:
        return "16x64x512_s5_pdl"
    if M <= 64:
        return "64x64x128_s4" if N > 8192 else "64x32x512_s4"
    if M <= 128:
        return "64x128x128_sk2_s4"
    if M <= 256:  # measured per shape class against torch._int_mm
        if K > 2 * N:
            return "128x64x128_sk2_s4"
        if N > 8192:
            return "128x64x128_s3"
        return "64x64x128_s4"
    if M <= 512:
        return "64x128x128_sk2_s4" if K > 2 * N else "64x128x128_s4"
    return "128x128x128_s3_tma"


# ----------------------------------------------------------------------------- wrapper
# Host helpers copied between w8a8.py and w4a16.py, like the kernel helpers.

def _interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _hopper_or_newer(t: torch.Tensor) -> bool:
    return t.is_cuda and torch.cuda.get_device_capability(t.device)[0] >= 9   # sm_90: PDL and TMA


def _dependent_launch(t: torch.Tensor) -> bool:
    """Whether a second kernel may be launched with ``launch_pdl=True`` (Hopper, not the interpreter)."""
    return not _interpreting() and _hopper_or_newer(t)


def _tma_ready(*tensors: torch.Tensor) -> bool:
    """Whether TMA can read these 2-D tensors: Hopper or the interpreter, unit-stride, 16-byte aligned rows."""
    if not (_interpreting() or _hopper_or_newer(tensors[0])):
        return False
    return all(t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0
               for t in tensors)


_COUNTERS: dict = {}   # the split-K tile counters of each device; every call leaves them zero (one stream)


def _split_k_workspace(y: torch.Tensor, split_k: int, tiles: int, dtype: torch.dtype):
    """(ws, counters) for ``_split_k_reduce``: ws [split_k, M, N] (y without split-K), >= ``tiles`` counters."""
    ws = torch.empty((split_k, *y.shape), device=y.device, dtype=dtype) if split_k > 1 else y
    counters = _COUNTERS.get(y.device)
    if counters is None or counters.numel() < tiles:
        counters = _COUNTERS[y.device] = torch.zeros(max(tiles, 4096), dtype=torch.int32, device=y.device)
    return ws, counters


def w8a8_mm(x: torch.Tensor, qweight_t: torch.Tensor, input_scale: torch.Tensor,
            weight_scale: torch.Tensor) -> torch.Tensor:
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
    if M == 0:  # no rows: an empty result, as nn.Linear gives
        return torch.empty((0, N), device=x.device, dtype=torch.float16)
    x = x.contiguous()
    input_scale = input_scale.to(torch.float32).contiguous()   # the kernels read float32 scales
    weight_scale = weight_scale.to(torch.float32).contiguous()
    cfg = FORCE_CONFIG if FORCE_CONFIG is not None else CONFIGS[_select_config(M, N, K)]
    meta = dict(cfg.kwargs)
    meta["PDL"] = meta["PDL"] and _dependent_launch(x)
    # TMA for q_x (fresh and contiguous: its rows are 16-byte aligned when K is) and the [N, K] weight.
    meta["TMA"] = meta["TMA"] and K % 16 == 0 and _tma_ready(qweight_t.t())
    meta["EVEN_K"] = K % (meta["BLOCK_K"] * meta["SPLIT_K"]) == 0
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    a = torch.empty((M, K), device=x.device, dtype=torch.int8)
    tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
    ws, counters = _split_k_workspace(y, meta["SPLIT_K"], tiles, torch.int32)
    if meta["TMA"]:
        a_desc = TensorDescriptor.from_tensor(a, [meta["BLOCK_M"], meta["BLOCK_K"]])
        w_desc = TensorDescriptor.from_tensor(qweight_t.t(), [meta["BLOCK_N"], meta["BLOCK_K"]])
    else:
        a_desc = w_desc = None
    qm, qk = (1, 256) if M <= 16 else (4, 512)   # few rows per tile: rows past M still pay for their divisions
    _quantize_rows_kernel[(triton.cdiv(M, qm), triton.cdiv(K, qk), 1)](
        x, input_scale, a, M, K, x.stride(0), x.stride(1), a.stride(0), a.stride(1),
        BLOCK_M=qm, BLOCK_K=qk, PDL=meta["PDL"], num_warps=4)
    _w8a8_gemm_kernel[(tiles, meta["SPLIT_K"], 1)](
        a, qweight_t, a_desc, w_desc, input_scale, weight_scale, y, ws, counters, M, N, K,
        a.stride(0), a.stride(1), qweight_t.stride(0), qweight_t.stride(1), y.stride(0), y.stride(1),
        **meta, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **({"launch_pdl": True} if meta["PDL"] else {}))
    return y
