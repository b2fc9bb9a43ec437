"""What a grade run observed: the facts the harness brings back, for the judge; no verdicts.

The grade is a straight pipeline (grader/grade.py owns the order):

    static   = static_findings(...)  grader/staticcheck/: the allowlist over each kernel file
    runs     = run_workers(...)      grader/harness/run.py: workers, inputs, checks, clocks
    add_estimates(runs, rubric)      grader/estimate.py: the predicted GPU speed (CPU; feedback)
    judgment = judge(runs, rubric)   grader/judge.py: one pytest test per rubric entry
    result   = score(judgment, ...)  grader/scoring.py: points, caps and rounding, once

Every phase reads and writes the types here; this module imports no phase. The
harness compares every output with the reference while it still holds the
inputs (a ``Check`` is a measurement: how far the output is, where, and the
likely cause); whether that passes a test, and for how many points, is the
judge's and the scorer's business.
"""

from __future__ import annotations

import dataclasses
import statistics
import types
from dataclasses import dataclass, field

import torch  # CallResult.output's type, which load_runs resolves

from .compare import Check

HIDDEN_CALL = "a hidden test"   # how a hidden test's call is named anywhere a student may read it


def problem(kind: str, detail: str) -> dict:
    """A reason, as data: ``kind`` (stable: the class CSV and scripts read it) and
    ``detail`` (the sentence a student reads)."""
    return {"kind": kind, "detail": detail}


@dataclass
class CallResult:
    """One checked call (grader/harness/measure.py): what came back and what the harness saw around it."""
    status: str                      # ok | error | unusable | gone
    message: str = ""                # the error, the unusable return, or why the worker is gone
    output: torch.Tensor | None = None
    evidence: dict = field(default_factory=dict)
    inputs_modified: list = field(default_factory=list)
    stray_write: bool = False
    kind: str = ""                   # status gone: WorkerGone.kind (timeout, crashed, ...); error: "not_compiled"
                                     # when the GPU's compiler refused a kernel, so the interpreter never ran it
    # The most elements PyTorch compute ops may produce in the call (the harness's
    # figure: the activations and the output once); 0: not judged.
    work_limit: int = 0
    # The call ran inside the worker's kernel trace (GPU): its evidence must say what ran.
    traced: bool = False
    # The most values the call may read from tensors into Python numbers (.item()); 0: not judged.
    read_limit: int = 0
    # CPU, an autotuned kernel: the call was carried out once per config (configs_checked of
    # them); the outputs after the first, with each config in words, are checked like ``output``.
    configs: list = field(default_factory=list)
    configs_checked: int = 0
    # CPU: threads, processes and libraries that appeared in the worker since the kernel file was
    # imported, read from /proc by the harness after the call (grader/harness/osfacts.py).
    appeared: list = field(default_factory=list)


@dataclass
class Timing:
    """A timed batch (grader/harness/measure.py), measured ``rounds`` times, next to the baseline's batch."""
    kernel_ms: list = field(default_factory=list)     # per call, one entry per round
    baseline_ms: list = field(default_factory=list)
    # The fixed cost of one batch taken off each round's time, ms: the worker's probe
    # (a command and a one-kernel graph of its own) and the harness's own one-kernel graph.
    fixed_ms: list = field(default_factory=list)
    baseline_fixed_ms: list = field(default_factory=list)
    calls: int = 0
    weight_sets: int = 0
    graph: bool = False
    note: str = ""
    wrong: str = ""                  # the first wrong output of a timed call, if any
    evidence: dict = field(default_factory=dict)  # what the worker recorded while preparing
    # Threads, processes and libraries that appeared in the worker around the timed runs, read
    # from /proc by the harness (grader/harness/measure.py, timed_rounds): the timing is void.
    appeared: list = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return statistics.median(self.baseline_ms) / statistics.median(self.kernel_ms)


@dataclass
class Draw:
    """One checked call of a correctness case, on one fresh draw of its inputs."""
    status: str                       # ok | error | unusable | gone (CallResult)
    message: str = ""                 # the exception, the unusable return, or why the worker is gone
    kind: str = ""                    # gone: how (timeout, crashed, ...; session.WorkerGone); error: not_compiled
    check: Check | None = None        # the tight comparison with the exact reference (status ok)
    sanity: Check | None = None       # the loose one with the unquantized layer (when check passed)
    cause: str | None = None          # the likely cause of a failed check (grader/diagnose.py)
    stray_write: bool = False         # a guard byte around an input changed
    outside: dict | None = None       # CPU: bytes loaded and stored outside every tensor the call knew
    race: dict | None = None          # CPU: two programs of one launch shared an element, no atomic
    configs: int = 0                  # CPU: autotune configs whose outputs were all checked (0: not autotuned)

    @property
    def clean(self) -> bool:
        """The call did what the test asks: right output, nothing touched out of bounds, no
        program depending on the order the interpreter ran them in."""
        return (self.status == "ok" and self.check is not None and self.check.passed
                and not self.stray_write and not self.outside and not self.race
                and self.sanity is not None and self.sanity.passed)


