"""W8A8 with a multi-config @triton.autotune decorator (key=[...], grid as a lambda of META)
and tutorial 03's grouped ordering (GROUP_M swizzle of a 1-D grid)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w8a8_inputs

ROUND_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2**23: float32 addition rounds half to even


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 4}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 1}, num_warps=4, num_stages=4),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def _w8a8_kernel(x_ptr, w_ptr, sx_ptr, sw_ptr, y_ptr, M, N, K,
                 stride_xm, stride_xk, stride_wk, stride_wn, stride_ym, stride_yn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
    sx = tl.load(sx_ptr + offs_m, mask=offs_m < M, other=1.0)
    sw = tl.load(sw_ptr + offs_n, mask=offs_n < N, other=1.0)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        v = a.to(tl.float32) / sx[:, None]
        v = tl.clamp(v, -128.0, 127.0)
        v = (v + ROUND_MAGIC) - ROUND_MAGIC
        b = tl.load(w_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0)
        acc = tl.dot(v.to(tl.int8), b, acc, out_dtype=tl.int32)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    y = acc.to(tl.float32) * sx[:, None] * sw[None, :]
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, y.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def w8a8_mm(x: torch.Tensor, qweight_t: torch.Tensor, input_scale: torch.Tensor,
            weight_scale: torch.Tensor) -> torch.Tensor:
    """W8A8 matrix multiply: y = dequant(quant(x) @ qweight_t); see handout section 4."""
    M, N, K = check_w8a8_inputs(x, qweight_t, input_scale, weight_scale)
    x = x.contiguous()
    input_scale = input_scale.to(torch.float32).contiguous()
    weight_scale = weight_scale.to(torch.float32).contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)

    def grid(META):
        return (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)

    _w8a8_kernel[grid](
        x, qweight_t, input_scale, weight_scale, y, M, N, K,
        x.stride(0), x.stride(1), qweight_t.stride(0), qweight_t.stride(1), y.stride(0), y.stride(1),
    )
    return y
