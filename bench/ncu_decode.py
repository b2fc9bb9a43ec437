"""Hardware counters of the decode kernels (developer tool, GPU only; run under ncu).

    bash bench/gpu_run.sh ncu        # sections of each decode kernel and its baselines
    bash bench/gpu_run.sh ncu-w8a8   # time and DRAM throughput of W8A8 decode GEMM configs
"""

import itertools
import sys

import torch

from bench.bench import _tinygemm
from bench.problems import w4a16_problem, w8a8_problem
from solutions import w4a16_mm, w8a8_mm
from solutions import w8a8 as w8a8_mod


def _profiled(fn):
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def w8a8_configs():
    """The W8A8 decode GEMM at several split-K / tile widths, one profiled call each."""
    x, wt, sx, sw, w = w8a8_problem(1, 4096, 4096)
    for sk, bn, bk in itertools.product((1, 2, 4, 8, 16), (32, 64, 128), (128, 256)):
        cfg = dict(SPLIT_K=sk, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=4, num_stages=3)
        print(f"CONFIG {cfg}", flush=True)
        _profiled(lambda: w8a8_mod._launch(x, wt, sx, sw, cfg))


def kernels():
    """One profiled call of each decode kernel and its baselines (M = 1, 4096^2)."""
    x, qw, s, w = w4a16_problem(1, 4096, 4096)
    _profiled(lambda: w4a16_mm(x, qw, s))
    _profiled(_tinygemm(x, w))
    _profiled(lambda: x @ w.t())
    x, wt, sx, sw, w = w8a8_problem(1, 4096, 4096)
    _profiled(lambda: w8a8_mm(x, wt, sx, sw))


if __name__ == "__main__":
    w8a8_configs() if sys.argv[1:] == ["w8a8-configs"] else kernels()
