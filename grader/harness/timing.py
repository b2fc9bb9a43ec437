"""GPU timing with CUDA events, L2 flush and a spin that hides host overhead.

Before every timed call the GPU is given a 256 MB memset (flushes L2) and a
spin kernel long enough to cover the host's launch overhead, so the events
measure the device time of the call itself, not Python or Triton launch code.
The same function times the baselines, so the ratio compares like with like.
"""

from __future__ import annotations

import statistics
import time

import torch

_FLUSH_BYTES = 256 * 1024 * 1024
_SPIN_CYCLES_PER_US = 2000  # ~2 GHz; only needs to be roughly right


def _spin_cycles(host_us: float) -> int:
    return int((2 * host_us + 20) * _SPIN_CYCLES_PER_US)


def time_call(fn, reps: int = 50, warmup: int = 5, before=None) -> list[float]:
    """Device times in ms of ``reps`` calls of ``fn()``.

    ``before(i)`` (optional) runs on the host before the i-th call, outside the
    timed region (e.g. to refresh the inputs).
    """
    flush = torch.empty(_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for i in range(warmup):
        if before:
            before(i)
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    spin = _spin_cycles((time.perf_counter() - t0) * 1e6)

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if before:
            before(i)
        flush.zero_()
        torch.cuda._sleep(spin)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def median_ms(fn, reps: int = 50, warmup: int = 5) -> float:
    return statistics.median(time_call(fn, reps=reps, warmup=warmup))


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth, counting bytes read plus written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), reps=10, warmup=2)
    return 2 * nbytes / (ms * 1e-3) / 1e9
