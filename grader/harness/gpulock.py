"""One GPU, one grader: a second grader on the same GPU waits or refuses.

    with gpu_lock(0, wait=True, timeout_s=3600):
        ... grade ...

Two checks:

- a lock file per GPU (by its UUID) in a folder every grader of the machine
  shares (``GRADER_GPU_LOCK_DIR``, else /run/lock, else /tmp), held with
  ``fcntl.flock``: the kernel releases it when the holder dies, so a crashed
  grader never leaves a stale lock;
- the GPU's memory: when other processes already hold much of it (a grader in
  another container, which does not share the lock folder, or any other job),
  the GPU is busy too.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path

POLL_S = 0.5
BUSY_BYTES = 2 << 30          # memory held by others above which the GPU counts as busy
BUSY_FRACTION = 0.10          # ... or this fraction of it, whichever is larger


class GpuBusy(RuntimeError):
    """Another grader (or job) is using this GPU."""


def lock_dir() -> Path:
    """The machine-wide folder that holds the lock files."""
    env = os.environ.get("GRADER_GPU_LOCK_DIR")
    if env:
        return Path(env)
    for d in ("/run/lock", "/var/lock"):
        if os.path.isdir(d) and os.access(d, os.W_OK):
            return Path(d)
    return Path("/tmp")


def gpu_key(device_index: int) -> str:
    """A stable name for the GPU: its UUID where torch can tell it, else its index."""
    try:
        import torch
        uuid = getattr(torch.cuda.get_device_properties(device_index), "uuid", None)
        if uuid:
            return f"GPU-{uuid}"
    except Exception:
        pass
    return f"index{device_index}"


def memory_held_by_others(device_index: int) -> tuple[int, int] | None:
    """(bytes used by processes other than this one, total bytes) of the GPU, or None if unknown."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info(device_index)
        ours = torch.cuda.memory_reserved(device_index) + (512 << 20)   # + our CUDA context
        return max(0, total - free - ours), total
    except Exception:
        return None


def _busy_by_memory(device_index: int) -> str | None:
    held = memory_held_by_others(device_index)
    if held is None:
        return None
    used, total = held
    if used > max(BUSY_BYTES, BUSY_FRACTION * total):
        return (f"other processes hold {used / 2**30:.1f} of {total / 2**30:.1f} GiB "
                f"of GPU {device_index}'s memory")
    return None


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text()[:4096] or "{}")
        return (f"pid {info.get('pid')} ({info.get('cmd', '?')}), since "
                f"{time.strftime('%H:%M:%S', time.localtime(info.get('since', 0)))}")
    except (OSError, ValueError, AttributeError):
        return "another grader"


@contextmanager
def gpu_lock(device_index: int = 0, wait: bool = True, timeout_s: float = 3600.0, *,
             key: str | None = None, check_memory: bool = True):
    """Hold GPU ``device_index`` for this grader; raise GpuBusy if it cannot be had.

    ``wait``: wait up to ``timeout_s`` for the other grader to finish, else
    refuse at once. ``key`` overrides the GPU's name (tests use a fake one).
    """
    import fcntl
    key = key or gpu_key(device_index)
    folder = lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"grader-gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', key)[:100]}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except PermissionError:          # made by a grader of another user: reading is enough
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                why = _busy_by_memory(device_index) if check_memory else None
                if why is None:
                    break
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                why = f"another grader holds {key}: {_holder(path)} (lock file {path})"
            if not wait:
                raise GpuBusy(f"GPU busy, not grading: {why}. Wait for it or pick another GPU.")
            if time.monotonic() >= deadline:
                raise GpuBusy(f"GPU still busy after {timeout_s:.0f} s: {why}")
            time.sleep(POLL_S)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "since": time.time(),
                                      "cmd": " ".join(sys.argv)[:200]}).encode(), 0)
        except OSError:
            pass
        yield path
    finally:
        os.close(fd)                 # closing drops the lock
