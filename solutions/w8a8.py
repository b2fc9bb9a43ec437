"""W8A8: fp16 activations quantized per token inside the kernel, int8 weights
quantized per output channel, int8 x int8 -> int32 on the tensor cores.

    y[m, n] = s_x[m] * s_w[n] * sum_k q_x[m, k] * q_w[n, k]
    q_x[m, k] = clamp(round_half_even(x[m, k] / s_x[m]), -128, 127)

One cheap pass quantizes x to int8 first: quantizing inside the GEMM would
redo the same division for every N tile. Both dot operands are then int8 and
K-major (the weight stays [N, K]; its transpose is read as a view), the layout
the int8 tensor-core instructions want.

Small M (decode) is a GEMV in disguise: the weight is the only large operand,
and what limits the kernel is how fast each program streams its rows of it.
Long K tiles (512 bytes of each weight row per load) beat more, shorter ones:
at 4096 x 4096 one program per 64 output channels and no split-K measured
faster than split-K 4 with 256-wide tiles (docs/performance.md). The GEMM is
launched with programmatic dependent launch so that it is already resident
when the quantize pass ends. Up to M = 64 the weight is still most of the
traffic: where N <= 8192 the same 512-byte runs serve, 32 output channels per
program. From M = 65 to 512, split-K
(where K is long or the tiles few) gives each program a slice of K and an
int32 partial sum; the last program of each tile to finish (an atomic tile
counter) adds the partials up and dequantizes, so no separate reduction kernel
is launched. Large M uses grouped tile order so that neighbouring programs
share weight tiles in L2, and TMA loads of both operands.
"""

from __future__ import annotations

import dataclasses
import os

import torch
import triton
import triton.language as tl

from .utils import check_w8a8_inputs

# Helpers shared by w8a8.py and w4a16.py, copied: the grader stages one file per task, so each is self-contained.

try:  # programmatic dependent launch (Hopper+) needs a Triton that has both halves of it
    from triton.backends.nvidia.compiler import CUDAOptions
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    _HAS_PDL = "launch_pdl" in {f.name for f in dataclasses.fields(CUDAOptions)}
except ImportError:  # pragma: no cover - older Triton: _dependent_launch() is False
    _HAS_PDL = False

_COUNTERS: dict = {}


def _tile_counters(device: torch.device, n: int) -> torch.Tensor:
    """A zeroed int32 buffer of at least ``n`` split-K tile counters, reused by
    every call on ``device``: the kernel resets each counter it uses, so the
    buffer is zero again when the kernel ends (calls on one stream only)."""
    buf = _COUNTERS.get(device)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
        _COUNTERS[device] = buf
    return buf


def _split_k_workspace(y: torch.Tensor, split_k: int, tiles: int, dtype: torch.dtype):
    """(ws, counters) for ``_split_k_reduce``: ws [split_k, M, N] of the partial
    sums' dtype (y itself, unused, when split_k == 1) and the tile counters."""
    ws = torch.empty((split_k, *y.shape), device=y.device, dtype=dtype) if split_k > 1 else y
    return ws, _tile_counters(y.device, tiles)


def _interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _hopper_or_newer(t: torch.Tensor) -> bool:
    return t.is_cuda and torch.cuda.get_device_capability(t.device)[0] >= 9


def _dependent_launch(t: torch.Tensor) -> bool:
    """Whether the second of two kernels on ``t``'s device may be launched with
    ``launch_pdl=True`` (programmatic dependent launch: Hopper or newer, not in
    the interpreter). It then starts while the first is still running, which
    hides a launch, and must call ``_wait_for_previous_kernel`` before it reads
    anything the first one wrote."""
    return _HAS_PDL and not _interpreting() and _hopper_or_newer(t)


# Launch plans. What a call decides from its problem (the inputs' shapes,
# strides, dtypes, devices and address alignment, and the current GPU) is
# worked out once per problem and kept: the input checks (they read nothing
# else), the config, the grids and launch options, and the kernel Triton
# compiled for each launch. Only decisions are kept, never data: every call
# reads the tensors it is given.
_PLANS: dict = {}
_MAX_PLANS = 4096  # problems remembered; past that the table starts afresh

# When False, every call checks its inputs, picks its config and launches
# through kernel[grid](...), as in the interpreter: bench/eager.py times both.
REUSE_PLANS = True


