"""W4A16: fp16 activations times int4 weights packed 8 per int32.

    y[m, n] = sum_k x[m, k] * q[n, k] * s[k // group_size, n]

``qweight[r, n]`` holds ``q[n, 8r + j]`` in bits 4j..4j+3. The kernel loads a
packed tile [BLOCK_K // 8, 1, BLOCK_N] (every word once), widens it to
[BLOCK_K // 8, 8, BLOCK_N] by extracting nibble j into slot j, and reshapes that
to [BLOCK_K, BLOCK_N]: row 8r + j is exactly k = 8r + j, so the unpacked tile
lines up with a plain [BLOCK_M, BLOCK_K] tile of x.

The unpack is what decides the speed: it runs once per weight per row tile,
in the threads, before the tile can go through shared memory to the tensor
cores. Two things keep it cheap. Nibbles become fp16 by bit arithmetic
(``_nibbles``), not by integer-to-float conversions, which run at a quarter
of the rate of other arithmetic. And the words are loaded as a 3-D tile whose
middle axis has size 1, so that each thread widens the words it loaded, in
place, and stores the result to shared memory as vectors (with a 2-D tile,
Triton spread the widened tile so that every fp16 went to shared memory on
its own). Together: 1.12-1.29x faster at M = 1-384 than plain shifts and
conversions (docs/performance.md).

With one scale per channel the scale is applied once, to the fp32 result, so
the dot may see any fixed multiple of the small integers q: the cheapest is
q * 2**-24 (``_tiny_nibbles``, TINY_Q), whose fp16 bit pattern is the biased
nibble itself, so the unpack needs no OR of an exponent and the scale becomes
s * 2**24. With group-wise scales each unpacked tile holds q exactly and is
scaled in fp16 before its dot. Small M is memory-bound on the weight: split-K
puts more programs to work on streaming it, and the last program of each tile
to finish adds the fp32 partial sums (no second kernel).

From M = 64 on, x and the packed weight come through TMA tensor descriptors
on Hopper: the copy engine fetches each tile with no address arithmetic or
masks in the threads, which leaves them more time for the unpack. Where the
GPU or the tensors' alignment rule TMA out, the same kernel uses pointers.

Large M is compute-bound, and there the unpack in the inner loop costs more
than it saves: every row tile unpacks every weight tile again. From
M = DEQUANT_MIN_M up, a pre-pass writes the scaled fp16 weight [K, N] once
(reading 0.5 and writing 2 bytes per weight) and the same GEMM kernel then
runs as a plain fp16 GEMM over it (66.4 us at 1024 x 4096^2 on the H100,
against 68.8 us for the best fused tile, 128 x 128 with 8 warps, and 89.1 us
for 128 x 256 tiles that share each unpacked weight tile between two
warpgroups).
"""

from __future__ import annotations

import dataclasses
import os

import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs

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


# From this many rows of x, dequantize the weight once and run an fp16 GEMM.
DEQUANT_MIN_M = 768


@triton.jit
def _nibbles(packed):
    """[R, 1, C] int32 words -> [R, 8, C] fp16 in [-8, 7]: [r, j, c] is the signed nibble j of word [r, c]."""
    # No integer-to-float conversion instruction (a quarter-rate one on the GPU):
    # the fp16 with bit pattern 0x6400 | b is exactly 1024 + b for b < 1024, so
    # OR-ing a nibble into that pattern and subtracting a constant gives its
    # value. XOR with 0x88888888 first maps each signed nibble q to q + 8 in
    # [0, 15] (the top bit flips), hence the constant 1024 + 8.
    biased = packed ^ -0x77777778  # 0x88888888 as an int32
    shift = (4 * tl.arange(0, 8))[None, :, None]
    bits = ((biased >> shift) & 0xF) | 0x6400
    return bits.to(tl.int16).to(tl.float16, bitcast=True) - 1032.0


