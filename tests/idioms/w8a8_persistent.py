"""W8A8 as a persistent kernel: one program per SM (a fixed count without a GPU), each
walking the output tiles with for tile in range(pid, num_tiles, NUM_PROGRAMS)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import check_w8a8_inputs

ROUND_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2**23


@triton.jit
def _w8a8_persistent_kernel(x_ptr, w_ptr, sx_ptr, sw_ptr, y_ptr, M, N, K,
                            stride_xm, stride_xk, stride_wk, stride_wn, stride_ym, stride_yn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            NUM_PROGRAMS: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * num_pid_n
    offs_k = tl.arange(0, BLOCK_K)
    for tile in range(pid, num_tiles, NUM_PROGRAMS):
        pid_m = tile // num_pid_n
        pid_n = tile % num_pid_n
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        sx = tl.load(sx_ptr + offs_m, mask=offs_m < M, other=1.0)
        sw = tl.load(sw_ptr + offs_n, mask=offs_n < N, other=1.0)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + offs_k
            a = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                        mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
            v = tl.minimum(tl.maximum(a.to(tl.float32) / sx[:, None], -128.0), 127.0)
            q = ((v + ROUND_MAGIC) - ROUND_MAGIC).to(tl.int8)
            b = tl.load(w_ptr + k[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                        mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0)
            acc = tl.dot(q, b, acc, out_dtype=tl.int32)
        y = acc.to(tl.float32) * sx[:, None] * sw[None, :]
        tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, y.to(tl.float16),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _num_programs(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def w8a8_mm(x: torch.Tensor, qweight_t: torch.Tensor, input_scale: torch.Tensor,
            weight_scale: torch.Tensor) -> torch.Tensor:
    """W8A8 matrix multiply: y = dequant(quant(x) @ qweight_t); see handout section 4."""
    M, N, K = check_w8a8_inputs(x, qweight_t, input_scale, weight_scale)
    x = x.contiguous()
    input_scale = input_scale.to(torch.float32).contiguous()
    weight_scale = weight_scale.to(torch.float32).contiguous()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)

    BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64
    num_tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    num_programs = min(_num_programs(x.device), num_tiles)
    _w8a8_persistent_kernel[(num_programs,)](
        x, qweight_t, input_scale, weight_scale, y, M, N, K,
        x.stride(0), x.stride(1), qweight_t.stride(0), qweight_t.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, NUM_PROGRAMS=num_programs,
    )
    return y
