"""Helpers shared by the layers and the kernel files: input validation and the
quantization constants. Graded submissions always get this exact file."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

try:  # programmatic dependent launch (Hopper+) needs a Triton that has both halves of it
    from triton.backends.nvidia.compiler import CUDAOptions
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    _HAS_PDL = "launch_pdl" in CUDAOptions.__dataclass_fields__
except ImportError:  # pragma: no cover - older Triton: dependent_launch() is False
    gdc_launch_dependents = gdc_wait = None
    _HAS_PDL = False
try:  # TMA tensor descriptors, created on the host (Triton >= 3.4)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: tma_ready() is False
    TensorDescriptor = None

INT8_QMIN, INT8_QMAX = -128, 127
INT4_QMIN, INT4_QMAX = -8, 7
BSR_BLOCK = 32
# Scales are clamped away from zero so that an all-zero row or channel
# quantizes to zeros instead of 0 / 0 = NaN.
SCALE_EPS = 1e-8


_COUNTERS: dict = {}


def tile_counters(device: torch.device, n: int) -> torch.Tensor:
    """A zeroed int32 buffer of at least ``n`` split-K tile counters, reused by
    every call on ``device``: the kernel resets each counter it uses, so the
    buffer is zero again when the kernel ends (calls on one stream only)."""
    buf = _COUNTERS.get(device)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
        _COUNTERS[device] = buf
    return buf


def split_k_workspace(y: torch.Tensor, split_k: int, tiles: int, dtype: torch.dtype):
    """(ws, counters) for ``split_k_reduce``: ws [split_k, M, N] of the partial
    sums' dtype (y itself, unused, when split_k == 1) and the tile counters."""
    ws = torch.empty((split_k, *y.shape), device=y.device, dtype=dtype) if split_k > 1 else y
    return ws, tile_counters(y.device, tiles)


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _hopper_or_newer(t: torch.Tensor) -> bool:
    return t.is_cuda and torch.cuda.get_device_capability(t.device)[0] >= 9


def dependent_launch(t: torch.Tensor) -> bool:
    """Whether the second of two kernels on ``t``'s device may be launched with
    ``launch_pdl=True`` (programmatic dependent launch: Hopper or newer, not in
    the interpreter). It then starts while the first is still running, which
    hides a launch, and must call ``wait_for_previous_kernel`` before it reads
    anything the first one wrote."""
    return _HAS_PDL and not interpreting() and _hopper_or_newer(t)


def tma_ready(*tensors: torch.Tensor) -> bool:
    """Whether tiles of these 2-D tensors can be loaded through TMA tensor
    descriptors (``TensorDescriptor.from_tensor``): Hopper or newer, or the
    interpreter; contiguous rows; base address and row stride 16-byte aligned.
    A descriptor load reads zeros outside the tensor, so it needs no mask."""
    if TensorDescriptor is None or not (interpreting() or _hopper_or_newer(tensors[0])):
        return False
    return all(t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0
               for t in tensors)


@triton.jit
def release_next_kernel(PDL: tl.constexpr):
    """Let a kernel launched after this one with ``launch_pdl=True`` start now."""
    if PDL:
        gdc_launch_dependents()


@triton.jit
def wait_for_previous_kernel(PDL: tl.constexpr):
    """With PDL, wait until the previous kernel has finished and its writes are visible."""
    if PDL:
        gdc_wait()


