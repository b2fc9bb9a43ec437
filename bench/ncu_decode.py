"""Hardware counters of the decode kernels (developer tool, GPU only; run under ncu).

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \\
        --section Occupancy --section LaunchStats --section WarpStateStats python3 -m bench.ncu_decode
"""

import sys

import torch

from bench.bench import _tinygemm
from bench.problems import w4a16_problem, w8a8_problem
from solutions import w4a16_mm, w8a8_mm


def _profiled(fn):
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def w8a8_configs():
    """The W8A8 decode GEMM at several split-K / tile widths, one profiled call each."""
    import itertools

    from solutions import w8a8 as w8a8_mod
    x, wt, sx, sw, w = w8a8_problem(1, 4096, 4096)
    for sk, bn, bk in itertools.product((1, 2, 4, 8, 16), (32, 64, 128), (128, 256)):
        cfg = dict(SPLIT_K=sk, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=4, num_stages=3)
        print(f"CONFIG {cfg}", flush=True)
        _profiled(lambda: w8a8_mod._launch(x, wt, sx, sw, cfg))


if __name__ == "__main__" and sys.argv[1:] == ["w8a8-configs"]:
    w8a8_configs()
elif __name__ == "__main__":
    x, qw, s, w = w4a16_problem(1, 4096, 4096)
    _profiled(lambda: w4a16_mm(x, qw, s))
    _profiled(_tinygemm(x, w))
    _profiled(lambda: x @ w.t())
    x, wt, sx, sw, w = w8a8_problem(1, 4096, 4096)
    _profiled(lambda: w8a8_mm(x, wt, sx, sw))
