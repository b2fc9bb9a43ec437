"""DDS with host-side TMA tensor descriptors (TensorDescriptor.from_tensor) for x, the stored
blocks (as a [nnz * 32, 32] matrix, transposed in the kernel with tl.trans) and y."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .utils import BSR_BLOCK, check_dds_inputs


@triton.jit
def _dds_kernel(x_desc, v_desc, crow_ptr, col_ptr, y_desc, BLOCK_M: tl.constexpr, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    start = tl.load(crow_ptr + pid_n).to(tl.int32)   # block pointers and descriptors take 32-bit offsets
    end = tl.load(crow_ptr + pid_n + 1).to(tl.int32)
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    for b in range(start, end):
        j = tl.load(col_ptr + b).to(tl.int32)
        a = x_desc.load([pid_m * BLOCK_M, j * BLOCK])   # rows past M read zeros
        w = v_desc.load([b * BLOCK, 0])                  # block b as stored: [n, k]
        acc = tl.dot(a, tl.trans(w), acc)
    y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK], acc.to(tl.float16))


def dds_mm(x: torch.Tensor, weight_bsr: torch.Tensor) -> torch.Tensor:
    """Dense x BSR-sparse matrix multiply: y = x @ W^T; see handout section 6."""
    M, N, K = check_dds_inputs(x, weight_bsr)
    x = x.contiguous()
    values = weight_bsr.values().contiguous()
    crow, col = weight_bsr.crow_indices(), weight_bsr.col_indices()
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    BLOCK_M = 64
    if values.shape[0] == 0:
        # A descriptor needs a non-empty tensor; with no stored block the kernel never reads it.
        values = torch.zeros((1, BSR_BLOCK, BSR_BLOCK), device=x.device, dtype=torch.float16)
    x_desc = TensorDescriptor.from_tensor(x, [BLOCK_M, BSR_BLOCK])
    v_desc = TensorDescriptor.from_tensor(values.view(-1, BSR_BLOCK), [BSR_BLOCK, BSR_BLOCK])
    y_desc = TensorDescriptor.from_tensor(y, [BLOCK_M, BSR_BLOCK])
    grid = (triton.cdiv(M, BLOCK_M), N // BSR_BLOCK)
    _dds_kernel[grid](x_desc, v_desc, crow, col, y_desc, BLOCK_M=BLOCK_M, BLOCK=BSR_BLOCK)
    return y
