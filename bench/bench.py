"""GPU benchmark: the reference kernels against fp16 torch.matmul and library anchors.

    make bench            (python -m bench.bench [--quick] [--json PATH])

Times come from grader/harness/timing.py (CUDA events, L2 flush, a spin that
hides host launch overhead, medians), the same code the grader uses. Ratio =
fp16 torch.matmul time / kernel time. "util" is the fraction of the measured
copy bandwidth (memory-bound rows) or of the measured matmul peak
(compute-bound rows) that the kernel reaches.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

import torch
import torch.nn.functional as F
from tabulate import tabulate

from bench.problems import dds_problem, w4a16_problem, w8a8_problem
from grader.harness.timing import copy_bandwidth_gbs, median_ms
from solutions import dds_mm, w4a16_mm, w8a8_mm

QUANT_M = (1, 4, 16, 64, 256, 1024, 4096)
QUANT_NK = ((4096, 4096), (11008, 4096), (4096, 11008))
DDS_M = (16, 256, 4096, 16384, 65536)
DDS_DENSITY = (0.05, 0.25, 0.5, 1.0)


def _try(fn):
    """Time fn, or None when this PyTorch build lacks the op or rejects the shape."""
    try:
        fn()
        return median_ms(fn)
    except (RuntimeError, NotImplementedError, AttributeError, TypeError):
        return None


def _int_mm_padded(xq, wq_t):
    M = xq.shape[0]
    if M <= 16:  # torch._int_mm wants M > 16
        xq = F.pad(xq, (0, 0, 0, 32 - M))
    return torch._int_mm(xq, wq_t)


def bench_w8a8(M, N, K, peaks):
    x, wt, sx, sw, w = w8a8_problem(M, N, K)
    xq = torch.clamp(torch.round(x.float() / sx), -128, 127).to(torch.int8)

    def eager():
        q = torch.clamp(torch.round(x.float() / sx), -128, 127).to(torch.int8)
        return (_int_mm_padded(q, wt)[:M].float() * sx * sw.t()).half()

    t = {"fp16": median_ms(lambda: x @ w.t()), "kernel": median_ms(lambda: w8a8_mm(x, wt, sx, sw)),
         "int_mm": _try(lambda: _int_mm_padded(xq, wt)), "eager_int8": _try(eager)}
    flops, nbytes = 2 * M * N * K, 2 * M * K + N * K + 2 * M * N
    return t, flops, nbytes, peaks["int8"]


def bench_w4a16(M, N, K, peaks):
    x, qw, s, w = w4a16_problem(M, N, K)
    t = {"fp16": median_ms(lambda: x @ w.t()), "kernel": median_ms(lambda: w4a16_mm(x, qw, s))}
    t["int4pack_mm"] = _try(_tinygemm(x, w))
    flops, nbytes = 2 * M * N * K, 2 * M * K + N * K // 2 + 2 * M * N
    return t, flops, nbytes, peaks["fp16"]


def _tinygemm(x, w):
    """torch._weight_int4pack_mm (bf16 activations, group 128), or a thunk that raises."""
    N, K = w.shape
    try:
        g = w.float().reshape(N, K // 128, 128)
        scale = (g.abs().amax(2, keepdim=True) / 7).clamp_min(1e-8)
        q = (torch.clamp(torch.round(g / scale), -8, 7) + 8).to(torch.int32).reshape(N, K)
        packed_u8 = (q[:, 1::2] << 4 | q[:, ::2]).to(torch.uint8)
        packed = torch._convert_weight_to_int4pack(packed_u8, 8)
        sz = torch.stack([scale.squeeze(2).t(), torch.zeros_like(scale.squeeze(2).t())], 2).to(torch.bfloat16)
        xb = x.to(torch.bfloat16)
        return lambda: torch._weight_int4pack_mm(xb, packed, 128, sz.contiguous())
    except (RuntimeError, AttributeError, TypeError) as e:
        err = e
        def fail():
            raise RuntimeError(err)
        return fail


def bench_dds(M, density, peaks, bw):
    x, bsr, w = dds_problem(M, 1024, 1024, density)
    t = {"fp16": median_ms(lambda: x @ w.t()), "kernel": median_ms(lambda: dds_mm(x, bsr))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t["torch_bsr"] = _try(lambda: F.linear(x, bsr))
    nnz = bsr.values().shape[0]
    flops, nbytes = 2 * M * nnz * 32 * 32, 2 * M * 1024 * 2 + nnz * 2048
    t["target"] = 1.25 * max(density * t["fp16"], nbytes / (bw * 1e9) * 1e3)
    return t, flops, nbytes, peaks["fp16"]


def _util(t_ms, flops, nbytes, peak_tops, bw_gbs):
    """Fraction of the bound that limits this problem (memory or compute)."""
    mem_ms = nbytes / (bw_gbs * 1e9) * 1e3
    cmp_ms = flops / (peak_tops * 1e12) * 1e3
    return (max(mem_ms, cmp_ms) / t_ms), ("mem" if mem_ms >= cmp_ms else "mma")


def _matmul_peaks(n: int = 8192) -> dict:
    """fp16 torch.matmul TFLOP/s and int8 torch._int_mm TOP/s at n^3, measured now."""
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    a8 = torch.randint(-128, 127, (n, n), device="cuda", dtype=torch.int8)
    return {"fp16": 2 * n**3 / (median_ms(lambda: a @ a, reps=10) * 1e-3) / 1e12,
            "int8": 2 * n**3 / (median_ms(lambda: torch._int_mm(a8, a8.t()), reps=10) * 1e-3) / 1e12}


def row(r: dict) -> list:
    """One table row of a benchmark record (what main() writes to --json)."""
    t = r["times_ms"]
    if r["task"] == "dds":
        shape = f"{r['M']} @{r['density']:.0%}"
        anchors = (f"torch_bsr {t['torch_bsr'] * 1e3:.1f}, " if t.get("torch_bsr") else "") + \
            f"target<={t['target'] * 1e3:.1f}"
    else:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        anchors = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in t.items() if k not in ("fp16", "kernel") and v)
    return [r["task"], shape, t["fp16"] * 1e3, t["kernel"] * 1e3, t["fp16"] / t["kernel"], anchors,
            f"{r['util']:.0%} {r['bound']}"]


def table(records: list[dict]) -> str:
    """The benchmark's table (docs/performance.md is rendered from results files with it)."""
    return tabulate([row(r) for r in records],
                    headers=["op", "M x N x K", "fp16 us", "kernel us", "ratio", "anchors (us)", "util"],
                    floatfmt=".2f")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="a few shapes only")
    ap.add_argument("--json", default="bench-results.json", help="where to write all numbers")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("make bench needs a CUDA GPU (none found); correctness runs on CPU with `make test`.")
        return 1
    bw = copy_bandwidth_gbs()
    peaks = _matmul_peaks()
    gpu = torch.cuda.get_device_name()
    import triton
    print(f"{gpu}, torch {torch.__version__}, triton {triton.__version__}: copy {bw:.0f} GB/s, "
          f"fp16 {peaks['fp16']:.0f} TFLOP/s, int8 {peaks['int8']:.0f} TOP/s", flush=True)
    records = []
    ms = (1, 16, 4096) if args.quick else QUANT_M
    for name, fn in (("w8a8", bench_w8a8), ("w4a16", bench_w4a16)):
        for (N, K) in (QUANT_NK[:1] if args.quick else QUANT_NK):
            for M in ms:
                t, flops, nbytes, peak = fn(M, N, K, peaks)
                util, bound = _util(t["kernel"], flops, nbytes, peak, bw)
                records.append(dict(task=name, M=M, N=N, K=K, times_ms=t, util=util, bound=bound))
                print(*row(records[-1]), flush=True)
    for density in ((0.25,) if args.quick else DDS_DENSITY):
        for M in ((4096,) if args.quick else DDS_M):
            t, flops, nbytes, peak = bench_dds(M, density, peaks, bw)
            util, bound = _util(t["kernel"], flops, nbytes, peak, bw)
            records.append(dict(task="dds", M=M, N=1024, K=1024, density=density, times_ms=t, util=util, bound=bound))
            print(*row(records[-1]), flush=True)
    print()
    print(table(records))
    with open(args.json, "w") as f:
        json.dump(dict(gpu=gpu, torch=torch.__version__, triton=triton.__version__, copy_gbs=bw,
                       peaks=peaks, results=records), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
