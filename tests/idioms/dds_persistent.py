"""DDS as a persistent kernel: a fixed number of programs (the SM count on a GPU) walking
the (row tile, block row) tiles with for tile in range(pid, num_tiles, NUM_PROGRAMS)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import BSR_BLOCK, check_dds_inputs


@triton.jit
def _dds_persistent_kernel(x_ptr, values_ptr, crow_ptr, col_ptr, y_ptr, M, num_block_rows,
                           stride_xm, stride_xk, stride_ym, stride_yn,
                           BLOCK_M: tl.constexpr, BLOCK: tl.constexpr, NUM_PROGRAMS: tl.constexpr):
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * num_block_rows
    offs_b = tl.arange(0, BLOCK)
    for tile in range(pid, num_tiles, NUM_PROGRAMS):
        pid_m = tile // num_block_rows
        pid_n = tile % num_block_rows
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
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


def dds_mm(x: torch.Tensor, weight_bsr: torch.Tensor) -> torch.Tensor:
    """Dense x BSR-sparse matrix multiply: y = x @ W^T; see handout section 6."""
    M, N, K = check_dds_inputs(x, weight_bsr)
    x = x.contiguous()
    values = weight_bsr.values().contiguous()
    crow, col = weight_bsr.crow_indices(), weight_bsr.col_indices()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    BLOCK_M = 64
    num_tiles = triton.cdiv(M, BLOCK_M) * (N // BSR_BLOCK)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.device.type == "cuda" else 8
    num_programs = min(sms, num_tiles)
    _dds_persistent_kernel[(num_programs,)](
        x, values, crow, col, y, M, N // BSR_BLOCK, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK=BSR_BLOCK, NUM_PROGRAMS=num_programs)
    return y
