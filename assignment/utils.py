"""Helpers shared by the layers and the kernel files: input validation and the
quantization constants. Graded submissions always get this exact file."""

from __future__ import annotations

import torch

INT8_QMIN, INT8_QMAX = -128, 127
INT4_QMIN, INT4_QMAX = -8, 7
BSR_BLOCK = 32
# Scales are clamped away from zero so that an all-zero row or channel
# quantizes to zeros instead of 0 / 0 = NaN.
SCALE_EPS = 1e-8
# The dtypes w8a8_mm accepts for its scales.
SCALE_DTYPES = (torch.float32, torch.float16)


def check_tensor(t, name: str, dtype: torch.dtype | tuple[torch.dtype, ...], ndim: int) -> None:
    """Raise ValueError unless ``t`` is a tensor of ``dtype`` (or of one of the
    dtypes of a tuple) with ``ndim`` dims."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    allowed = dtype if isinstance(dtype, tuple) else (dtype,)
    if t.dtype not in allowed:
        expected = " or ".join(str(d) for d in allowed)
        raise ValueError(f"{name}: expected dtype {expected}, got {t.dtype}")
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
    # The scales may come in fp16 (the course's own layers compute them so);
    # the wrapper converts them to fp32 once, and the arithmetic is fp32.
    check_tensor(input_scale, "input_scale", SCALE_DTYPES, 2)
    check_tensor(weight_scale, "weight_scale", SCALE_DTYPES, 2)
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

