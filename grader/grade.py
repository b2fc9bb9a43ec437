"""Grade one submission: run each task in a child, judge with pytest, score, report."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
import secrets
import tempfile
import time
from pathlib import Path

import torch
import triton

from .judge import Verdict, judge_correctness, judge_performance, task_flags
from .pytest_plugin import GradingPlugin
from .rubric import Rubric, TestSpec
from .runner import TaskRun, run_task
from .harness.inputs import make_inputs
from .staticcheck import check_source
from .scoring import SCHEMA_VERSION, GradeResult, TaskResult, resolve_test, totals
from .submission import Submission, SubmissionError, load_submission

TESTS_DIR = Path(__file__).with_name("tests")


def case_seed(master: int, test_name: str) -> int:
    """A per-test seed the child can use without learning the master seed."""
    digest = hashlib.blake2b(f"{master}:{test_name}".encode(), digest_size=7).digest()
    return int.from_bytes(digest, "little")


class GradingState:
    """What the pytest run needs: rubric, runs, baselines; verdicts are memoized."""

    def __init__(self, rubric: Rubric, sub: Submission, device: str, seed: int, tasks: list[str]):
        self.rubric, self.sub, self.device, self.seed, self.tasks = rubric, sub, device, seed, tasks
        self.runs: dict[str, TaskRun] = {}
        self.baselines: dict[str, float] = {}
        self.bandwidth_gbs = 0.0
        self.verdicts: dict[str, Verdict] = {}
        self.static: dict[str, list[str]] = {}

    def selected_tests(self) -> list[TestSpec]:
        order = {"correctness": 0, "performance": 1}
        chosen = [t for t in self.rubric.tests if t.task in self.tasks]
        return sorted(chosen, key=lambda t: order[t.kind])

    def runs_here(self, spec: TestSpec) -> bool:
        return spec.shape_on(self.device) is not None

    def flags(self, task: str) -> list[str]:
        """Reasons that void the whole task: forbidden code, then what the child saw."""
        static = self.static.get(task, [])
        flags = [f"forbidden code in {self.rubric.tasks[task].file}: " + "; ".join(static[:5])] if static else []
        return flags + (task_flags(self.runs[task]) if task in self.runs else [])

    def judge(self, spec: TestSpec) -> Verdict:
        if spec.name not in self.verdicts:
            self.verdicts[spec.name] = self._judge(spec)
        return self.verdicts[spec.name]

    def _judge(self, spec: TestSpec) -> Verdict:
        if not self.runs_here(spec):
            why = "needs a CUDA GPU" if spec.kind == "performance" else "no CPU shape in the rubric"
            return Verdict(False, f"not run: {why}", None)
        task = self.rubric.tasks[spec.task]
        if task.file not in self.sub.files:
            return Verdict(False, "; ".join(p for p in self.sub.problems if task.file in p)
                           or f"{task.file} missing")
        run = self.runs[spec.task]
        flags = self.flags(spec.task)
        if flags:
            return Verdict(False, "no points for this task: " + "; ".join(flags))
        seed = case_seed(self.seed, spec.name)
        if spec.kind == "correctness":
            return judge_correctness(spec, run, seed, self.device)
        correct = all(self.judge(t).passed for t in self.rubric.tests_for(spec.task, "correctness")
                      if not t.bonus and self.runs_here(t))
        return judge_performance(spec, run, seed, self.baselines[spec.name], self.bandwidth_gbs,
                                 correct)


def _measure_baselines(state: GradingState) -> None:
    from .harness.timing import copy_bandwidth_gbs

    state.bandwidth_gbs = copy_bandwidth_gbs()
    for spec in state.selected_tests():
        if spec.kind == "performance":
            state.baselines[spec.name] = _baseline_ms(spec, 2 * state.rubric.settings.timing_reps)
    torch.cuda.empty_cache()


def _baseline_ms(spec: TestSpec, reps: int) -> float:
    """fp16 torch.matmul on the test's shape (the dense weight for DDS), timed like the kernel."""
    from .harness.timing import median_ms

    args, extras = make_inputs(spec.task, spec.shape, spec.options, 0, "cuda")
    x, w_t = args[0], extras["weight"].t()
    return median_ms(lambda: torch.matmul(x, w_t), reps=reps)