@dataclass
class CaseRun:
    """A correctness case: its draws, stopped at the first that is not clean."""
    name: str
    draws: list[Draw] = field(default_factory=list)
    compile_error: str = ""           # it ran in the interpreter, but would not compile or launch on the GPU


@dataclass
class TimedRun:
    """A performance test: the timing, or why there is none."""
    name: str
    timing: Timing | None = None
    error: str = ""


@dataclass
class TaskRun:
    """Everything the harness learnt about one task of the submission."""
    task: str
    missing: dict | None = None       # problem(): the kernel file is not there (missing_file, unreadable),
                                      # or defines no entry point (missing_entry)
    static: list[str] = field(default_factory=list)   # allowlist findings in the kernel file
    stopped: dict | None = None       # problem(): why the task's (visible) worker was of no more use
                                      # (import_error, timeout, crashed, exited_early, worker_ended,
                                      # protocol_error, compile_error)
    hidden_stopped: dict | None = None  # the same for the worker of the hidden tests: shown only in
                                        # those tests' own messages, never in the task's summary
    error: str = ""                   # the grader's own failure while running this task
    not_run: dict[str, str] = field(default_factory=dict)   # test -> why it does not run here
    cases: dict[str, CaseRun] = field(default_factory=dict)
    timed: dict[str, TimedRun] = field(default_factory=dict)
    untimed: str = ""                 # why no performance test was timed
    calls: list[tuple[str, CallResult]] = field(default_factory=list)  # every call's evidence (outputs
                                      # dropped), named by test (HIDDEN_CALL for the hidden ones)
    checks_off: dict[str, str] = field(default_factory=dict)  # worker checks that did not run, and why
                                      # (grader/worker/fence.py: this Triton lacks what they hook into)
    hidden_checks_off: dict[str, str] = field(default_factory=dict)  # the same for the hidden tests'
                                      # worker only: shown in those tests' own messages, never elsewhere
    kernels: list = field(default_factory=list)      # compile check rows
    movement: dict = field(default_factory=dict)     # data movement of one call (CPU; feedback)
    capture: dict = field(default_factory=dict)      # CPU: what the wrapper launches at the GPU shapes
                                                     # (grader/harness/capture.py; feedback, never a score)
    gpu_launch_errors: dict[str, str] = field(default_factory=dict)  # performance test -> why its
                                                     # captured kernel would not compile or launch on the GPU
    estimate: dict = field(default_factory=dict)     # CPU: the predicted speed of each performance test
                                                     # (grader/estimate.py; feedback, never a score)
    import_changes: list[str] = field(default_factory=list)   # threads, processes and libraries that
                                      # appeared in a worker while it imported the kernel file (osfacts.py)
    memcheck_errors: int = 0          # compute-sanitizer (--sanitize): errors it reported
    memcheck_silent: bool = False     # a worker under compute-sanitizer left no summary
    seconds: float = 0.0
    log: str = ""                     # the tail of what the visible worker printed (never the hidden one's)


@dataclass
class Runs:
    """One submission's run: every task's facts and what the whole run measured."""
    device: str                       # "cuda" or "cpu"
    seed: int
    tasks: dict[str, TaskRun]
    bandwidth_gbs: float = 0.0        # device copy bandwidth, for the memory floor of timed calls
    sanitized: bool = False           # correctness ran under compute-sanitizer; nothing was timed
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------
# The runs file: what a run brought back, for the judge to be run again on it
# (python -m grader grade --runs-out FILE; pytest grader/tests --runs FILE).
# ---------------------------------------------------------------------------

RUNS_FORMAT = 1


def save_runs(runs: Runs, path) -> None:
    """Write ``runs`` as JSON (the harness already dropped the calls' outputs: the
    checks hold what was compared). It holds the hidden tests' facts: a TA's file,
    not a student's."""
    import json
    import os
    from pathlib import Path

    path = Path(path)
    path.write_text(json.dumps({"format": RUNS_FORMAT, "runs": dataclasses.asdict(runs)}, indent=1, default=repr))
    os.chmod(path, 0o640)


def load_runs(path) -> Runs:
    """A runs file back as the ``Runs`` the judge reads; ValueError if it is not one."""
    import json
    from pathlib import Path

    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("format") != RUNS_FORMAT:
        raise ValueError(f"{path}: not a runs file of format {RUNS_FORMAT} (python -m grader grade --runs-out)")
    return _typed(Runs, data["runs"])


def _typed(tp, value):
    """``value`` (plain JSON) as type ``tp``: dataclasses field by field, containers element by element."""
    import typing

    if value is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _typed(inner[0], value) if len(inner) == 1 else value
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: _typed(hints[k], v) for k, v in value.items() if k in known})
    if origin is list:
        return [_typed(args[0], v) for v in value] if args else list(value)
    if origin is tuple:
        return tuple(_typed(a, v) for a, v in zip(args, value)) if args else tuple(value)
    if origin is dict:
        return {k: _typed(args[1], v) for k, v in value.items()} if args else dict(value)
    return value