@dataclasses.dataclass
class _Launch:
    """One kernel launch of a plan: grid (three dimensions), constexprs, launch
    options (num_warps, ...), and once bound the kernel Triton compiled for it."""
    grid: tuple
    meta: dict
    options: dict
    compiled: object = None

    def launch(self, args: tuple, bind: bool, plain) -> None:
        """Launch the kernel on ``args``, its arguments before the constexprs.

        ``plain()`` is the ``kernel[grid](...)`` launch. Triton then binds and
        specializes every argument and hashes the result to find the compiled
        kernel, on the host, at every launch (``python -m bench.eager`` shows
        what that costs): the plan's first launch does it once, and with
        ``bind`` (a GPU, every pointer 16-byte aligned, as when it compiled)
        later calls launch the kernel it returned directly. That launcher takes
        every parameter in order and skips the constexprs (compiled in), whose
        places the meta values fill: each kernel here declares its constexprs
        last.
        """
        if bind and self.compiled is not None:
            self.compiled[self.grid](*args, *self.meta.values())
            return
        compiled = plain()
        if bind:
            self.compiled = compiled


def _tensor_key(t: torch.Tensor) -> tuple:
    """What a launch depends on of one tensor (Triton specializes a pointer on its dtype and
    on whether its address is a multiple of 16)."""
    return t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16


def _current_gpu(t: torch.Tensor):
    """The GPU Triton launches on (the current one, whatever t's device), or None off the GPU."""
    return torch.cuda.current_device() if t.is_cuda else None


def _remember(key: tuple, plan: dict) -> None:
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = plan


def _aligned(*tensors: torch.Tensor) -> bool:
    return all(t.data_ptr() % 16 == 0 for t in tensors)


def _bindable(*tensors: torch.Tensor) -> bool:
    """Whether a plan for these inputs may launch its compiled kernels directly:
    on a GPU, not in the interpreter, every input 16-byte aligned (the outputs are
    checked per call)."""
    return tensors[0].is_cuda and not _interpreting() and _aligned(*tensors)


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


try:  # TMA tensor descriptors, created on the host (Triton >= 3.4)
    from triton.tools.tensor_descriptor import TensorDescriptor
    _HAS_TMA = True
except ImportError:  # pragma: no cover - older Triton: _tma_ready() is False
    _HAS_TMA = False


def _tma_ready(*tensors: torch.Tensor) -> bool:
    """Whether tiles of these 2-D tensors can be loaded through TMA tensor
    descriptors (``TensorDescriptor.from_tensor``): Hopper or newer, or the
    interpreter; contiguous rows; base address and row stride 16-byte aligned.
    A descriptor load reads zeros outside the tensor, so it needs no mask."""
    if not _HAS_TMA or not (_interpreting() or _hopper_or_newer(tensors[0])):
        return False
    return all(t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0
               for t in tensors)