def _job(state: GradingState, task: str) -> dict:
    cases = []
    for i, spec in enumerate(state.rubric.tests_for(task)):
        shape = spec.shape_on(state.device)
        if shape is None:
            continue
        cases.append(dict(index=i, name=spec.name, kind=spec.kind, shape=list(shape),
                          options=spec.options, seed=case_seed(state.seed, spec.name),
                          baseline_ms=state.baselines.get(spec.name),
                          full_ratio=spec.full_ratio, zero_ratio=spec.zero_ratio))
    s = state.rubric.settings
    return dict(task=task, device=state.device, cases=cases,
                timing_reps=s.timing_reps, timing_rounds=s.timing_rounds)


def _run_pytest(state: GradingState) -> dict:
    """Run grader/tests with the json-report plugin; return {test name: (outcome, message)}."""
    import pytest

    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "pytest.json"
        pytest.main([str(TESTS_DIR), "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                     "--no-header", "--tb=no", "-rN", "--json-report",
                     f"--json-report-file={report}", "--rootdir", str(TESTS_DIR)],
                    plugins=[GradingPlugin(state)])
        data = json.loads(report.read_text()) if report.exists() else {"tests": []}
    outcomes = {}
    for t in data.get("tests", []):
        name = t["nodeid"].split("[", 1)[-1].rstrip("]")
        outcomes[name] = t.get("outcome", "error")
    return outcomes


def _summary(task: str, state: GradingState, flags: list[str]) -> str:
    if task not in state.runs:
        return next((p for p in state.sub.problems if state.rubric.tasks[task].file in p), "not graded")
    run = state.runs[task]
    errors = [str(r.get("error", "")) for r in run.records.values() if r.get("status") == "error"]
    if errors and all("NotImplementedError" in e for e in errors):
        return "not implemented (the stub raises NotImplementedError)"
    if flags:
        return "no points: " + flags[0].split(":")[0]
    return run.failure_reason() or "ran to completion"


def grade(submission: str | Path, rubric: Rubric, seed: int | None = None,
          device: str | None = None, tasks: list[str] | None = None,
          log=print) -> GradeResult:
    """Grade ``submission`` (folder or .zip) and return the result; never raises on a bad submission."""
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
    if device == "cuda":
        log(f"measuring baselines on {torch.cuda.get_device_name()} ...")
        _measure_baselines(state)
    else:
        notes.append("No CUDA GPU: correctness ran in the Triton interpreter on smaller shapes; "
                     "performance was not run, so this score is partial.")
    for task in tasks:
        t = rubric.tasks[task]
        if t.file not in sub.files:
            log(f"{task}: {t.file} missing, not graded")
            continue
        if rubric.settings.static_checks:
            found = check_source(sub.files[t.file], set(rubric.settings.extra_allowed_imports))
            state.static[task] = [str(f) for f in found]
        job = _job(state, task)
        timeout = rubric.settings.task_timeout_s if device == "cuda" else rubric.settings.cpu_task_timeout_s
        log(f"{task}: running {len(job['cases'])} case(s) in a child process ...")
        state.runs[task] = run_task(sub, task, t.file, t.entry, job, timeout, device)
        log(f"{task}: done in {state.runs[task].seconds:.1f} s")
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
        run = state.runs.get(task)
        ran = sum(r.max_score for r in mine if not r.bonus and r.status != "not_run")
        earned = sum(r.score for r in mine)
        task_results.append(TaskResult(
            task=task, title=rubric.tasks[task].title,
            score=min(earned, ran) if rubric.settings.cap_at_max else earned,
            max_score=ran, summary=_summary(task, state, flags),
            flags=flags, seconds=run.seconds if run else 0.0, log_tail=run.log_tail[-4000:] if run else ""))
    score, ran, everything = totals(rubric, results)
    return GradeResult(
        schema_version=SCHEMA_VERSION, submission=str(submission),
        started=dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(timespec="seconds"),
        seconds=round(time.time() - started, 1), device=device,
        gpu=torch.cuda.get_device_name() if device == "cuda" else None,
        versions={"python": platform.python_version(), "torch": torch.__version__,
                  "triton": triton.__version__, "cuda": torch.version.cuda},
        seed=seed, rubric=rubric.source, score=score, max_score=ran,
        max_score_all_tests=everything, partial=ran < everything, notes=notes,
        tasks=task_results, tests=results)
