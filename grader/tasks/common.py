"""Helpers the task modules share: realistic activations and per-row scales."""

from __future__ import annotations

import torch

from .base import Option

# Every task's inputs can have rows of x set to zero (a padded batch, say).
ZERO_ROWS = Option("int", 0, None, 0, "rows of x set to 0")


# The larger entries of each activation row: 8 sigma, at most SPIKE_MAX. The spike sets the
# row's int8 scale, and exact int8 quantization of a single row then differs from the fp16
# layer by about 0.23 % of the spike (K = 4096): 3.8 % at SPIKE_MAX, within W8A8's sanity
# bound (5 %). Unbounded, a spike of 27 (1 row in 70) took the exact reference itself past
# the bound at M = 1, and a correct kernel failed w8a8/decode_m1.
SPIKE_SIGMA = 8.0
SPIKE_MAX = 16.0


def activations(M: int, K: int, zero_rows: int, g: torch.Generator) -> torch.Tensor:
    """fp16 [M, K] activations: Gaussian, with two larger entries per row (at
    most SPIKE_MAX), and ``zero_rows`` rows of zeros."""
    x = torch.randn(M, K, generator=g)
    # A few larger entries per row, as real activations have: they set the
    # per-token scale, so the rest of the row uses fewer int8 levels.
    spikes = torch.randint(0, K, (M, 2), generator=g)
    x.scatter_(1, spikes, (SPIKE_SIGMA * torch.randn(M, 2, generator=g)).clamp(-SPIKE_MAX, SPIKE_MAX))
    if zero_rows:
        x[torch.randperm(M, generator=g)[:zero_rows]] = 0.0
    return x.to(torch.float16)


def refresh_x(args: dict, g: torch.Generator) -> None:
    """New Gaussian values for argument 0, the activations x, in place."""
    x = args[0]
    x.copy_(torch.randn(x.shape, generator=g, device=x.device, dtype=torch.float32))


def row_scale(t: torch.Tensor, qmax: int) -> torch.Tensor:
    """fp32 [rows, 1]: max |t| of each row / qmax, never 0 (an all-zero row quantizes to 0)."""
    return (t.abs().amax(dim=1, keepdim=True).float() / qmax).clamp_min(1e-8)


# The benchmark's cases of the two quantized tasks: decode to prefill M on a
# 7B model's attention and MLP layers ([N, K]); --quick times three M on the first.
LLAMA_LAYERS = ((4096, 4096), (11008, 4096), (4096, 11008))
QUANT_BENCH_CASES = tuple(((M, N, K), {}, M in (1, 16, 4096) and (N, K) == LLAMA_LAYERS[0])
                          for N, K in LLAMA_LAYERS for M in (1, 4, 16, 64, 256, 1024, 4096))


# A diagnosis hypothesis "the kernel computed pred" holds when every element is
# this close to pred, in units of the task's tolerance: a buggy kernel's own
# fp16 and accumulation rounding, nothing more.
MATCH = 4.0


def matches(y: torch.Tensor, pred: torch.Tensor, tolerance: float) -> bool:
    """Whether ``y`` is ``pred`` up to a kernel's rounding (MATCH x the task's tolerance)."""
    if not bool(torch.isfinite(y).all()):
        return False
    rms = float(pred.pow(2).mean().sqrt())
    return bool(((y - pred).abs() <= MATCH * tolerance * (pred.abs() + rms)).all())
