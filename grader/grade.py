"""Grade one submission. This module owns the order of the phases; each reads and writes
the facts of grader/facts.py, and the imports run one way (tests/engine/test_import_graph.py):

    static   = static_findings(...)  the allowlist over each kernel file (grader/staticcheck/)
    runs     = run_workers(...)      sandboxed workers, inputs, checks, clocks (grader/harness/run.py),
                                     handed the static findings and the judge's rules
    add_estimates(runs, rubric)      CPU: the predicted GPU speed (grader/estimate.py; feedback)
    judgment = judge(runs, rubric)   one pytest test per rubric entry (grader/judge.py)
    result   = score(judgment, ...)  points, rounding and the bonus cap (grader/scoring.py)

The caller writes the result's reports (grader/report.py): grader/cli.py, the
command line, writes one even when ``grade`` itself fails.
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
from .estimate import estimate
from .facts import Runs, save_runs
from .harness import sandbox
from .harness.run import run_tasks
from .judge import HOST_READS, judge, voids_task
from .rubric import CALIBRATION, Rubric
from .scoring import GradeResult, score
from .staticcheck import check_source
from .submission import Submission, SubmissionError, load_submission

TRITON_NOTE = {
    "cpu": ("On a CPU the wrapper sees shapes only (never a value) and a separate process runs its kernels once "
            "the GPU's compiler accepts them; the kernel files are checked against an allowlist; flagged items are "
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
    ``runs_out``: also write what the run brought back there (grader/facts.py's runs
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
    static = static_findings(sub, rubric, tasks)
    with _one_grader_per_gpu(device, log):
        runs = run_workers(sub, rubric, device, seed, tasks, static, log, sanitizer, budget_s)
    add_estimates(runs, rubric)
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


def static_findings(sub: Submission, rubric: Rubric, tasks: list[str]) -> dict[str, list[str]]:
    """The static check's findings in each task's kernel file, by task ([]: none); no entry
    for a file the submission lacks, nor when the rubric turns the check off. A file that
    does not parse is left to its import, which reports it with its line."""
    if not rubric.settings.static_checks:
        return {}
    extra = set(rubric.settings.extra_allowed_imports)
    found = {}
    for task in tasks:
        t = rubric.tasks.get(task)
        if t is not None and t.file in sub.files:
            found[task] = [str(f) for f in check_source(sub.files[t.file], extra) if f.rule != "syntax"]
    return found


def run_workers(sub: Submission, rubric: Rubric, device: str, seed: int, tasks: list[str],
                static: dict[str, list[str]], log=print, sanitizer: str | None = None,
                budget_s: float | None = None) -> Runs:
    """The harness's run of ``tasks`` (grader/harness/run.py), handed what it applies without
    deciding: the static findings, the judge's rule for what voids a task (none of its
    performance tests is timed then) and the values a wrapper may read into Python."""
    return run_tasks(sub, rubric, device, seed, tasks, log, sanitizer, budget_s,
                     static=static, voided=voids_task, host_reads=HOST_READS)


def add_estimates(runs: Runs, rubric: Rubric) -> None:
    """Each task's predicted GPU speed from what its wrapper launched at the GPU shapes (a CPU
    run's capture; grader/estimate.py). Feedback, never a score: an estimate that fails says
    why and costs nothing else."""
    for run in runs.tasks.values():
        if not run.capture or run.error:   # no capture, or the task's run broke off
            continue
        try:
            run.estimate = estimate(run, rubric)
        except Exception as e:  # noqa: BLE001 - an estimate never costs a grade
            run.estimate = {"error": f"no estimate: {type(e).__name__}: {e}"[:300]}


def toolchain_warnings(device: str, rubric: Rubric) -> list[str]:
    """The reports' first lines: how this run's torch, Triton and numpy differ from the grading
    toolchain (toolchain.txt; on a GPU also from the rubric's calibration), or []."""
    return toolchain.report_lines(
        device, {"torch": torch.__version__, "triton": triton.__version__, "numpy": numpy.__version__},
        rubric.settings.toolchain)
