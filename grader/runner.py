"""Run one task of a submission in a child process and collect what it returns.

The child gets a fresh staged copy of the code, a scratch working directory, a
scrubbed environment, a wall-clock limit and a bounded output buffer. Its whole
process group is killed when it ends or times out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .submission import CHILD_PACKAGE, Submission, stage

LOG_TAIL_BYTES = 16 * 1024
PASS_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
            "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH", "NVIDIA_VISIBLE_DEVICES", "LANG", "LC_ALL")


@dataclass
class TaskRun:
    """What came back from one task's child process."""
    task: str
    records: dict = field(default_factory=dict)   # case name -> record from results.jsonl
    outputs: dict = field(default_factory=dict)   # case name -> output tensor (CPU)
    import_error: str | None = None
    finished: bool = False
    timed_out: bool = False
    exit_code: int | None = None
    output_bytes: int = 0
    log_tail: str = ""
    seconds: float = 0.0

    def failure_reason(self) -> str | None:
        """Why the child did not finish its job, in one line, or None."""
        if self.import_error:
            last = self.import_error.strip().splitlines()[-1] if self.import_error.strip() else "?"
            return f"the kernel file could not be imported: {last}"
        if self.timed_out:
            return f"time limit exceeded after {self.seconds:.0f} s; the process was killed"
        if not self.finished:
            if self.exit_code is not None and self.exit_code < 0:
                try:
                    name = signal.Signals(-self.exit_code).name
                except ValueError:
                    name = f"signal {-self.exit_code}"
                return f"the process crashed ({name})"
            return f"the process exited early with code {self.exit_code}"
        return None


class _TailReader(threading.Thread):
    """Drains a pipe, keeping only the last LOG_TAIL_BYTES (a child may print gigabytes)."""

    def __init__(self, pipe):
        super().__init__(daemon=True)
        self.pipe, self.tail, self.total = pipe, deque(), 0

    def run(self):
        size = 0
        for chunk in iter(lambda: self.pipe.read(65536), b""):
            self.total += len(chunk)
            self.tail.append(chunk)
            size += len(chunk)
            while size - len(self.tail[0]) >= LOG_TAIL_BYTES:
                size -= len(self.tail.popleft())

    def text(self) -> str:
        return b"".join(self.tail)[-LOG_TAIL_BYTES:].decode("utf-8", "replace")


def _child_env(work: Path, device: str) -> dict:
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env.update(HOME=str(work), TMPDIR=str(work), PYTHONNOUSERSITE="1",
               PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
               TRITON_CACHE_DIR=str(work / "triton-cache"), PYTHONPATH=str(work.parent / "stage"))
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_records(out_dir: Path, run: TaskRun) -> None:
    path = out_dir / "results.jsonl"
    if not path.exists():
        return
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(rec, dict):
            continue
        kind = rec.get("kind")
        if kind == "import":
            run.import_error = str(rec.get("error", ""))
        elif kind == "done":
            run.finished = True
        elif isinstance(rec.get("case"), str) and rec["case"] not in run.records:
            run.records[rec["case"]] = rec
            out = rec.get("output")
            if isinstance(out, str) and "/" not in out and (out_dir / out).is_file():
                try:
                    run.outputs[rec["case"]] = torch.load(out_dir / out, weights_only=True,
                                                          map_location="cpu")
                except Exception as e:  # a file the child wrote is no trusted pickle
                    rec["status"] = "error"
                    rec["error"] = f"output could not be read back: {type(e).__name__}: {e}"


def run_task(sub: Submission, task: str, kernel_file: str, entry: str, job: dict,
             timeout_s: float, device: str) -> TaskRun:
    """Stage ``kernel_file``, run ``job`` on it in a child and return what came back."""
    run = TaskRun(task=task)
    with tempfile.TemporaryDirectory(prefix=f"grade-{task}-") as tmp:
        tmp = Path(tmp)
        stage(sub, kernel_file, tmp / "stage")
        work, out_dir = tmp / "work", tmp / "out"
        work.mkdir()
        out_dir.mkdir()
        cmd = [sys.executable, "-m", f"{CHILD_PACKAGE}.child", str(out_dir),
               "submission", kernel_file[:-3], entry]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=work, env=_child_env(work, device), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        reader = _TailReader(proc.stdout)
        reader.start()
        try:
            proc.stdin.write(json.dumps(job).encode())
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            run.exit_code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            run.timed_out = True
        _kill_group(proc)  # also whatever the child forked
        run.exit_code = proc.wait()
        reader.join(timeout=5)
        run.seconds = time.monotonic() - t0
        run.log_tail, run.output_bytes = reader.text(), reader.total
        _read_records(out_dir, run)
    return run
