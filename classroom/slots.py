"""The slots of a parallel batch: where one grade process runs at a time (a GPU,
or one of N CPU jobs), the environment it adds, and how many cores this
machine can give.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Slot:
    """Where a parallel batch runs a grade process: its name (a GPU, or a CPU
    job's number), the environment it adds (CUDA_VISIBLE_DEVICES, thread
    limits), and the batch's stop event."""
    name: str
    env: tuple
    stop: threading.Event


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, and a cgroup's CPU quota where one is set)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:  # cgroup v2: "max 100000" or "<quota> <period>"
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def spare_cores() -> int:
    """The default JOBS: the usable cores that are not busy now (the 1-minute load average), at least 1."""
    cores = usable_cores()
    try:
        busy = int(os.getloadavg()[0] + 0.5)
    except OSError:
        busy = 0
    return max(1, min(cores, cores - busy))


def cpu_slots(jobs: int) -> list[tuple[str, tuple]]:
    """(name, environment) of each of ``jobs`` CPU slots. Each grade process limits
    its thread pools (PyTorch's, OpenMP's, BLAS's) to its share of the cores, so
    that N students at once do not oversubscribe the machine."""
    threads = str(max(1, usable_cores() // max(1, jobs)))
    env = tuple((k, threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"))
    return [(f"job{i}", env) for i in range(jobs)]


def gpu_slots(gpus: list[str]) -> list[tuple[str, tuple]]:
    return [(gpu, (("CUDA_VISIBLE_DEVICES", gpu),)) for gpu in gpus]
