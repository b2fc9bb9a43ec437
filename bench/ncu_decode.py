"""Hardware counters of the decode kernels (developer tool, GPU only; run under ncu).

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \\
        --section Occupancy --section LaunchStats --section WarpStateStats python3 -m bench.ncu_decode
"""

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


if __name__ == "__main__":
    x, qw, s, w = w4a16_problem(1, 4096, 4096)
    _profiled(lambda: w4a16_mm(x, qw, s))
    _profiled(_tinygemm(x, w))
    _profiled(lambda: x @ w.t())
    x, wt, sx, sw, w = w8a8_problem(1, 4096, 4096)
    _profiled(lambda: w8a8_mm(x, wt, sx, sw))