@triton.jit
def _tiny_nibbles(packed):
    """[R, 1, C] int32 words -> [R, 8, C] fp16 q * 2**-24: nibble j of word [r, c] in [r, j, c], scaled by 2**-24."""
    # With one scale per channel the scale is applied to the fp32 result, so
    # the dot may see any fixed multiple of q. q * 2**-24 is the cheapest to
    # make: an fp16 whose exponent field is 0 is the subnormal b * 2**-24, so
    # the biased nibble b = q + 8 is, as a bit pattern, already the fp16
    # (q + 8) * 2**-24, and one exact fp16 subtraction of 8 * 2**-24 gives
    # q * 2**-24. Against _nibbles this drops the OR with 0x6400: for sm_90 the
    # 16x64x128 decode tile's loop has 266 instead of 298 instructions (SASS),
    # and on the H100 the same tiles take 12.82 vs 13.09 us at 1 x 4096^2,
    # 21.97 vs 23.07 us at 1 x 11008 x 4096 (16x128x128) and 16.64 vs 17.06 us at
    # 64 x 4096^2. The tensor cores take fp16 subnormals as they are: products
    # and sums are in fp32, where q * 2**-24 * x is a normal number.
    biased = packed ^ -0x77777778  # 0x88888888 as an int32: q -> q + 8
    shift = (4 * tl.arange(0, 8))[None, :, None]
    bits = (biased >> shift) & 0xF
    return bits.to(tl.int16).to(tl.float16, bitcast=True) - 4.76837158203125e-07  # 8 * 2**-24, exact in fp16


