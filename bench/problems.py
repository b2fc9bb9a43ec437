"""Random problem instances for the benchmark and the config sweep."""

from __future__ import annotations

import warnings

import torch

from solutions.layers import pack_int4


def w8a8_problem(M: int, N: int, K: int, device="cuda"):
    """(x, qweight_t, input_scale, weight_scale, fp16 weight [N, K])."""
    x = torch.randn(M, K, device=device, dtype=torch.float16)
    w = torch.randn(N, K, device=device, dtype=torch.float16)
    sw = (w.abs().amax(1, keepdim=True).float() / 127).clamp_min(1e-8)
    qw = torch.clamp(torch.round(w.float() / sw), -128, 127).to(torch.int8)
    sx = (x.abs().amax(1, keepdim=True).float() / 127).clamp_min(1e-8)
    return x, qw.t(), sx, sw, w


def w4a16_problem(M: int, N: int, K: int, group_size: int | None = None, device="cuda"):
    """(x, qweight, scales, fp16 weight [N, K])."""
    gs = group_size or K
    x = torch.randn(M, K, device=device, dtype=torch.float16)
    w = torch.randn(N, K, device=device, dtype=torch.float16)
    g = w.float().reshape(N, K // gs, gs)
    s = (g.abs().amax(2, keepdim=True) / 7).clamp_min(1e-8).half()
    q = torch.clamp(torch.round(g / s.float()), -8, 7).to(torch.int8).reshape(N, K)
    return x, pack_int4(q), s.squeeze(2).t().contiguous(), w


def dds_problem(M: int, N: int, K: int, density: float, device="cuda"):
    """(x, weight_bsr, dense fp16 weight with the zero blocks)."""
    x = torch.randn(M, K, device=device, dtype=torch.float16)
    nb = (N // 32) * (K // 32)
    keep = torch.zeros(nb, dtype=torch.bool, device=device)
    keep[torch.randperm(nb, device=device)[: round(density * nb)]] = True
    mask = keep.view(N // 32, K // 32).repeat_interleave(32, 0).repeat_interleave(32, 1)
    w = torch.randn(N, K, device=device, dtype=torch.float16) * mask
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bsr = w.to_sparse_bsr((32, 32))
    return x, bsr, w