def check_tensor(t, name: str, dtype: torch.dtype, ndim: int) -> None:
    """Raise ValueError unless ``t`` is a tensor of ``dtype`` with ``ndim`` dims."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise ValueError(f"{name}: expected dtype {dtype}, got {t.dtype}")
    if t.dim() != ndim:
        raise ValueError(
            f"{name}: expected a {ndim}-D tensor, got shape {tuple(t.shape)}"
        )


def check_shape(t: torch.Tensor, name: str, expected: tuple) -> None:
    """Raise ValueError unless ``t.shape == expected``."""
    if tuple(t.shape) != tuple(expected):
        raise ValueError(
            f"{name}: expected shape {tuple(expected)}, got {tuple(t.shape)}"
        )


def check_same_device(**tensors: torch.Tensor) -> None:
    """Raise ValueError unless all tensors live on one device."""
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"all inputs must be on one device; got {listing}")


def check_w8a8_inputs(x, qweight_t, input_scale, weight_scale) -> tuple[int, int, int]:
    """Validate the ``w8a8_mm`` contract; return (M, N, K)."""
    check_tensor(x, "x", torch.float16, 2)
    check_tensor(qweight_t, "qweight_t", torch.int8, 2)
    check_tensor(input_scale, "input_scale", torch.float32, 2)
    check_tensor(weight_scale, "weight_scale", torch.float32, 2)
    M, K = x.shape
    if qweight_t.shape[0] != K:
        raise ValueError(
            f"qweight_t: expected [K, N] with K = {K} (x is [{M}, {K}]), "
            f"got shape {tuple(qweight_t.shape)}"
        )
    N = qweight_t.shape[1]
    check_shape(input_scale, "input_scale", (M, 1))
    check_shape(weight_scale, "weight_scale", (N, 1))
    check_same_device(x=x, qweight_t=qweight_t, input_scale=input_scale,
                      weight_scale=weight_scale)
    if N == 0 or K == 0:   # M = 0 is fine: the result is an empty [0, N] (as nn.Linear)
        raise ValueError(f"empty weight: N={N}, K={K}; both must be >= 1")
    return M, N, K


def check_w4a16_inputs(x, qweight, scales) -> tuple[int, int, int, int]:
    """Validate the ``w4a16_mm`` contract; return (M, N, K, group_size)."""
    check_tensor(x, "x", torch.float16, 2)
    check_tensor(qweight, "qweight", torch.int32, 2)
    check_tensor(scales, "scales", torch.float16, 2)
    M, K = x.shape
    if K % 8 != 0:
        raise ValueError(f"x: K = {K} must be a multiple of 8 (8 int4 values per int32)")
    if qweight.shape[0] != K // 8:
        raise ValueError(
            f"qweight: expected [K // 8, N] = [{K // 8}, N] for K = {K}, "
            f"got shape {tuple(qweight.shape)}"
        )
    N = qweight.shape[1]
    G = scales.shape[0]
    if scales.shape[1] != N or G < 1 or K % G != 0:
        raise ValueError(
            f"scales: expected [G, N] = [G, {N}] with G dividing K = {K}, "
            f"got shape {tuple(scales.shape)}"
        )
    group_size = K // G
    if G > 1 and group_size % 8 != 0:
        raise ValueError(f"scales: group_size = K // G = {group_size} must be a multiple of 8")
    check_same_device(x=x, qweight=qweight, scales=scales)
    if N == 0:             # M = 0 is fine: the result is an empty [0, N] (as nn.Linear)
        raise ValueError(f"empty weight: N={N}; expected N >= 1")
    return M, N, K, group_size


def check_dds_inputs(x, weight_bsr) -> tuple[int, int, int]:
    """Validate the ``dds_mm`` contract; return (M, N, K)."""
    check_tensor(x, "x", torch.float16, 2)
    if not isinstance(weight_bsr, torch.Tensor) or weight_bsr.layout != torch.sparse_bsr:
        layout = getattr(weight_bsr, "layout", type(weight_bsr).__name__)
        raise ValueError(f"weight_bsr: expected a torch.sparse_bsr tensor, got {layout}")
    if weight_bsr.dtype != torch.float16:
        raise ValueError(f"weight_bsr: expected dtype torch.float16, got {weight_bsr.dtype}")
    values = weight_bsr.values()
    blocksize = tuple(values.shape[-2:])
    if values.dim() != 3 or blocksize != (BSR_BLOCK, BSR_BLOCK):
        raise ValueError(
            f"weight_bsr: expected blocksize ({BSR_BLOCK}, {BSR_BLOCK}) and 2-D shape, "
            f"got values of shape {tuple(values.shape)}"
        )
    M, K = x.shape
    N, Kw = weight_bsr.shape
    if Kw != K:
        raise ValueError(f"weight_bsr: expected shape [N, K] with K = {K}, got {tuple(weight_bsr.shape)}")
    check_same_device(x=x, weight_bsr=values)
    return M, N, K


@triton.jit
def grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
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
def split_k_range(pid_k, K, SPLIT_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """[k_start, k_end) of split ``pid_k`` out of SPLIT_K: whole BLOCK_K tiles, the last one ragged."""
    k_per_split = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_start = pid_k * k_per_split
    return k_start, min(K, k_start + k_per_split)


@triton.jit
def split_k_reduce(acc, ws_ptr, cnt_ptr, pid_m, pid_n, pid_k, offs_m, offs_n, M, N,
                   BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr):
    """Add up the SPLIT_K partial sums of the tile (pid_m, pid_n) without a second kernel.

    Returns (acc, store): whether this program holds the tile's final sum and
    must store it. With SPLIT_K == 1 that is (acc, True). Otherwise each
    program stores its partial ``acc`` (rows offs_m, columns offs_n) in
    ws[pid_k, M, N] (see ``split_k_workspace``) and bumps the tile's counter;
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
