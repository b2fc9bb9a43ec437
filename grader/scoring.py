"""Graded results as documented dataclasses, and how verdicts become points.

``score(judgment, runs, rubric, ...)`` is the last step of a grade
(grader/grade.py): each verdict's fraction of its test's points, rounded to
the rubric's ``points_step``, and the total, bonus capped at the maximum when
the rubric says so. Rounding and the cap happen here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .rubric import Rubric, TestSpec
from .worker.fence import sentence

SCHEMA_VERSION = 1


@dataclass
class TestResult:
    """One rubric test. ``status``: passed | partial | failed | not_run."""
    name: str
    task: str
    kind: str
    score: float
    max_score: float
    status: str
    message: str
    visibility: str = "visible"
    bonus: bool = False
    details: dict = field(default_factory=dict)


@dataclass
class TaskResult:
    """One task's points over the tests that ran here (``bonus`` apart: the cap
    applies to the total), its state, and why it lost points as a whole (flags)."""
    task: str
    title: str
    score: float                # points of its scored (not bonus) tests
    max_score: float            # the most those could give here
    summary: str                # the state in words
    status: str = "ok"          # the state as a kind: ok, not_implemented, missing_file, missing_entry, import_error,
                                # timeout, crashed, exited_early, worker_ended, protocol_error,
                                # compile_error, raised, grader_error, or the first flag's kind
    bonus: float = 0.0          # points of its bonus tests
    flags: list[dict] = field(default_factory=list)  # {"kind": ..., "detail": ...}: why the task got no points
    seconds: float = 0.0
    log_tail: str = ""
    kernels: list = field(default_factory=list)   # compile check: one row per kernel variant
    # Data movement of one call, counted in the CPU interpreter (grader/harness/movement.py):
    # shape, tensors [{name, minimum, read, written}], minimum, moved, flops, min_flops,
    # programs, launch_count, launches [{kernel, grid, programs, loaded, stored, flops}],
    # output_wrong, error, seconds (the harness's clock). Feedback reported by the worker; never part of the score.
    movement: dict = field(default_factory=dict)
    # Checks of the worker that did not run for this task, one sentence each: which, what
    # that leaves unchecked, and why (grader/worker/fence.py).
    checks_off: list[str] = field(default_factory=list)
    # The predicted speed of each performance test on a CPU run (grader/estimate.py):
    # {"tests": {test: {"gpus": [{gpu, us, ratio, ratio_range, points, points_range, launches,
    # baseline_us, reference_us}], shape, min_bytes, flops} | {"error"}}, "uncertainty"}.
    # An estimate from what the worker reported; never part of the score.
    estimate: dict = field(default_factory=dict)


@dataclass
class GradeResult:
    """Everything a report needs. ``partial`` is true when some tests could not run here."""
    schema_version: int
    submission: str
    started: str
    seconds: float
    device: str
    gpu: str | None
    versions: dict
    seed: int
    rubric: str
    score: float
    max_score: float
    max_score_all_tests: float
    partial: bool
    notes: list[str]
    tasks: list[TaskResult]
    tests: list[TestResult]
    hidden_points: float = 0.0   # correctness points of the graded tasks' hidden tests not in this rubric
    rubric_hash: str = ""        # sha256 of the rubric file, first 12 hex digits: reports of another rubric stand out
    gradescope_performance: str = "omit"   # results.json: "omit" or "informational" performance tests not run
    calibrated_on: list = field(default_factory=list)   # the rubric's: GPUs its thresholds were placed on
    # How this run's toolchain differs from the grading one (grader/toolchain.py): every report's first lines.
    toolchain_warnings: list = field(default_factory=list)


def points_lines(result: GradeResult) -> list[str]:
    """The arithmetic of the total, in words: what ran here, what did not, and
    the bonus on its own, so the numbers add up to the handout's."""
    def fmt(x):
        return f"{x:g}"

    def part(kind, field):
        return sum(getattr(t, field) for t in result.tests if t.kind == kind and not t.bonus
                   and (field == "score" or t.status != "not_run"))

    c_got, c_ran = part("correctness", "score"), part("correctness", "max_score")
    c_all = sum(t.max_score for t in result.tests if t.kind == "correctness" and not t.bonus)
    line = f"correctness {fmt(c_got)}/{fmt(c_ran)}"
    elsewhere = []
    if c_all > c_ran:
        elsewhere.append(f"{fmt(c_all - c_ran)} in tests that do not run here")
    if result.hidden_points:
        elsewhere.append(f"{fmt(result.hidden_points)} in hidden tests only the TA runs")
    if elsewhere:
        line += f" (of {fmt(c_all + result.hidden_points)} in all: {' and '.join(elsewhere)})"
    lines = [line]
    p_all = sum(t.max_score for t in result.tests if t.kind == "performance" and not t.bonus)
    p_ran = part("performance", "max_score")
    if p_all and not p_ran:
        lines.append(f"performance {fmt(p_all)} needs a CUDA GPU: not run here")
    elif p_all:
        lines.append(f"performance {fmt(part('performance', 'score'))}/{fmt(p_ran)}")
    bonus = sum(t.score for t in result.tests if t.bonus)
    if bonus:
        lines.append(f"bonus +{fmt(bonus)} (makes up lost points, never past the maximum)")
    return lines