@triton.jit
def _dequantize_kernel(
    qw_ptr, s_ptr, w_ptr, N, K, group_size,
    stride_qr, stride_qn, stride_sg, stride_sn, stride_wk, stride_wn,
    BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, PDL: tl.constexpr,
):
    """w[k, n] = q[n, k] * s[k // group_size, n] as fp16, one [BLOCK_K, BLOCK_N] tile of the [K, N] output.

    Works on [BLOCK_K // 8, 8, BLOCK_N] tensors (k = 8r + j) and stores them as
    they are: each thread writes the nibbles of the words it loaded, so no
    reshape (and no data movement between threads) is needed. group_size is a
    multiple of 8, so the 8 nibbles of a word share one scale: it is loaded
    once per word.
    """
    _release_next_kernel(PDL)  # the GEMM may start now; it waits for w before reading it
    BLOCK_R: tl.constexpr = BLOCK_K // 8
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_j = tl.arange(0, 8)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    r = offs_r[:, None, None]
    n = offs_n[None, None, :]
    packed = tl.load(qw_ptr + r * stride_qr + n * stride_qn, mask=(r < K // 8) & (n < N), other=0)
    s = tl.load(s_ptr + (8 * r // group_size) * stride_sg + n * stride_sn, mask=(r < K // 8) & (n < N), other=0.0)
    k = 8 * r + offs_j[None, :, None]  # [BLOCK_R, 8, 1]
    tl.store(w_ptr + k * stride_wk + n * stride_wn, _nibbles(packed) * s, mask=(k < K) & (n < N))


@triton.jit
def _w4a16_kernel(
    x_ptr, qw_ptr, x_desc, qw_desc, s_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K, group_size,
    stride_xm, stride_xk, stride_qr, stride_qn, stride_sg, stride_sn, stride_ym, stride_yn,
    GROUPED: tl.constexpr, DEQUANTIZED: tl.constexpr, SPLIT_K: tl.constexpr, PDL: tl.constexpr, TMA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    TINY_Q: tl.constexpr = False,
):
    """One [BLOCK_M, BLOCK_N] tile of y. With SPLIT_K > 1 each program writes
    its fp32 partial sum to ws[pid_k, M, N]; the last of the tile's programs to
    finish (tile counter in cnt) adds them up and stores y.

    qw is the packed [K // 8, N] int32 weight, or with DEQUANTIZED the scaled
    fp16 [K, N] weight from _dequantize_kernel; stride_qr is its row stride.
    With TMA, x and the packed weight are read through the tensor descriptors
    x_desc ([BLOCK_M, BLOCK_K] tiles) and qw_desc ([BLOCK_K // 8, BLOCK_N]):
    the copy engine fetches whole tiles, zero-filled past the edges, with no
    address arithmetic or masks in the threads.

    TINY_Q (one scale per channel only): the unpacked tile holds q * 2**-24
    (_tiny_nibbles) and the scale applied at the end is s * 2**24.
    """
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    pid_k = tl.program_id(1)
    k_start, k_end = _split_k_range(pid_k, K, SPLIT_K, BLOCK_K)

    BLOCK_R: tl.constexpr = BLOCK_K // 8  # packed rows per K tile
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    safe_m = offs_m % M
    safe_n = offs_n % N
    x_ptrs = x_ptr + safe_m[:, None] * stride_xm + (k_start + offs_k)[None, :] * stride_xk
    if DEQUANTIZED:
        q_ptrs = qw_ptr + (k_start + offs_k)[:, None] * stride_qr + safe_n[None, :] * stride_qn
    else:
        q_ptrs = qw_ptr + (k_start // 8 + offs_r)[:, None, None] * stride_qr + safe_n[None, None, :] * stride_qn

    _wait_for_previous_kernel(PDL)  # the dequantized weight comes from the previous kernel
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        k_left = k_end - k0
        if TMA:  # split-K slices are whole BLOCK_K tiles, so only the last one is ragged, at K itself
            a = x_desc.load([pid_m * BLOCK_M, k0])
        else:
            # Rows past M are masked (zero-filled without a memory read); safe_m
            # only keeps their addresses in bounds. At M = 1 that is 15 of 16 rows.
            a = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        if DEQUANTIZED:
            w = tl.load(q_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            q_ptrs += BLOCK_K * stride_qr
        else:
            if TMA:
                packed = tl.reshape(qw_desc.load([k0 // 8, pid_n * BLOCK_N]), (BLOCK_R, 1, BLOCK_N))
            else:
                packed = tl.load(q_ptrs, mask=offs_r[:, None, None] < k_left // 8, other=0)
            # [BLOCK_R, 1, BLOCK_N] words: every thread widens its own words in
            # place, ending with the 8 rows of k of each, which it writes to
            # shared memory (on the way to the tensor cores) as whole vectors.
            if GROUPED:  # one scale per word: its 8 nibbles share a group (group_size is a multiple of 8)
                g = (k0 + 8 * offs_r) // group_size
                w = _nibbles(packed) * tl.load(s_ptr + g[:, None, None] * stride_sg + safe_n[None, None, :] * stride_sn,
                                               mask=(8 * offs_r < k_left)[:, None, None], other=0.0)
            elif TINY_Q:
                w = _tiny_nibbles(packed)
            else:
                w = _nibbles(packed)
            w = tl.reshape(w, (BLOCK_K, BLOCK_N))  # row 8r + j is nibble j of packed row r: plain k order
            q_ptrs += BLOCK_R * stride_qr
        acc = tl.dot(a, w, acc)
        x_ptrs += BLOCK_K * stride_xk

    if not (GROUPED or DEQUANTIZED):
        s = tl.load(s_ptr + safe_n * stride_sn).to(tl.float32)
        if TINY_Q:
            s = s * 16777216.0  # the tile held q * 2**-24
        acc = acc * s[None, :]
    acc, store = _split_k_reduce(acc, ws_ptr, cnt_ptr, pid_m, pid_n, pid_k, offs_m, offs_n, M, N, BLOCK_N, SPLIT_K)
    if store:
        y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
        tl.store(y_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# The GEMM's tile choices, as data: each config holds the kernel's constexprs
# plus num_warps and num_stages, and its name is made from them by _config:
# BLOCK_M x BLOCK_N x BLOCK_K, then split-K (sk), warps (w, when not 4),
# stages (s) and the flags: tma (x and the packed weight through tensor
# descriptors where the GPU and the tensors allow it, _tma_ready; pointers
# otherwise), dequant (_dequantize_kernel first, then the GEMM over its fp16
# output), pdl (that GEMM launched with programmatic dependent launch where
# the GPU allows it, _dependent_launch), tiny (per-channel scales: the
# q * 2**-24 unpack, _tiny_nibbles). _select_config picks one per problem;
# `python -m bench.sweep w4a16` times them all on given shapes (MAINTAINING.md,
# "Retuning a kernel"). Times below: H100, sweep of 2026-11-25.
def _config(block_m: int, block_n: int, block_k: int, split_k: int = 1, warps: int = 4, stages: int = 3,
            group_m: int = 8, tma: bool = False, dequant: bool = False, pdl: bool = False,
            tiny: bool = False) -> tuple[str, triton.Config]:
    """(name, config) of one tile choice."""
    name = (f"{block_m}x{block_n}x{block_k}" + ("" if split_k == 1 else f"_sk{split_k}")
            + ("" if warps == 4 else f"_w{warps}") + ("" if group_m <= 8 else f"_g{group_m}") + f"_s{stages}"
            + "_tma" * tma + "_dequant" * dequant + "_pdl" * pdl + "_tiny" * tiny)
    return name, triton.Config(dict(SPLIT_K=split_k, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                                    GROUP_M=group_m, TMA=tma, DEQUANTIZED=dequant, PDL=pdl, TINY_Q=tiny),
                               num_warps=warps, num_stages=stages)


_DECODE = dict(block_m=16, group_m=1)
CONFIGS = dict([
    # M <= 16 (decode): 16-row tiles, split-K over many programs, the q * 2**-24 unpack.
    # 4096^2: 12.82-13.49 us at M = 1-16 (split-K 8: 12.90-13.50, no better); K = 11008:
    # split-K 8, 21.31-22.14 us (split-K 4: 22.82-23.10); N = 11008: 128-wide tiles,
    # 4 stages, 21.97-22.51 us (64-wide: 23.87-24.06).
    _config(**_DECODE, block_n=64, block_k=128, split_k=4, tiny=True),
    _config(**_DECODE, block_n=64, block_k=128, split_k=8, tiny=True),
    _config(**_DECODE, block_n=128, block_k=128, split_k=4, stages=4, tiny=True),
    # M = 17-767: x and the packed words through TMA; at M <= 64 the q * 2**-24 unpack
    # (16.64 vs 17.06 us at 64 x 4096^2).
    _config(64, 64, 128, 4, tma=True, tiny=True),
    _config(64, 64, 128, 2, tma=True),
    _config(128, 64, 64, 2, tma=True),
    _config(128, 64, 64, 2, stages=4, tma=True),
    _config(128, 64, 64, tma=True),
    _config(128, 128, 64, stages=4, tma=True),
    _config(128, 128, 64, 2, tma=True),
    _config(128, 128, 64, tma=True),
    # M >= 768: dequantize once, then an fp16 GEMM.
    _config(128, 256, 64, warps=8, stages=4, dequant=True, pdl=True),
    # Candidates to re-sweep, selected for no shape: the q * 2**-24 unpack from M = 65 on
    # (31.06 vs 31.34 us at 256 x 4096^2); the unpack inside 128 x 128 tiles, 8 warps, for
    # M = 512-1023 (at M = 1024: 68.8 / 196.5 / 172.2 us against 66.4 / 189.2 / 167.7 for
    # dequantize + GEMM at 4096^2 / N = 11008 / K = 11008; 254.6 vs 206.4 us at M = 4096).
    _config(128, 64, 64, 2, tma=True, tiny=True),
    _config(128, 128, 64, warps=8, stages=4, tma=True, tiny=True),
])

# When set, every call runs this config whatever the shape: the tests force each
# code path with it, and bench/sweep.py times each config through it.
FORCE_CONFIG: triton.Config | None = None


def _select_config(M: int, N: int, K: int) -> str:
    """The name of the config for one problem; measured on H100 (docs/performance.md)."""
    if M <= 16 and N > 8192:  # wide weights: 128-wide tiles, enough of them without deep split-K
        return "16x128x128_sk4_s4_tiny"
    if M <= 16:
        return "16x64x128_sk8_s3_tiny" if K > 8192 else "16x64x128_sk4_s3_tiny"
    if M <= 64:
        return "64x64x128_sk2_s3_tma" if N > 8192 else "64x64x128_sk4_s3_tma_tiny"
    # 128-row tiles: split-K 2 where the N tiles alone are too few to fill the GPU,
    # wider N tiles from M = 256 on for wide weights.
    if M < 512 and N > 8192:
        if M <= 128:
            return "128x64x64_sk2_s3_tma"
        return "128x64x64_s3_tma" if M <= 256 else "128x128x64_s4_tma"
    if M < 512:
        return "128x64x64_sk2_s4_tma" if 128 < M <= 256 else "128x64x64_sk2_s3_tma"
    if M < DEQUANT_MIN_M:
        return "128x128x64_s3_tma" if N > 8192 else "128x128x64_sk2_s3_tma"
    # 128x256 tiles from the first dequantized M on: with 128x128 tiles M = 768-1023 ran
    # 1.24-1.48x slower than with these (1.45-1.94 waves of programs; docs/performance.md).
    return "128x256x64_w8_s4_dequant_pdl"


def _dequantize_launch(K: int, N: int, pdl: bool = False, block_k: int = 64, block_n: int = 128,
                       num_warps: int = 4) -> _Launch:
    """The dequantize pass's launch for a [K, N] weight: one program per block_k x block_n tile."""
    return _Launch((triton.cdiv(K, block_k), triton.cdiv(N, block_n), 1),
                   dict(BLOCK_K=block_k, BLOCK_N=block_n, PDL=pdl), dict(num_warps=num_warps))


def _dequantize(qweight, scales, group_size: int, launch: _Launch | None = None, bind: bool = False) -> torch.Tensor:
    """The scaled fp16 weight [K, N] (N contiguous, the layout of x @ w)."""
    K, N = 8 * qweight.shape[0], qweight.shape[1]
    launch = launch or _dequantize_launch(K, N)
    w = torch.empty((K, N), device=qweight.device, dtype=torch.float16)
    args = (qweight, scales, w, N, K, group_size, qweight.stride(0), qweight.stride(1),
            scales.stride(0), scales.stride(1), w.stride(0), w.stride(1))
    launch.launch(args, bind and _aligned(w),
                  lambda: _dequantize_kernel[launch.grid](*args, **launch.meta, **launch.options))
    return w


def _plan(x, qweight, scales, M: int, N: int, K: int, group_size: int, cfg: triton.Config) -> dict:
    """What a call of this problem decides (``_plan_key``): config, TMA, PDL, grids."""
    meta = cfg.kwargs
    pdl = meta["PDL"] and _dependent_launch(x)
    tma = meta["TMA"] and not meta["DEQUANTIZED"] and _tma_ready(x, qweight)
    split_k = meta["SPLIT_K"]
    tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
    return dict(
        M=M, N=N, K=K, group_size=group_size, split_k=split_k, tiles=tiles, bind=_bindable(x, qweight, scales),
        x_block=[meta["BLOCK_M"], meta["BLOCK_K"]] if tma else None,
        qw_block=[meta["BLOCK_K"] // 8, meta["BLOCK_N"]] if tma else None,
        dequantize=_dequantize_launch(K, N, pdl) if meta["DEQUANTIZED"] else None,
        gemm=_Launch((tiles, split_k, 1),
                     dict(GROUPED=scales.shape[0] > 1, **{"TINY_Q": False, **meta, "PDL": pdl, "TMA": tma}),
                     dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages, **({"launch_pdl": True} if pdl else {}))),
    )


def _plan_key(x, qweight, scales) -> tuple:
    return _tensor_key(x), _tensor_key(qweight), _tensor_key(scales), _current_gpu(x)


def _launch(plan: dict, x, qweight, scales) -> torch.Tensor:
    M, N, K, group_size = plan["M"], plan["N"], plan["K"], plan["group_size"]
    bind = plan["bind"]
    dequantize, gemm = plan["dequantize"], plan["gemm"]
    w = _dequantize(qweight, scales, group_size, dequantize, bind) if dequantize else qweight
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    ws, counters = _split_k_workspace(y, plan["split_k"], plan["tiles"], torch.float32)
    bind = bind and _aligned(w, y, ws, counters)
    if plan["x_block"]:
        x_desc = TensorDescriptor.from_tensor(x, plan["x_block"])
        qw_desc = TensorDescriptor.from_tensor(qweight, plan["qw_block"])
    else:
        x_desc = qw_desc = None
    args = (x, w, x_desc, qw_desc, scales, y, ws, counters, M, N, K, group_size,
            x.stride(0), x.stride(1), w.stride(0), w.stride(1),
            scales.stride(0), scales.stride(1), y.stride(0), y.stride(1))
    gemm.launch(args, bind, lambda: _w4a16_kernel[gemm.grid](*args, **gemm.meta, **gemm.options))
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
    plan = key = None
    if FORCE_CONFIG is None and REUSE_PLANS:
        try:  # the problem as the kernels see it; what is not a tensor is for the checks to refuse
            x = x.contiguous()
            key = _plan_key(x, qweight, scales)
            plan = _PLANS.get(key)
        except Exception:  # noqa: BLE001
            key = None
    if plan is None:
        M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
        if M == 0:  # no rows: an empty result, as nn.Linear gives
            return torch.empty((0, N), device=x.device, dtype=torch.float16)
        x = x.contiguous()
        cfg = FORCE_CONFIG if FORCE_CONFIG is not None else CONFIGS[_select_config(M, N, K)]
        plan = _plan(x, qweight, scales, M, N, K, group_size, cfg)
        if key is not None:
            _remember(key, plan)
    return _launch(plan, x, qweight, scales)