@triton.jit
def _grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of program ``pid`` in grouped order: GROUP_M consecutive
    row tiles run next to each other and share every column tile in L2
    (Triton tutorial 03, "L2 cache optimizations")."""
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
    """Add up the SPLIT_K partial sums of the tile (pid_m, pid_n) without a second kernel.

    Returns (acc, store): whether this program holds the tile's final sum and
    must store it. With SPLIT_K == 1 that is (acc, True). Otherwise each
    program stores its partial ``acc`` (rows offs_m, columns offs_n) in
    ws[pid_k, M, N] (see ``_split_k_workspace``) and bumps the tile's counter;
    the last one to arrive reads all partials (in a fixed order, so the result
    does not depend on who was last), resets the counter and gets (sum, True);
    the others get (acc, False).
    """
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
    """y[BLOCK_M, BLOCK_N] tile of dequant(A_q @ W_q). With SPLIT_K > 1 each
    program writes its int32 partial sum to ws[pid_k, M, N]; the last of the
    tile's programs to finish (tile counter in cnt) adds them up and stores y.

    A is q_x ([M, K] int8); W is the [K, N] K-major view of the int8 weight.
    With TMA, A and the [N, K] weight itself are read through the tensor
    descriptors a_desc ([BLOCK_M, BLOCK_K] tiles) and w_desc ([BLOCK_N,
    BLOCK_K]): the copy engine fetches whole tiles, zero-filled past the edges,
    so the threads compute no addresses and no masks.
    """
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    pid_k = tl.program_id(1)  # each of the SPLIT_K programs of a tile sums its own slice of K
    k_start, k_end = _split_k_range(pid_k, K, SPLIT_K, BLOCK_K)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = k_start + tl.arange(0, BLOCK_K)
    # Out-of-range rows/columns read a valid row/column instead of being
    # masked; their results are dropped by the masked store.
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


# The GEMM's tile choices, as data: each config holds the kernel's constexprs
# plus num_warps and num_stages, and its name is made from them by _config:
# BLOCK_M x BLOCK_N x BLOCK_K, then split-K (sk), warps (w, when not 4),
# stages (s) and the flags: pdl (launched with programmatic dependent launch
# where the GPU allows it, see _dependent_launch), tma (q_x and the weight
# through tensor descriptors where the GPU and the tensors allow it,
# _tma_ready; pointers otherwise). _select_config picks one per problem;
# `python -m bench.sweep w8a8` times them all on given shapes (MAINTAINING.md,
# "Retuning a kernel"). Times below: H100, sweep of 2026-11-25.
def _config(block_m: int, block_n: int, block_k: int, split_k: int = 1, warps: int = 4, stages: int = 3,
            group_m: int = 8, pdl: bool = False, tma: bool = False) -> tuple[str, triton.Config]:
    """(name, config) of one tile choice."""
    name = (f"{block_m}x{block_n}x{block_k}" + ("" if split_k == 1 else f"_sk{split_k}")
            + ("" if warps == 4 else f"_w{warps}") + ("" if group_m <= 8 else f"_g{group_m}") + f"_s{stages}"
            + "_pdl" * pdl + "_tma" * tma)
    return name, triton.Config(dict(SPLIT_K=split_k, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                                    GROUP_M=group_m, PDL=pdl, TMA=tma), num_warps=warps, num_stages=stages)


CONFIGS = dict([
    # M <= 16 (decode): the weight streamed once, 512-byte runs of each weight row per load, one
    # program per 64 output channels, no split-K; 5 stages: 15.28-15.52 us at 4096^2, 29.74 at
    # N = 11008, 28.59 at K = 11008 (4 stages: 15.97-16.03, 30.90, 29.50).
    _config(16, 64, 512, stages=5, group_m=1, pdl=True),
    # M = 17-512
    _config(64, 128, 128, 2, stages=4),
    _config(128, 64, 128, 2, stages=4),
    _config(128, 64, 128),
    _config(64, 64, 128, stages=4),
    _config(64, 128, 128, stages=4),
    #   M = 17-64 with N <= 8192, as at decode: 512-byte runs, 32 output channels per program
    #   (18.08 us at 64 x 4096^2 and 33.74 at K = 11008, against 22.72 and 44.11 for
    #   64x128x128 with split-K 2); for N > 8192, 64x64x128 (32.18 vs 37.95 us).
    _config(64, 32, 512, stages=4, group_m=1),
    # M > 512: int8 wgmma tiles through TMA (128x128x128: 138.7 / 328.9 / 347.3 us at 4096 x 4096^2
    # / N = 11008 / K = 11008, 2-4 % faster than the same tiles by pointers). Triton makes a dot
    # asynchronous (the next tile's loads and wgmma overlap this one) only with an fp32
    # accumulator: an int8 dot waits for its wgmma every iteration (sm_90 SASS: WARPGROUP.DEPBAR
    # 0 after each K tile); with 96 KB of shared memory these tiles run two CTAs per SM, one
    # computing while the other waits.
    _config(128, 128, 128, tma=True),
    # Candidates to re-sweep, selected for no shape: decode through TMA (15.38 vs 15.52 us at
    # 1 x 4096^2, up to 3 % slower elsewhere); M = 64 with split-K 2 through TMA (within 2 % at
    # 4096^2 and K = 11008, 16 % slower at N = 11008); 128 x 256 tiles, two warpgroups, for
    # long K (337.2 vs 347.3 us at 4096 x 4096 x 11008, 3-7 % slower at the other shapes).
    _config(16, 64, 512, stages=4, group_m=1, pdl=True, tma=True),
    _config(64, 32, 256, 2, stages=4, group_m=1, tma=True),
    _config(128, 256, 128, warps=8, stages=4, tma=True),
])

# When set, every call runs this config whatever the shape: the tests force each
# code path with it, and bench/sweep.py times each config through it.
FORCE_CONFIG: triton.Config | None = None


def _select_config(M: int, N: int, K: int) -> str:
    """The name of the config for one problem; measured on H200 and H100 (docs/performance.md)."""
    if M <= 16:  # long runs of each weight row per load beat more programs
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


def _plan(x, qweight_t, input_scale, weight_scale, M: int, N: int, K: int, cfg: triton.Config) -> dict:
    """What a call of this problem decides (``_plan_key``): config, grids, PDL."""
    meta = cfg.kwargs
    split_k = meta["SPLIT_K"]
    pdl = meta["PDL"] and _dependent_launch(x)
    # Few rows per tile: rows past M would still pay for their divisions.
    qm, qk = (1, 256) if M <= 16 else (4, 512)
    tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
    w_rows = qweight_t.t()  # the [N, K] weight itself (a view)
    # TMA for the quantized x (a fresh contiguous [M, K] int8 tensor each call: its
    # rows are 16-byte aligned when K is) and the weight rows.
    tma = meta["TMA"] and K % 16 == 0 and _tma_ready(w_rows)
    return dict(
        M=M, N=N, K=K, split_k=split_k, tiles=tiles, bind=_bindable(x, qweight_t, input_scale, weight_scale),
        a_block=[meta["BLOCK_M"], meta["BLOCK_K"]] if tma else None,
        w_block=[meta["BLOCK_N"], meta["BLOCK_K"]] if tma else None,
        quantize=_Launch((triton.cdiv(M, qm), triton.cdiv(K, qk), 1), dict(BLOCK_M=qm, BLOCK_K=qk, PDL=pdl),
                         dict(num_warps=4)),
        gemm=_Launch((tiles, split_k, 1),
                     dict(EVEN_K=(K % (meta["BLOCK_K"] * split_k) == 0), **{**meta, "PDL": pdl, "TMA": tma}),
                     dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages, **({"launch_pdl": True} if pdl else {}))),
    )


def _as_fp32(scale: torch.Tensor) -> torch.Tensor:
    """A scale as the kernels read it: float32, contiguous (the same tensor when it already is)."""
    return scale.to(torch.float32).contiguous()


def _plan_key(x, qweight_t, input_scale, weight_scale) -> tuple:
    return (_tensor_key(x), _tensor_key(qweight_t), _tensor_key(input_scale), _tensor_key(weight_scale),
            _current_gpu(x))


def _launch(plan: dict, x, qweight_t, input_scale, weight_scale) -> torch.Tensor:
    M, N, K = plan["M"], plan["N"], plan["K"]
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    a = torch.empty((M, K), device=x.device, dtype=torch.int8)
    ws, counters = _split_k_workspace(y, plan["split_k"], plan["tiles"], torch.int32)
    bind = plan["bind"] and _aligned(y, a, ws, counters)
    quantize, gemm = plan["quantize"], plan["gemm"]
    quantize_args = (x, input_scale, a, M, K, x.stride(0), x.stride(1), a.stride(0), a.stride(1))
    quantize.launch(quantize_args, bind,
                    lambda: _quantize_rows_kernel[quantize.grid](*quantize_args, **quantize.meta, **quantize.options))
    if plan["a_block"]:
        a_desc = TensorDescriptor.from_tensor(a, plan["a_block"])
        w_desc = TensorDescriptor.from_tensor(qweight_t.t(), plan["w_block"])
    else:
        a_desc = w_desc = None
    gemm_args = (a, qweight_t, a_desc, w_desc, input_scale, weight_scale, y, ws, counters, M, N, K,
                 a.stride(0), a.stride(1), qweight_t.stride(0), qweight_t.stride(1), y.stride(0), y.stride(1))
    gemm.launch(gemm_args, bind, lambda: _w8a8_gemm_kernel[gemm.grid](*gemm_args, **gemm.meta, **gemm.options))
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
    plan = key = None
    if FORCE_CONFIG is None and REUSE_PLANS:
        try:  # the problem as given, dtypes included; what is not a tensor is for the checks to refuse
            key = _plan_key(x, qweight_t, input_scale, weight_scale)
            plan = _PLANS.get(key)
        except Exception:  # noqa: BLE001
            key = None
    if plan is None:
        M, N, K = check_w8a8_inputs(x, qweight_t, input_scale, weight_scale)
        if M == 0:  # no rows: an empty result, as nn.Linear gives
            return torch.empty((0, N), device=x.device, dtype=torch.float16)
    # The kernels read float32 scales: fp16 ones (the course's layers) are converted once, here.
    x, input_scale, weight_scale = x.contiguous(), _as_fp32(input_scale), _as_fp32(weight_scale)
    if plan is None:
        cfg = FORCE_CONFIG if FORCE_CONFIG is not None else CONFIGS[_select_config(M, N, K)]
        plan = _plan(x, qweight_t, input_scale, weight_scale, M, N, K, cfg)
        if key is not None:
            _remember(key, plan)
    return _launch(plan, x, qweight_t, input_scale, weight_scale)