def round_to_step(value: float, step: float) -> float:
    return round(round(value / step) * step, 6) if step > 0 else value


def resolve_test(spec: TestSpec, fraction: float | None, message: str, step: float,
                 details: dict | None = None) -> TestResult:
    """Points for one test; ``fraction`` None means the test did not run here."""
    common = dict(name=spec.name, task=spec.task, kind=spec.kind, max_score=spec.points,
                  visibility=spec.visibility, bonus=spec.bonus, details=details or {})
    if fraction is None:
        return TestResult(score=0.0, status="not_run", message=message, **common)
    score = round_to_step(max(0.0, min(1.0, fraction)) * spec.points, step)
    status = "passed" if score >= spec.points else ("partial" if score > 0 else "failed")
    return TestResult(score=score, status=status, message=message, **common)


def totals(rubric: Rubric, tests: list[TestResult]) -> tuple[float, float, float]:
    """(score, max over tests that ran, max over all tests); bonus adds to score only,
    up to the maximum when the rubric caps it."""
    score = sum(t.score for t in tests)
    ran = sum(t.max_score for t in tests if not t.bonus and t.status != "not_run")
    everything = sum(t.max_score for t in tests if not t.bonus)
    if rubric.settings.cap_at_max:
        score = min(score, ran)
    return round(score, 6), ran, everything


def score(judgment, runs, rubric: Rubric, **header) -> GradeResult:
    """The GradeResult of a judged run (grader/judge.py's Judgment, grader/facts.py's
    Runs); ``header`` holds GradeResult's descriptive fields (submission, started,
    seconds, device, gpu, versions, notes)."""
    step = rubric.settings.points_step
    order = {"correctness": 0, "performance": 1}
    specs = sorted((t for t in rubric.tests if t.name in judgment.tests), key=lambda t: order[t.kind])
    tests = []
    for spec in specs:
        v = judgment.tests[spec.name]
        details = dict(v.details or {})
        # The product's size, for the roofline plot (grader/roofline.py); a hidden test's shape stays unknown.
        if spec.kind == "performance" and not spec.hidden:
            task = spec.registered_task
            details.setdefault("flops", task.dot_flops(spec.shape, task.defaults(spec.options)))
            details.setdefault("min_bytes", task.minimum_bytes(spec.shape, spec.options))
            details.setdefault("shape", list(spec.shape))
        tests.append(resolve_test(spec, v.fraction, v.message, step, details))
    tasks = []
    for name, run in runs.tasks.items():
        mine = [r for r in tests if r.task == name]
        state = judgment.tasks[name]
        tasks.append(TaskResult(
            task=name, title=rubric.tasks[name].title,
            score=round(sum(r.score for r in mine if not r.bonus), 6),
            max_score=sum(r.max_score for r in mine if not r.bonus and r.status != "not_run"),
            bonus=round(sum(r.score for r in mine if r.bonus), 6),
            summary=state.summary, status=state.status, flags=state.problems,
            seconds=run.seconds, log_tail=run.log[-4000:], kernels=run.kernels, movement=run.movement,
            checks_off=[sentence(check, why) for check, why in sorted(run.checks_off.items())],
            estimate=run.estimate))
    total, ran, everything = totals(rubric, tests)
    return GradeResult(
        schema_version=SCHEMA_VERSION, seed=runs.seed, rubric=rubric.source, score=total, max_score=ran,
        max_score_all_tests=everything, partial=ran < everything,
        hidden_points=sum(rubric.tasks[name].hidden_points for name in runs.tasks),
        rubric_hash=rubric.hash, gradescope_performance=rubric.settings.gradescope_performance,
        calibrated_on=list(rubric.settings.calibrated_on),
        tasks=tasks, tests=tests, **header)
