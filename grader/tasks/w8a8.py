"""Task 1, W8A8: dynamic per-token int8 activations times an int8 weight, fp16 out.

    y[m, n] = (sum_k round(x[m, k] / s_x[m]) * W_q[n, k]) * s_x[m] * s_w[n]

with ``round`` half to even and the quotient clamped to [-128, 127] (the
handout's "2. Quantization in one page" and "Task 1: W8A8"). The kernel gets
the weight as the transposed view ``[K, N]`` of the layer's ``[N, K]`` int8
weight.
"""

from __future__ import annotations

import torch

from .base import Option, Task
from .common import QUANT_BENCH_CASES, ZERO_ROWS, activations, matches, refresh_x, row_scale


def _scale(t: torch.Tensor, dtype: str) -> torch.Tensor:
    """The per-row scale of ``t`` in ``dtype``, never 0 there (1e-8 underflows in fp16)."""
    s = row_scale(t, 127).to(getattr(torch, dtype))
    return s.clamp_min(torch.finfo(s.dtype).tiny)


def build_inputs(M, N, K, g, zero_rows, ties, scale_dtype):
    w = torch.randn(N, K, generator=g).to(torch.float16)
    weight_scale = _scale(w, scale_dtype)
    # Quantized with the scale the kernel gets, as a layer that keeps fp16 scales does.
    qweight = torch.clamp(torch.round(w.float() / weight_scale.float()), -128, 127).to(torch.int8)
    if ties:
        # x / scale = k + 0.5 exactly: round-half-to-even and clamping are visible.
        input_scale = torch.full((M, 1), 0.25, dtype=getattr(torch, scale_dtype))
        x = ((torch.randint(-140, 140, (M, K), generator=g) + 0.5) * 0.25).to(torch.float16)
    else:
        x = activations(M, K, zero_rows, g)
        input_scale = _scale(x, scale_dtype)
    # The kernel gets the transposed view of the [N, K] weight, strides (1, K).
    return (x, qweight.t(), input_scale, weight_scale), {"weight": w}


def refresh_activations(args: dict, g: torch.Generator) -> None:
    refresh_x(args, g)
    s = args[2]   # the per-token scale follows its new row, in its own dtype
    s.copy_(_scale(args[0], str(s.dtype).removeprefix("torch.")))


def reference(x, qweight_t, input_scale, weight_scale) -> torch.Tensor:
    """fp16 [M, N], bit-exact: int32-exact accumulation, then acc * s_x * s_w in fp32.

    fp16 scales are converted to fp32 first, as the kernel's wrapper does."""
    input_scale, weight_scale = input_scale.float(), weight_scale.float()
    xq = torch.clamp(torch.round(x.float() / input_scale), -128, 127)
    acc = xq.double() @ qweight_t.double()  # exact: |acc| < 2**53
    return (acc.float() * input_scale * weight_scale.t()).to(torch.float16)


def rounding_slack(x, qweight_t, input_scale, weight_scale, ulps: int = 4) -> torch.Tensor:
    """float64 [M, N]: how far a faithful W8A8 kernel may be from the reference.

    A kernel may compute x / s with Triton's fast approximate division (about
    2 ulp on a GPU) or as x * (1 / s). Where x / s lies within ``ulps`` ulp of
    a rounding boundary (k + 0.5), either integer is a faithful quantization,
    and the product moves by s_x * s_w * |w_q| for that element. That includes
    exact ties, unless the row's scale is a power of two: then every faithful
    division is exact and a tie must round half to even (the ``ties`` case is
    built that way).
    """
    t = x.float() / input_scale.float()
    boundary = torch.floor(t) + 0.5
    ulp = torch.finfo(torch.float32).eps * t.abs().clamp_min(1.0)
    exact_scale = torch.frexp(input_scale.float()).mantissa == 0.5  # [M, 1]: s = 2^e
    ambiguous = ((t - boundary).abs() <= ulps * ulp) & ~((t == boundary) & exact_scale)
    wq = qweight_t.double().abs()  # [K, N]
    return (ambiguous.double() @ wq) * input_scale.double() * weight_scale.double().t()


def floor_parts(shape, options) -> dict[str, int]:
    M, N, K = shape
    scale = 2 if options["scale_dtype"] == "float16" else 4
    return {"x": 2 * M * K, "qweight_t": N * K, "input_scale": scale * M, "weight_scale": scale * N,
            "output": 2 * M * N}


