"""A batch on several GPUs: one grade process per GPU at a time.

``--gpus all`` uses every GPU the batch sees (the entries of its own
CUDA_VISIBLE_DEVICES when that is set, else every device CUDA counts);
``--gpus 0,2`` picks some of them by position, ``--gpus GPU-<uuid>,...`` by
UUID. Each grade process gets ``CUDA_VISIBLE_DEVICES=<that GPU>``, so it
sees one device, takes that GPU's lock (grader/harness/gpulock.py) and times
on it alone, exactly as a serial batch would: a student is graded on one GPU
from start to end, and which GPU grades which student changes nothing else.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import time
from typing import Callable

_TOKEN = re.compile(r"\d+|(?:GPU|MIG)-[A-Za-z0-9][A-Za-z0-9/-]{0,100}")


class GpuListError(ValueError):
    """--gpus cannot be used as given."""


class Stopped(Exception):
    """The batch is stopping: the item was not finished (and nothing was installed)."""


def _count_devices() -> int:
    try:
        import torch
        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no torch, no driver: no GPU
        return 0


def visible_gpus(wanted: str, environ=None, count: Callable[[], int] = _count_devices) -> list[str]:
    """The CUDA_VISIBLE_DEVICES value of each slot for ``--gpus wanted``."""
    environ = os.environ if environ is None else environ
    seen = environ.get("CUDA_VISIBLE_DEVICES")
    visible = [t.strip() for t in seen.split(",") if t.strip()] if seen is not None else None
    if wanted.strip() == "all":
        gpus = visible if visible is not None else [str(i) for i in range(count())]
        if not gpus:
            raise GpuListError("--gpus all: no CUDA GPU is visible here")
        return gpus
    tokens = [t.strip() for t in wanted.split(",")]
    if not tokens or any(not _TOKEN.fullmatch(t) for t in tokens):
        raise GpuListError(f"--gpus {wanted!r}: expected 'all' or a comma-separated list of GPU indices "
                           "(0,1) or UUIDs (GPU-...)")
    if len(set(tokens)) != len(tokens):
        raise GpuListError(f"--gpus {wanted!r}: a GPU is listed twice (one grade process per GPU)")
    if visible is None:
        return tokens
    out = []
    for t in tokens:
        if t.isdigit():
            if int(t) >= len(visible):
                raise GpuListError(f"--gpus {wanted!r}: this batch sees {len(visible)} GPU(s) "
                                   f"(CUDA_VISIBLE_DEVICES={seen}); index {t} is not one of them")
            t = visible[int(t)]
        out.append(t)
    return out


def run_parallel(items: list, slots: list[str], work: Callable, done: Callable) -> None:
    """Call ``work(item, slot, stop)`` for every item, one item per slot at a
    time, in item order as slots free up; ``done(item, status)`` after each
    (from the slot's thread). On KeyboardInterrupt (the batch's stop signals)
    ``stop`` is set, every slot finishes cleaning up its item (``work`` raises
    Stopped), and the interrupt is raised again."""
    if not slots:
        return
    todo: queue.Queue = queue.Queue()
    for item in items:
        todo.put(item)
    stop = threading.Event()
    running = [0]                      # slots whose thread has not ended
    count_lock = threading.Lock()

    def slot_loop(slot: str) -> None:
        try:
            while not stop.is_set():
                try:
                    item = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    status = work(item, slot, stop)
                except Stopped:
                    return
                except Exception as e:  # noqa: BLE001 - the batch's own failure costs this item only
                    status = f"batch error: {type(e).__name__}: {e}"
                done(item, status)
        finally:
            with count_lock:
                running[0] -= 1

    def slots_running() -> bool:
        with count_lock:
            return running[0] > 0

    # The main thread polls a counter instead of Thread.join: a signal that interrupts
    # join() can mark a running thread as stopped (CPython 3.11, bpo-45274's fix).
    try:
        for s in slots:
            with count_lock:
                running[0] += 1
            try:
                threading.Thread(target=slot_loop, args=(s,), name=f"gpu-{s}", daemon=True).start()
            except Exception:  # not started (an interrupt can only come once it has: it will count down)
                with count_lock:
                    running[0] -= 1
                raise
        while slots_running():
            time.sleep(0.05)
    except KeyboardInterrupt:
        stop.set()
        while slots_running():
            try:
                time.sleep(0.05)
            except KeyboardInterrupt:  # a second Ctrl-C: the slots are already stopping
                continue
        raise
