"""Grade one submission: run each task in a child, judge with pytest, score, report."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
import secrets
import shutil
import tempfile
import time
from pathlib import Path

import torch
import triton

from .harness.inputs import make_inputs
from .harness.measure import CallResult, checked_call, timed_batches
from .harness import movement
from .harness import sandbox
from .harness.session import Session, WorkerGone
from .judge import Verdict, borderline, flag, judge_call, judge_timing, not_run, task_flags
from .pytest_plugin import GradingPlugin
from .rubric import CALIBRATION, Rubric, TestSpec
from .staticcheck import check_source
from .tracebacks import explain_error
from .scoring import SCHEMA_VERSION, GradeResult, TaskResult, resolve_test, totals
from .submission import Submission, SubmissionError, load_submission

TESTS_DIR = Path(__file__).with_name("tests")


def case_seed(master: int, test_name: str) -> int:
    """A per-test seed the child can use without learning the master seed."""
    digest = hashlib.blake2b(f"{master}:{test_name}".encode(), digest_size=7).digest()
    return int.from_bytes(digest, "little")


class GradingState:
    """What the pytest run needs: the rubric and the verdicts the harness reached."""

    def __init__(self, rubric: Rubric, sub: Submission, device: str, seed: int, tasks: list[str]):
        self.rubric, self.sub, self.device, self.seed, self.tasks = rubric, sub, device, seed, tasks
        self.verdicts: dict[str, Verdict] = {}
        self.static: dict[str, list[str]] = {}
        self.evidence: dict[str, list] = {}      # task -> [(case name, CallResult)]
        self.seconds: dict[str, float] = {}
        self.logs: dict[str, str] = {}
        self.gone: dict[str, str] = {}           # task -> why its worker ended early
        self.bandwidth_gbs = 0.0
        self.task_budget_s: float | None = None  # the current task's share of a whole-run budget
        self.kernels: dict[str, list] = {}      # task -> compile check rows (registers, spills, ...)
        self.sanitizer: str | None = None        # compute-sanitizer binary (--sanitize)
        self.memcheck: dict[str, int] = {}       # task -> memory errors compute-sanitizer reported
        self.movement: dict[str, dict] = {}      # task -> data movement counted in the interpreter (feedback)

    def selected_tests(self) -> list[TestSpec]:
        order = {"correctness": 0, "performance": 1}
        chosen = [t for t in self.rubric.tests if t.task in self.tasks]
        return sorted(chosen, key=lambda t: order[t.kind])

    def runs_here(self, spec: TestSpec) -> bool:
        return spec.shape_on(self.device) is not None

    def flags(self, task: str) -> list[dict]:
        """Reasons that void the whole task: forbidden code, then what the worker's calls showed."""
        static = self.static.get(task, [])
        flags = [flag("forbidden_code", f"forbidden code in {self.rubric.tasks[task].file}: "
                      + "; ".join(static[:5]))] if static else []
        if self.memcheck.get(task):
            flags.append(flag("memory_errors", f"memory errors: compute-sanitizer reported "
                              f"{self.memcheck[task]} out-of-bounds or invalid accesses (the printed "
                              "output below names them)"))
        return flags + task_flags(self.evidence.get(task, []))

    def judge(self, spec: TestSpec) -> Verdict:
        """The verdict for ``spec``, task flags applied."""
        v = self.verdicts.get(spec.name)
        if v is None:
            return Verdict(False, "grader error: no verdict was reached for this test")
        if v.fraction is None:
            return v
        flags = self.flags(spec.task)
        if flags:
            return Verdict(False, "no points for this task: " + "; ".join(f["detail"] for f in flags),
                           0.0, v.details)
        return v


