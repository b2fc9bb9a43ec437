"""Why is the W8A8 quantize pre-pass slow at small M? (developer tool, GPU only)

    python -m bench.quant_variants
"""

import torch
import triton
import triton.language as tl

from grader.harness.timing import median_ms
from solutions import w8a8 as w8a8_mod


@triton.jit
def _quant_mul_kernel(x_ptr, sx_ptr, xq_ptr, M, K, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                      DIV: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
    x = tl.load(x_ptr + offs_m[:, None] * K + offs_k[None, :], mask=mask, other=0.0).to(tl.float32)
    s = tl.load(sx_ptr + offs_m, mask=offs_m < M, other=1.0)
    if DIV == 0:
        v = x * (1.0 / s)[:, None]
    elif DIV == 1:
        v = x / s[:, None]
    else:
        v = tl.math.div_rn(x, s[:, None])
    v = tl.minimum(tl.maximum(v, -128.0), 127.0)
    v = (v + 12582912.0) - 12582912.0
    tl.store(xq_ptr + offs_m[:, None] * K + offs_k[None, :], v.to(tl.int8), mask=mask)


if __name__ == "__main__":
    K = 4096
    for M in (1, 16, 4096):
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        s = (x.abs().amax(1, keepdim=True).float() / 127)
        q = torch.empty(M, K, device="cuda", dtype=torch.int8)
        for bm, bk in ((64, 128), (16, 256), (1, 1024), (1, 256), (4, 512)):
            if bm > max(M, 1) * 4 and bm > 16:
                continue
            grid = (triton.cdiv(M, bm), triton.cdiv(K, bk))
            t = median_ms(lambda: w8a8_mod._quantize_rows_kernel[grid](
                x, s, q, M, K, K, 1, K, 1, BLOCK_M=bm, BLOCK_K=bk, num_warps=4))
            line = f"M={M:5d} BM={bm:3d} BK={bk:5d}: solution {t * 1e3:7.2f} us"
            for div, name in ((0, "mul-rcp"), (1, "fast-div"), (2, "div_rn")):
                t2 = median_ms(lambda: _quant_mul_kernel[grid](x, s, q, M, K, BLOCK_M=bm, BLOCK_K=bk, DIV=div))
                line += f" | {name} {t2 * 1e3:7.2f}"
            print(line, flush=True)
        print(f"M={M:5d} empty-kernel floor (x.zero_ of 1 elem): {median_ms(lambda: q[:1, :1].zero_()) * 1e3:.2f} us")
