"""W4A16 with device-side tensor descriptors (tl.make_tensor_descriptor in the kernel, with
triton.set_allocator for their scratch memory, as Triton's TMA tutorial does)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs


@triton.jit
def _w4a16_kernel(x_ptr, qw_ptr, s_ptr, y_ptr, M, N, K, group_size,
                  stride_xm, stride_qr, stride_sg, stride_sn, stride_ym,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K])
    qw_desc = tl.make_tensor_descriptor(qw_ptr, shape=[K // 8, N], strides=[stride_qr, 1],
                                        block_shape=[BLOCK_K // 8, BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[stride_ym, 1], block_shape=[BLOCK_M, BLOCK_N])
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    shifts = 28 - (offs_k % 8) * 4
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = x_desc.load([pid_m * BLOCK_M, k0])
        packed = qw_desc.load([k0 // 8, pid_n * BLOCK_N])
        words = tl.reshape(tl.broadcast_to(packed[:, None, :], (BLOCK_K // 8, 8, BLOCK_N)), (BLOCK_K, BLOCK_N))
        q = (words << shifts[:, None]) >> 28
        k = k0 + offs_k
        s = tl.load(s_ptr + (k // group_size)[:, None] * stride_sg + offs_n[None, :] * stride_sn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, q.to(tl.float16) * s, acc)
    y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


def _alloc(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda" if torch.cuda.is_available() else "cpu", dtype=torch.int8)


def w4a16_mm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W4A16 matrix multiply: y = x @ dequant(qweight)^T; see handout section 5."""
    M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
    x = x.contiguous()
    qweight = qweight.contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    triton.set_allocator(_alloc)   # device-side descriptors need a little global scratch memory
    BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _w4a16_kernel[grid](x, qweight, scales, y, M, N, K, group_size,
                        x.stride(0), qweight.stride(0), scales.stride(0), scales.stride(1), y.stride(0),
                        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return y