def _grade_task(state: GradingState, task: str, log) -> None:
    """Run every test of ``task`` that runs here and store its verdict."""
    rubric, device = state.rubric, state.device
    t = rubric.tasks[task]
    specs = [s for s in rubric.tests_for(task)]
    for spec in specs:
        if not state.runs_here(spec):
            why = "needs a CUDA GPU" if spec.kind == "performance" else "no CPU shape in the rubric"
            state.verdicts[spec.name] = not_run(why)
    if t.file not in state.sub.files:
        why = "; ".join(p for p in state.sub.problems if t.file in p) or f"{t.file} missing"
        for spec in specs:
            state.verdicts.setdefault(spec.name, Verdict(False, why))
        log(f"{task}: {t.file} missing, not graded")
        return
    if rubric.settings.static_checks:
        found = check_source(state.sub.files[t.file], set(rubric.settings.extra_allowed_imports))
        # A file that does not parse is reported by its import, with its line.
        state.static[task] = [str(f) for f in found if f.rule != "syntax"]
    timeout = rubric.settings.task_timeout_s if device == "cuda" else rubric.settings.cpu_task_timeout_s
    if state.task_budget_s is not None:   # a whole-run budget (Gradescope): this task's share of it
        timeout = min(timeout, state.task_budget_s)
    correctness = [s for s in specs if s.kind == "correctness" and state.runs_here(s)]
    performance = [s for s in specs if s.kind == "performance" and state.runs_here(s)]
    started = time.monotonic()
    evidence = state.evidence.setdefault(task, [])
    # Hidden tests get a worker of their own: the visible one never sees their shapes.
    groups = [[s for s in correctness if not s.hidden], [s for s in correctness if s.hidden]]
    visible = None
    cache = sandbox.task_dir("compile-cache-")   # shared by this task's workers only
    cache.chmod(0o777)
    sessions = []
    try:
        # Both workers start at once: their imports (torch, CUDA) overlap.
        sanitizer = state.sanitizer if device == "cuda" else None
        sessions = [Session(state.sub, t.file, t.entry, device, time.monotonic() + timeout, writable=[cache],
                            sanitizer=sanitizer) if group else None for group in groups]
        for group, session in zip(groups, sessions):
            if not group:
                continue
            log(f"{task}: {len(group)} correctness case(s) in a sandboxed worker ...")
            _check_import(state, t, session)
            for spec in group:
                state.verdicts[spec.name] = _correctness(state, session, spec, evidence)
            _compile_check(state, session, task, group, cache, log)
            if group is groups[0] or visible is None:
                visible = session   # times the performance tests (the hidden one if it is the only one)
            else:
                session.close()
                state.logs[task] = state.logs.get(task, "") + session.log_tail()
        if performance and state.sanitizer:
            for spec in performance:
                state.verdicts[spec.name] = not_run("correctness ran under compute-sanitizer")
        elif performance:
            _performance(state, task, performance, visible, timeout, log)
        _movement(state, task, visible, log)   # last: nothing scored follows it
    finally:
        for session in sessions:
            if session is not None and session is not visible:
                session.close()
        if visible is not None:
            visible.close()
            state.logs[task] = visible.log_tail() + state.logs.get(task, "")
        if state.sanitizer:
            errors = sum(s.sanitizer_errors() or 0 for s in sessions if s is not None)
            if errors:
                state.memcheck[task] = errors
        shutil.rmtree(cache, ignore_errors=True)
    state.seconds[task] = time.monotonic() - started
    log(f"{task}: done in {state.seconds[task]:.1f} s")


def _check_import(state: GradingState, t, session: Session) -> None:
    """Record why the task's worker is of no use if its kernel file did not import."""
    try:
        hello = session.hello
    except WorkerGone as e:
        state.gone[t.name] = str(e)
        return
    if not hello["ok"]:
        state.gone[t.name] = ("the kernel file could not be imported:\n"
                              + explain_error(hello.get("error", "")))


def _compile_check(state: GradingState, session: Session, task: str, group: list, cache, log) -> None:
    """Compile what the worker launched for the target GPU; a kernel that would not
    compile or launch there fails this group's tests, as it would on the GPU."""
    if state.gone.get(task) or not any(r.status == "ok" for _, r in state.evidence.get(task, [])):
        return
    left = session.deadline - time.monotonic()
    if left < 15:
        return
    log(f"{task}: compiling the launched kernels for the GPU (sm_90) ...")
    try:
        reply = session.request({"op": "compile", "budget_s": min(60.0, left - 10), "cache_dir": str(cache)})
    except WorkerGone as e:
        state.gone[task] = str(e)
        return
    rows = reply.get("compile", [])
    known = {(r.get("kernel"), r.get("line"), r.get("status"), r.get("registers")) for r in state.kernels.get(task, [])}
    state.kernels.setdefault(task, []).extend(
        r for r in rows if (r.get("kernel"), r.get("line"), r.get("status"), r.get("registers")) not in known)
    bad = [r for r in rows if r.get("status") == "error" or r.get("launchable") is False]
    if not bad:
        return
    r = bad[0]
    why = (f"compile error for the GPU: {r.get('error', '')}" if r.get("status") == "error" else
           f"would not launch on the GPU: kernel {r.get('kernel')} {r.get('why_not', '')}")
    for spec in group:
        if state.verdicts[spec.name].passed:
            state.verdicts[spec.name] = Verdict(False, "passed in the interpreter, but " + why)
    state.gone.setdefault(task, why)