def dot_flops(shape, options) -> int:
    M, N, K = shape
    return 2 * M * N * K


# ---------------------------------------------------------------- likely causes

def _rounding(f):
    """Errors that only the elements of x at exact ties, or outside the int8 range, can explain."""
    x, qweight_t, input_scale, weight_scale = f.args
    t = x.float() / input_scale.float()
    wq = qweight_t.double().abs()
    scale = input_scale.double() * weight_scale.double().t()
    failing = f.bad & f.finite
    if not bool(failing.any()) or bool((f.bad & ~failing).any()):
        return None
    err = (f.y - f.ref).abs()[failing]
    ties = t == torch.floor(t) + 0.5
    if bool(ties.any()):
        step = (ties.double() @ wq) * scale  # one quantization step per tie
        if bool((err <= (f.bound + 1.01 * step)[failing]).all()):
            return "ties", {}
    outside = (t <= -128.5) | (t >= 127.5)  # round(t) leaves [-128, 127]
    if bool(outside.any()):
        wrapped = (outside.double() @ wq) * scale * 256  # a wrapped int8 is off by up to 256 steps
        if bool((err <= (f.bound + 1.01 * wrapped)[failing]).all()):
            return "clamp", {}
    return None


def _missing_scale(f):
    """The product without one of the two scales (any M, where the generic pattern fit needs rows)."""
    _, _, input_scale, weight_scale = f.args
    if matches(f.y, f.ref / weight_scale.double().t(), TASK.tolerance):
        return "scale", {"how": "the weight scale is not applied"}
    if matches(f.y, f.ref / input_scale.double(), TASK.tolerance):
        return "scale", {"how": "the per-token scale is not applied"}
    return None


# ---------------------------------------------------------------- the benchmark

def _int_mm_padded(xq, wq_t):
    M = xq.shape[0]
    if M <= 16:  # torch._int_mm wants M > 16
        xq = torch.nn.functional.pad(xq, (0, 0, 0, 32 - M))
    return torch._int_mm(xq, wq_t)


def _int_mm(args, extras):
    """torch._int_mm on activations quantized beforehand: the int8 product alone."""
    x, wt, sx, _ = args
    xq = torch.clamp(torch.round(x.float() / sx), -128, 127).to(torch.int8)
    return lambda: _int_mm_padded(xq, wt)


def _eager_int8(args, extras):
    """The whole layer in PyTorch: quantize, torch._int_mm, scale."""
    x, wt, sx, sw = args
    M = x.shape[0]

    def run():
        q = torch.clamp(torch.round(x.float() / sx), -128, 127).to(torch.int8)
        return (_int_mm_padded(q, wt)[:M].float() * sx * sw.t()).half()
    return run


TASK = Task(
    name="w8a8", file="w8a8.py", entry="w8a8_mm", title="W8A8 (QuantizedLinear_w8a8 -> w8a8_mm)",
    handout_section="4. Task 1: W8A8",
    arg_names=("x", "qweight_t", "input_scale", "weight_scale"), activation_args=(0, 2),
    options={"zero_rows": ZERO_ROWS,
             "ties": Option("bool", default=False, help="x / scale lands exactly on k + 0.5"),
             "scale_dtype": Option("choice", None, ("float32", "float16"), "float32",
                                   "dtype of both scales (the course's own layers compute them in fp16)")},
    build_inputs=build_inputs, refresh_activations=refresh_activations,
    # W8A8 accumulates exactly, so only the fp16 rounding of the result can
    # differ: one fp16 ulp is <= 2**-10 relative.
    reference=reference, slack=rounding_slack, tolerance=1e-3,
    sanity=0.05,   # int8 rounds to 1/255 of each row's range
    floor_parts=floor_parts, dot_flops=dot_flops,
    causes={
        "ties": ("rounding mode: the errors come only from elements where x / s is exactly k + 0.5; round "
                 "half to even (torch.round), not half away from zero, nor half up (floor(v + 0.5))",
                 "2. Quantization in one page"),
        "clamp": ("no clamp: the errors come only from elements where x / s lies outside [-128, 127]; clamp "
                  "before the conversion to int8, which wraps around", None),
    },
    signatures={"specific": (_rounding, _missing_scale)},
    column_scale_hint="weight scale", scale_section="2. Quantization in one page",
    bench_cases=QUANT_BENCH_CASES, mma_dtype="int8", anchors={"int_mm": _int_mm, "eager_int8": _eager_int8},
)
