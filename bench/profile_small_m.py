"""Per-kernel device times of the small-M paths (developer tool, GPU only).

    python -m bench.profile_small_m
"""

import torch
from torch.profiler import ProfilerActivity, profile

from bench.problems import dds_problem, w4a16_problem, w8a8_problem
from solutions import dds_mm, w4a16_mm, w8a8_mm


def kernel_times_us(fn, calls=20) -> dict[str, float]:
    """{kernel name: device us per call} over ``calls`` calls of fn (torch profiler, warm L2)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {evt.key: (getattr(evt, "self_device_time_total", 0) or getattr(evt, "self_cuda_time_total", 0)) / calls
             for evt in prof.key_averages()}
    return {k: us for k, us in times.items() if us > 0}


def show(name, fn, calls=20):
    print(f"== {name}")
    for key, us in kernel_times_us(fn, calls).items():
        print(f"   {us:8.2f} us  {key[:90]}")


if __name__ == "__main__":
    for M in (1, 16):
        x, wt, sx, sw, w = w8a8_problem(M, 4096, 4096)
        show(f"w8a8 M={M}", lambda: w8a8_mm(x, wt, sx, sw))
        show(f"fp16 M={M}", lambda: x @ w.t())
        x, qw, s, w = w4a16_problem(M, 4096, 4096)
        show(f"w4a16 M={M}", lambda: w4a16_mm(x, qw, s))
    x, bsr, w = dds_problem(4096, 1024, 1024, 0.25)
    show("dds M=4096 d=0.25", lambda: dds_mm(x, bsr))