def _movement(state: GradingState, task: str, session, log) -> None:
    """Count one call's data movement in the interpreter (CPU runs; feedback only)."""
    shape = state.rubric.tasks[task].movement_shape
    if (state.device != "cpu" or shape is None or session is None or state.gone.get(task)
            or not any(r.status == "ok" for _, r in state.evidence.get(task, []))):
        return
    if session.deadline - time.monotonic() < 20:
        state.movement[task] = {"shape": list(shape), "error": "not counted: the task's time limit is near"}
        return
    log(f"{task}: counting data movement at {list(shape)} in the interpreter ...")
    session.deadline = min(session.deadline, time.monotonic() + movement.TIMEOUT_S)
    state.movement[task] = movement.measure(session, "movement", task, shape, {},
                                            case_seed(state.seed, f"{task}/movement"))


def _correctness(state: GradingState, session: Session, spec: TestSpec, evidence: list) -> Verdict:
    """Two calls on two fresh draws of the case: a kernel that keeps state between
    calls (a cached output, a buffer it forgot to reset) fails the second."""
    shape = spec.shape_on(state.device)
    seed = case_seed(state.seed, spec.name)
    verdict = None
    for draw in range(2):
        if state.gone.get(spec.task):
            return Verdict(False, state.gone[spec.task])
        args, extras = make_inputs(spec.task, shape, spec.options, seed + draw, state.device)
        result = checked_call(session, f"case{len(evidence)}", args, (shape[0], shape[1]))
        if result.status == "gone":
            state.gone[spec.task] = result.message
        evidence.append((spec.name, result))
        verdict = judge_call(spec, result, args, extras)
        if not verdict.passed:
            if draw:
                verdict.message = ("the first call passed, the second on fresh inputs failed "
                                   "(does the kernel keep state between calls?): " + verdict.message)
            return verdict
    return verdict


def _performance(state: GradingState, task: str, specs: list[TestSpec], session, timeout: float, log) -> None:
    correct = all(state.judge(t).passed for t in state.rubric.tests_for(task, "correctness")
                  if not t.bonus and state.runs_here(t))
    if not correct or session is None or state.flags(task):
        for spec in specs:
            state.verdicts[spec.name] = Verdict(
                False, "not timed: performance counts only for a kernel that passes all of this "
                       "task's correctness tests")
        return
    session.deadline = time.monotonic() + timeout
    s = state.rubric.settings
    for i, spec in enumerate(specs):
        if state.gone.get(task):
            state.verdicts[spec.name] = Verdict(False, "not timed: " + state.gone[task])
            continue
        log(f"{task}: timing {spec.name} ...")
        try:
            timing = timed_batches(session, f"timed{i}", task, spec.shape, spec.options,
                                   case_seed(state.seed, spec.name), s.timing_rounds, s.timed_batch_ms,
                                   more_rounds=lambda tm, spec=spec: borderline(spec, tm))
        except WorkerGone as e:
            state.gone[task] = str(e)
            state.verdicts[spec.name] = Verdict(False, f"while timed: {e}")
            continue
        state.evidence[task].append((spec.name, CallResult("ok", evidence=timing.evidence)))
        state.verdicts[spec.name] = judge_timing(spec, timing, state.bandwidth_gbs)
        torch.cuda.empty_cache()


def _run_pytest(state: GradingState) -> dict:
    """Run grader/tests with the json-report plugin; return {test name: outcome}.

    Only this process's own plugin and pytest-json-report are loaded: no
    conftest.py, no plugin found by entry point or in a folder.
    """
    import os

    import pytest

    autoload = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "pytest.json"
            pytest.main([str(TESTS_DIR / "test_kernels.py"), "-q", "-p", "no:cacheprovider",
                         "--noconftest", "-p", "pytest_jsonreport.plugin", "--no-header", "--tb=no",
                         "-rN", "--json-report", f"--json-report-file={report}",
                         "--rootdir", str(TESTS_DIR), "-c", str(TESTS_DIR / "pytest.ini")],
                        plugins=[GradingPlugin(state)])
            data = json.loads(report.read_text()) if report.exists() else {"tests": []}
    finally:
        if autoload is None:
            os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = autoload
    outcomes = {}
    for t in data.get("tests", []):
        name = t["nodeid"].split("[", 1)[-1].rstrip("]")
        outcomes[name] = t.get("outcome", "error")
    return outcomes


