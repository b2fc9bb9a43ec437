"""W4A16 with host-side TMA tensor descriptors (triton.tools.tensor_descriptor.TensorDescriptor)
for x, the packed weight and y; desc.load / desc.store in the kernel."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .utils import check_w4a16_inputs


@triton.jit
def _w4a16_kernel(x_desc, qw_desc, s_ptr, y_desc, N, K, group_size, stride_sg, stride_sn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    shifts = 28 - (offs_k % 8) * 4
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = x_desc.load([pid_m * BLOCK_M, k0])                       # out of bounds reads zeros
        packed = qw_desc.load([k0 // 8, pid_n * BLOCK_N])            # [BLOCK_K // 8, BLOCK_N]
        words = tl.reshape(tl.broadcast_to(packed[:, None, :], (BLOCK_K // 8, 8, BLOCK_N)), (BLOCK_K, BLOCK_N))
        q = (words << shifts[:, None]) >> 28
        k = k0 + offs_k
        s = tl.load(s_ptr + (k // group_size)[:, None] * stride_sg + offs_n[None, :] * stride_sn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, q.to(tl.float16) * s, acc)
    y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))   # out of bounds is dropped


def w4a16_mm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W4A16 matrix multiply: y = x @ dequant(qweight)^T; see handout section 5."""
    M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
    x = x.contiguous()
    qweight = qweight.contiguous()   # TMA wants a unit last stride
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64
    x_desc = TensorDescriptor.from_tensor(x, [BLOCK_M, BLOCK_K])
    qw_desc = TensorDescriptor.from_tensor(qweight, [BLOCK_K // 8, BLOCK_N])
    y_desc = TensorDescriptor.from_tensor(y, [BLOCK_M, BLOCK_N])
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _w4a16_kernel[grid](x_desc, qw_desc, scales, y_desc, N, K, group_size, scales.stride(0), scales.stride(1),
                        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return y
