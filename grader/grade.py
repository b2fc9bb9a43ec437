"""Grade one submission: run its tasks, judge with pytest, score, in that order.

    runs     = run_tasks(...)        sandboxed workers, inputs, checks, clocks (grader/harness/run.py)
    judgment = judge(runs, rubric)   one pytest test per rubric entry (grader/judge.py)
    result   = score(judgment, ...)  points, rounding and the bonus cap (grader/scoring.py)

grader/report.py writes the result; grader/cli.py is the command line.
"""

from __future__ import annotations

import datetime as dt
import platform
import secrets
import time
from pathlib import Path

import numpy
import torch
import triton

from . import toolchain
from .harness import sandbox
from .harness.run import run_tasks
from .judge import judge
from .rubric import CALIBRATION, Rubric
from .runs import save_runs
from .scoring import GradeResult, score
from .submission import Submission, SubmissionError, load_submission

TRITON_NOTE = {
    "cpu": ("Triton use is judged from the kernel files (allowlist) and from what the worker recorded: the PyTorch "
            "ops of each checked call and, in the interpreter, the arithmetic its kernels did; flagged items are "
            "for a TA to review."),
    "cuda": ("Triton use is judged from the kernel files (allowlist) and from what the worker recorded: the PyTorch "
             "ops of each checked call and a trace of the kernels that ran on the GPU; flagged items are for a TA "
             "to review."),
}
CPU_NOTE = ("No CUDA GPU: correctness ran in the Triton interpreter on smaller shapes; performance was not run, "
            "so this score is partial.")


def _sanitizer(device: str) -> str:
    """The compute-sanitizer binary, or a clear error when --sanitize cannot work here."""
    import shutil as _shutil

    if device != "cuda":
        raise SystemExit("--sanitize needs a CUDA GPU (compute-sanitizer checks GPU memory accesses)")
    found = _shutil.which("compute-sanitizer") or next(
        (str(p) for p in (Path("/usr/local/cuda/bin/compute-sanitizer"),) if p.exists()), None)
    if found is None:
        raise SystemExit("--sanitize: compute-sanitizer not found on PATH or in /usr/local/cuda/bin")
    return found


def _sandbox_summary(device: str) -> str:
    """The sandbox the workers run in, in one line, for the report."""
    gpu = device == "cuda"
    try:
        return sandbox.backend(gpu=gpu).summary().removeprefix("sandbox ")
    except Exception as e:  # noqa: BLE001
        return f"unavailable: {e}"


def calibration_note(calibrated_on, gpu: str | None) -> str | None:
    """A one-line warning when the rubric's thresholds were placed on other GPUs
    than ``gpu`` (the rubric's ``calibrated_on``); None on the CPU (gpu None),
    for an uncalibrated rubric, or on a GPU it names."""
    places = [CALIBRATION.fullmatch(entry) for entry in calibrated_on]
    if gpu is None or not places or any(m["gpu"] == gpu for m in places):
        return None
    where = " and ".join(f"{m['gpu']} ({m['date']})" for m in places)
    return (f"Warning: the performance thresholds were calibrated on {where}, not on this GPU ({gpu}): "
            "ratios to torch.matmul differ between GPUs, so the performance points may be off "
            "(a TA re-places them on this GPU with make calibrate).")


def _one_grader_per_gpu(device: str, log):
    """Hold this GPU's lock while grading on it (a second grader waits): timings
    from a shared GPU would be wrong for both."""
    import contextlib

    if device != "cuda":
        return contextlib.nullcontext()
    from .harness.gpulock import gpu_lock

    log("taking the GPU lock (a second grader on this GPU waits for it) ...")
    return gpu_lock(torch.cuda.current_device(), wait=True, timeout_s=3600)


def grade(submission: str | Path, rubric: Rubric, seed: int | None = None,
          device: str | None = None, tasks: list[str] | None = None,
          log=print, sanitize: bool = False, budget_s: float | None = None,
          runs_out: str | Path | None = None) -> GradeResult:
    """Grade ``submission`` (folder or .zip) and return the result; never raises on a bad submission.

    ``sanitize`` (GPU): run the correctness cases under compute-sanitizer's
    memcheck, which names every out-of-bounds access; performance is not timed.
    ``budget_s``: the whole run's time limit; each task's workers get an equal
    share of what is left when it starts (never more than the rubric's limit).
    ``runs_out``: also write what the run brought back there (grader/runs.py's runs
    file: ``pytest grader/tests --runs FILE`` judges it again, test by test).
    """
    started = time.time()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    seed = secrets.randbits(62) if seed is None else seed
    tasks = tasks or list(rubric.tasks)
    notes = []
    try:
        sub = load_submission(submission)
    except SubmissionError as e:
        sub = Submission(source=str(submission), problems=[str(e)], unreadable=True)
        notes.append(f"submission unreadable: {e}")
    notes += [f"submission: {n}" for n in sub.notes]
    sanitizer = _sanitizer(device) if sanitize else None
    if sanitizer:
        notes.append(f"compute-sanitizer memcheck: {sanitizer}; performance was not timed")
    notes.append(TRITON_NOTE["cpu" if device == "cpu" else "cuda"])
    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    warning = calibration_note(rubric.settings.calibrated_on, gpu)
    if warning:
        notes.append(warning)
    if device != "cuda":
        notes.append(CPU_NOTE)
    with _one_grader_per_gpu(device, log):
        runs = run_tasks(sub, rubric, device, seed, tasks, log, sanitizer, budget_s)
    if runs_out is not None:
        save_runs(runs, runs_out)
    judgment = judge(runs, rubric)
    result = score(judgment, runs, rubric, submission=str(submission),
                   started=dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(timespec="seconds"),
                   seconds=round(time.time() - started, 1), device=device,
                   gpu=gpu,
                   versions={"sandbox": _sandbox_summary(device), "python": platform.python_version(),
                             "torch": torch.__version__, "triton": triton.__version__,
                             "numpy": numpy.__version__, "cuda": torch.version.cuda,
                             "toolchain": toolchain.summary()},
                   notes=notes + runs.notes)
    result.toolchain_warnings = toolchain_warnings(device, rubric)
    return result


def toolchain_warnings(device: str, rubric: Rubric) -> list[str]:
    """The reports' first lines: how this run's torch, Triton and numpy differ from the grading
    toolchain (toolchain.txt; on a GPU also from the rubric's calibration), or []."""
    return toolchain.report_lines(
        device, {"torch": torch.__version__, "triton": triton.__version__, "numpy": numpy.__version__},
        rubric.settings.toolchain)