def _summary(task: str, state: GradingState, flags: list[str]) -> str:
    t = state.rubric.tasks[task]
    if t.file not in state.sub.files:
        return next((p for p in state.sub.problems if t.file in p), "not graded")
    results = [r for _, r in state.evidence.get(task, [])]
    errors = [r.message for r in results if r.status == "error"]
    if errors and len(errors) == len(results) and all("NotImplementedError" in e for e in errors):
        return "not implemented (the stub raises NotImplementedError)"
    if flags:
        return "no points: " + flags[0]["detail"].split(":")[0]
    if state.gone.get(task):
        return state.gone[task]
    if results and len(errors) == len(results):
        return "every call raised an exception"
    return "ran to completion"


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
          log=print, sanitize: bool = False, budget_s: float | None = None) -> GradeResult:
    """Grade ``submission`` (folder or .zip) and return the result; never raises on a bad submission.

    ``sanitize`` (GPU): run the correctness cases under compute-sanitizer's
    memcheck, which names every out-of-bounds access; performance is not timed.
    ``budget_s``: the whole run's time limit; each task's workers get an equal
    share of what is left when it starts (never more than the rubric's limit).
    """
    started = time.time()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    seed = secrets.randbits(62) if seed is None else seed
    tasks = tasks or list(rubric.tasks)
    notes = []
    try:
        sub = load_submission(submission)
    except SubmissionError as e:
        sub = Submission(source=str(submission), problems=[str(e)])
        notes.append(f"submission unreadable: {e}")
    state = GradingState(rubric, sub, device, seed, tasks)
    if sanitize:
        state.sanitizer = _sanitizer(device)
        notes.append(f"compute-sanitizer memcheck: {state.sanitizer}; performance was not timed")
    notes.append("Triton use is judged from the kernel files (allowlist) and from what the worker "
                 "recorded; no trace from outside the worker exists on this machine, so flagged items "
                 "are for a TA to review.")
    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    warning = calibration_note(rubric.settings.calibrated_on, gpu)
    if warning:
        notes.append(warning)
    if device == "cuda":
        from .harness.timing import copy_bandwidth_gbs
        state.bandwidth_gbs = copy_bandwidth_gbs()
    else:
        notes.append("No CUDA GPU: correctness ran in the Triton interpreter on smaller shapes; "
                     "performance was not run, so this score is partial.")
    budget_end = None if budget_s is None else time.monotonic() + budget_s
    with _one_grader_per_gpu(device, log):
        for i, task in enumerate(tasks):
            if budget_end is not None:
                state.task_budget_s = max(1.0, (budget_end - time.monotonic()) / (len(tasks) - i))
            try:
                _grade_task(state, task, log)
            except Exception as e:  # a grader bug must cost one task, never the report
                why = f"grader error while grading {task}: {type(e).__name__}: {e}"
                log(why)
                notes.append(why)
                for spec in rubric.tests_for(task):
                    state.verdicts.setdefault(spec.name, Verdict(False, why))
    outcomes = _run_pytest(state)

    results = []
    for spec in state.selected_tests():
        v = state.judge(spec)
        if spec.name not in outcomes:
            v = Verdict(False, f"grader error: test {spec.name} did not run under pytest")
        results.append(resolve_test(spec, v.fraction, v.message, rubric.settings.points_step, v.details))
    task_results = []
    for task in tasks:
        mine = [r for r in results if r.task == task]
        flags = state.flags(task)
        ran = sum(r.max_score for r in mine if not r.bonus and r.status != "not_run")
        earned = sum(r.score for r in mine)
        task_results.append(TaskResult(
            task=task, title=rubric.tasks[task].title,
            score=min(earned, ran) if rubric.settings.cap_at_max else earned,
            max_score=ran, summary=_summary(task, state, flags),
            flags=flags, seconds=state.seconds.get(task, 0.0), log_tail=state.logs.get(task, "")[-4000:],
            kernels=state.kernels.get(task, []), movement=state.movement.get(task, {})))
    score, ran, everything = totals(rubric, results)
    return GradeResult(
        schema_version=SCHEMA_VERSION, submission=str(submission),
        started=dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(timespec="seconds"),
        seconds=round(time.time() - started, 1), device=device,
        gpu=gpu,
        versions={"sandbox": _sandbox_summary(device),
                  "python": platform.python_version(), "torch": torch.__version__,
                  "triton": triton.__version__, "cuda": torch.version.cuda},
        seed=seed, rubric=rubric.source, score=score, max_score=ran,
        max_score_all_tests=everything, partial=ran < everything, notes=notes,
        hidden_points=rubric.settings.hidden_points, rubric_hash=rubric.hash,
        gradescope_performance=rubric.settings.gradescope_performance,
        tasks=task_results, tests=results)
