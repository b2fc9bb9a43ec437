"""W8A8 with @triton.heuristics: EVEN_K (computed from the launch's arguments) drops the
K mask when K is a multiple of BLOCK_K."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w8a8_inputs

ROUND_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2**23


@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def _w8a8_kernel(x_ptr, w_ptr, sx_ptr, sw_ptr, y_ptr, M, N, K,
                 stride_xm, stride_xk, stride_wk, stride_wn, stride_ym, stride_yn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    n_mask = offs_n < N
    sx = tl.load(sx_ptr + offs_m, mask=m_mask, other=1.0)
    sw = tl.load(sw_ptr + offs_n, mask=n_mask, other=1.0)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x_ptrs = x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk
        w_ptrs = w_ptr + k[:, None] * stride_wk + offs_n[None, :] * stride_wn
        if EVEN_K:
            a = tl.load(x_ptrs, mask=m_mask[:, None], other=0.0)
            b = tl.load(w_ptrs, mask=n_mask[None, :], other=0)
        else:
            a = tl.load(x_ptrs, mask=m_mask[:, None] & (k[None, :] < K), other=0.0)
            b = tl.load(w_ptrs, mask=(k[:, None] < K) & n_mask[None, :], other=0)
        v = tl.minimum(tl.maximum(a.to(tl.float32) / sx[:, None], -128.0), 127.0)
        q = ((v + ROUND_MAGIC) - ROUND_MAGIC).to(tl.int8)
        acc = tl.dot(q, b, acc, out_dtype=tl.int32)

    y = acc.to(tl.float32) * sx[:, None] * sw[None, :]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, y.to(tl.float16),
             mask=m_mask[:, None] & n_mask[None, :])


def w8a8_mm(x: torch.Tensor, qweight_t: torch.Tensor, input_scale: torch.Tensor,
            weight_scale: torch.Tensor) -> torch.Tensor:
    """W8A8 matrix multiply: y = dequant(quant(x) @ qweight_t); see handout section 4."""
    M, N, K = check_w8a8_inputs(x, qweight_t, input_scale, weight_scale)
    x = x.contiguous()
    input_scale = input_scale.to(torch.float32).contiguous()
    weight_scale = weight_scale.to(torch.float32).contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)

    BLOCK_M, BLOCK_N, BLOCK_K = 32, 64, 64
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _w8a8_kernel[grid](
        x, qweight_t, input_scale, weight_scale, y, M, N, K,
        x.stride(0), x.stride(1), qweight_t.stride(0), qweight_t.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
    )
    return y
