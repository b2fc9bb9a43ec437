"""DDS autotuned in function form (_dds_kernel_tuned = triton.autotune(configs, key)(_dds_kernel)),
the grid a lambda of META."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import BSR_BLOCK, check_dds_inputs


@triton.jit
def _dds_kernel(x_ptr, values_ptr, crow_ptr, col_ptr, y_ptr, M,
                stride_xm, stride_xk, stride_ym, stride_yn,
                BLOCK_M: tl.constexpr, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_b = tl.arange(0, BLOCK)
    start = tl.load(crow_ptr + pid_n)
    end = tl.load(crow_ptr + pid_n + 1)
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    for b in range(start, end):
        j = tl.load(col_ptr + b)
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + (j * BLOCK + offs_b)[None, :] * stride_xk,
                    mask=offs_m[:, None] < M, other=0.0)
        w = tl.load(values_ptr + b * BLOCK * BLOCK + offs_b[:, None] + offs_b[None, :] * BLOCK)
        acc = tl.dot(a, w, acc)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + (pid_n * BLOCK + offs_b)[None, :] * stride_yn,
             acc.to(tl.float16), mask=offs_m[:, None] < M)


_dds_kernel_tuned = triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 16}, num_warps=2, num_stages=3),
        triton.Config({"BLOCK_M": 64}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 128}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 128}, num_warps=8, num_stages=2),
    ],
    key=["M"],
)(_dds_kernel)


def dds_mm(x: torch.Tensor, weight_bsr: torch.Tensor) -> torch.Tensor:
    """Dense x BSR-sparse matrix multiply: y = x @ W^T; see handout section 6."""
    M, N, K = check_dds_inputs(x, weight_bsr)
    x = x.contiguous()
    values = weight_bsr.values().contiguous()
    crow, col = weight_bsr.crow_indices(), weight_bsr.col_indices()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)

    def grid(META):
        return (triton.cdiv(M, META["BLOCK_M"]), N // BSR_BLOCK)

    _dds_kernel_tuned[grid](x, values, crow, col, y, M, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                            BLOCK=BSR_BLOCK)
    return y
