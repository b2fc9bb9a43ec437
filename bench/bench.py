"""GPU benchmark: the reference kernels against fp16 torch.matmul and library anchors.

    make bench            (python -m bench.bench [--quick] [--json PATH])

Times come from grader/harness/timing.py (CUDA events, L2 flush, a spin that
hides host launch overhead, medians), the same code the grader uses. Ratio =
fp16 torch.matmul time / kernel time. "util" is the fraction of the measured
copy bandwidth (memory-bound rows) or of the measured matmul peak
(compute-bound rows) that the kernel reaches. What is timed comes from the
task registry (grader/tasks/): each task's inputs, its ``bench_cases`` and its
library ``anchors``; the kernel is the reference solution's entry point. Every
row also times ``triton_fp16``: Triton's own fp16 GEMM (bench/triton_fp16.py,
tutorial 03's kernel autotuned), the limit a Triton kernel can fairly be held to.

The kernel and fp16 are timed on WEIGHT_SETS weight sets drawn from
consecutive seeds, and each time is the mean of the sets' medians: where a
weight's blocks fall decides a sparse kernel's time (DDS at M = 65536 @ 5 %
ran 98-115 us on one H100 from one pattern to the next), and the grader's
timed batches average over up to 16 sets, so a single draw is no measure of
what a grade sees. The anchors are timed on the first set.

Rows with M <= 16 also get "eager": the task's layer (solutions.layers) with
the row's weight, one forward in a loop of back-to-back forwards with the
host's time included, next to fp16 nn.Linear's in the same loop
(bench/eager.py says how; ``python -m bench.eager`` breaks it down).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from itertools import cycle, islice
from pathlib import Path

import torch
from tabulate import tabulate

from bench.triton_fp16 import triton_fp16_matmul
from grader.harness.timing import copy_bandwidth_gbs, median_ms
from grader.tasks import TASKS, Task


def _try(fn):
    """Time fn, or None when this PyTorch build lacks the op or rejects the shape."""
    try:
        fn()
        return median_ms(fn)
    except (RuntimeError, NotImplementedError, AttributeError, TypeError):
        return None


def reference_entry(task: Task):
    """The reference solution's entry point of ``task`` (solutions/<its file>)."""
    return getattr(importlib.import_module(f"solutions.{Path(task.file).stem}"), task.entry)


EAGER_MAX_M = 16  # rows that also get the eager column: decode, where the host's time shows


def eager_ms(task: Task, x: torch.Tensor, w: torch.Tensor, options: dict) -> dict:
    """The task's layer and fp16 nn.Linear on weight ``w``, one forward each in eager mode,
    host included (bench/eager.py: back to back over copies that overflow the L2 cache)."""
    from bench.eager import copies_for, eager_us, layer_from, linear_from, weight_bytes

    kw = {"group_size": options["group_size"]} if options.get("group_size") else {}
    probe = layer_from(task.name, w, **kw)
    layers = [probe] + [layer_from(task.name, w, **kw) for _ in range(copies_for(weight_bytes(probe)) - 1)]
    linears = [linear_from(w) for _ in range(copies_for(w.numel() * w.element_size()))]
    with torch.inference_mode():
        return {name: eager_us([(lambda m=m: m(x)) for m in islice(cycle(mods), 200)]) / 1e3
                for name, mods in (("eager", layers), ("fp16_eager", linears))}


WEIGHT_SETS = 4


def bench_case(task: Task, shape, options: dict, peaks: dict, bw: float) -> dict:
    """One record: the reference, fp16 torch.matmul and the task's library anchors, timed
    on the same fresh inputs (the grader's own, grader/tasks/)."""
    seed = int(torch.randint(2**31 - 1 - WEIGHT_SETS, ()))
    entry = reference_entry(task)
    per_set = {"fp16": [], "kernel": []}
    for i in range(WEIGHT_SETS):
        args, extras = task.make_inputs(shape, options, seed + i, "cuda")
        x, w = args[0], extras["weight"]
        per_set["fp16"].append(median_ms(lambda: x @ w.t()))   # noqa: B023 (timed before the next set)
        per_set["kernel"].append(median_ms(lambda: entry(*args)))   # noqa: B023
    args, extras = task.make_inputs(shape, options, seed, "cuda")
    x, w = args[0], extras["weight"]
    t = {name: sum(v) / len(v) for name, v in per_set.items()}
    if shape[0] <= EAGER_MAX_M:
        t.update(eager_ms(task, x, w, options))
    # Triton's own fp16 GEMM (tutorial 03, autotuned): the fair limit for a Triton kernel.
    t["triton_fp16"] = _try(lambda: triton_fp16_matmul(x, w))
    for name, anchor in task.anchors.items():
        try:
            t[name] = _try(anchor(args, extras))
        except (RuntimeError, NotImplementedError, AttributeError, TypeError):
            t[name] = None
    full = task.defaults(options)
    flops, nbytes = task.dot_flops(shape, full), task.minimum_bytes(shape, options)
    util, bound = _util(t["kernel"], flops, nbytes, peaks[task.mma_dtype], bw)
    M, N, K = shape
    return dict(task=task.name, M=M, N=N, K=K, **options, times_ms=t, util=util, bound=bound,
                kernel_per_set_ms=per_set["kernel"])


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
    if "density" in r:   # a sparse case: the fraction of blocks stored says more than N and K
        shape = f"{r['M']} @{r['density']:.0%}"
    else:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
    anchors = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in t.items()
                        if k not in ("fp16", "kernel", "target", "eager", "fp16_eager") and v)
    if t.get("target"):   # recorded by earlier runs: a performance target of that day
        anchors += (", " if anchors else "") + f"target<={t['target'] * 1e3:.1f}"
    # Results files from before the eager column have no such times: "-".
    eager = f"{t['eager'] * 1e3:.1f} / {t['fp16_eager'] * 1e3:.1f}" if t.get("eager") else "-"
    return [r["task"], shape, t["fp16"] * 1e3, t["kernel"] * 1e3, t["fp16"] / t["kernel"], eager, anchors,
            f"{r['util']:.0%} {r['bound']}"]


def table(records: list[dict]) -> str:
    """The benchmark's table (docs/performance.md is rendered from results files with it)."""
    return tabulate([row(r) for r in records],
                    headers=["op", "M x N x K", "fp16 us", "kernel us", "ratio", "eager us (fp16)",
                             "anchors (us)", "util"],
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

    def save():   # after every row: a run cut short keeps what it measured
        with open(args.json, "w") as f:
            json.dump(dict(gpu=gpu, torch=torch.__version__, triton=triton.__version__, copy_gbs=bw,
                           peaks=peaks, results=records), f, indent=1)
    for task in TASKS.values():
        for shape, options, quick in task.bench_cases:
            if quick or not args.quick:
                records.append(bench_case(task, shape, options, peaks, bw))
                print(*row(records[-1]), flush=True)
                save()
    save()
    print()
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
