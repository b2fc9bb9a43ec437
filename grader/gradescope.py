"""Gradescope's run_autograder: grade /autograder/submission within a time budget, and always
leave a results.json.

    python -m grader.gradescope [--root /autograder] [--budget-s SECONDS]

Each task of the rubric is graded by a grade process of its own
(``python -m grader grade --tasks <task>``) with its own share of the
rubric's ``gradescope_budget_s``: a task that hangs, crashes or is killed
(the memory limit) costs its own points only, however slow the container,
because the next task starts with its full share. Each grade process runs
under the grader's process supervisor (grader/harness/proc.py): at its
deadline or when it ends, it and everything it started are killed. The
tasks' reports are merged into one results.json, scored as one grade (the
bonus cap applies to the total). Whatever happens to a task's process, its
tests are listed with 0 points and the reason; when no task could be graded
at all, one results.json says why, with the seed the student can reproduce
the run with. This process imports neither torch nor Triton, so it survives
what kills a grade.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from .harness import proc
from .report import gradescope as gradescope_results
from .rubric import DEFAULT_RUBRIC, RubricError, default_settings_raw, tomllib
from .scoring import SCHEMA_VERSION, GradeResult, TaskResult, TestResult

# After a task's share of the budget: time for its grade process to start (imports),
# judge and write its reports before it is killed. Its grading gets GRADE_SHARE of the share.
GRACE_S = 30
GRADE_SHARE = 0.8


def _settings_and_tests(rubric: Path) -> tuple[dict, dict, list[dict]]:
    """The rubric's [settings], [tasks.*] and [[tests]] as plain TOML data, read
    without validating the rubric (that imports torch; each grade validates it
    and says what is wrong)."""
    try:
        data = tomllib.loads(rubric.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}, {}, []
    pick = lambda v, t: v if isinstance(v, t) else t()  # noqa: E731
    tests = [t for t in pick(data.get("tests"), list) if isinstance(t, dict)]
    return pick(data.get("settings"), dict), pick(data.get("tasks"), dict), tests


UNREADABLE_BUDGET_S = 120   # no rubric can be read: the grade stops at once and says why; this bounds it


def budget_s(rubric: Path = DEFAULT_RUBRIC) -> float:
    """The rubric's ``gradescope_budget_s`` (or the shipped rubric's, its default, if missing or
    not a positive number), read without validating the rubric."""
    value = _settings_and_tests(rubric)[0].get("gradescope_budget_s")
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e6
    if ok:
        return float(value)
    try:
        return float(default_settings_raw()["gradescope_budget_s"])
    except RubricError:
        return UNREADABLE_BUDGET_S


def _fallback(reason: str, seed: int, seconds: float) -> dict:
    return {"score": 0.0, "execution_time": round(seconds),
            "output": (f"The autograder could not finish: {reason}. The score is 0 until this is fixed or a "
                       f"TA regrades. Seed {seed} (to reproduce: make grade SUBMISSION=<your folder> "
                       f"SEED={seed})."),
            "output_format": "text", "visibility": "visible", "stdout_visibility": "hidden",
            "extra_data": {"seed": seed, "grader_error": reason}, "tests": []}


def _report(path: Path) -> dict | None:
    """A task's report.json if it is a usable grade (not a grader error), else None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and "grader_error" not in data and isinstance(data.get("tests"), list) \
        and isinstance(data.get("tasks"), list) and isinstance(data.get("score"), (int, float))
    return data if ok else None


def _why(code: int | None, timed_out: bool, seconds: float, error: str = "") -> str:
    if timed_out:
        return f"the time limit of this task ({seconds:g} s on Gradescope) ran out"
    if error:
        return f"grader error: {error}"
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the grader was killed ({name}{', most likely out of memory' if name == 'SIGKILL' else ''})"
    return f"the grader exited with code {code} without a usable report"


def run_with_deadline(cmd: list[str], deadline_s: float) -> tuple[int | None, bool]:
    """Run one grade process under the grader's process supervisor (grader/harness/proc.py);
    past ``deadline_s`` it and everything it started are killed, and whatever it left when
    it ended goes with it. Returns (exit status, timed out). The one place this module
    runs a process."""
    p = proc.start(cmd, deadline_s=deadline_s)
    try:
        code = p.wait()
    finally:
        p.kill()
    return (None, True) if p.timed_out else (code, False)


def _lost_task(task: str, title: str, tests: list[dict], why: str) -> tuple[TaskResult, list[TestResult]]:
    """A task whose grade process gave no report: every test 0 with the reason
    (performance tests, which need a GPU, are not run here as always)."""
    results = []
    for t in tests:
        perf = t.get("kind") == "performance"
        results.append(TestResult(
            name=str(t.get("name", "?")), task=task, kind="performance" if perf else "correctness", score=0.0,
            max_score=float(t.get("points", 0)) if isinstance(t.get("points"), (int, float)) else 0.0,
            status="not_run" if perf else "failed",
            message="not run: needs a CUDA GPU" if perf else f"not graded: {why}",
            visibility=str(t.get("visibility", "visible")), bonus=t.get("bonus") is True))
    score_max = sum(r.max_score for r in results if not r.bonus and r.status != "not_run")
    return TaskResult(task=task, title=title, score=0.0, max_score=score_max, summary=f"no points: {why}",
                      status="timeout" if "time limit" in why else "grader_error"), results


def merge(reports: list[dict], lost: list[tuple[TaskResult, list[TestResult]]], cap_at_max: bool,
          seed: int, seconds: float) -> GradeResult:
    """One GradeResult of the tasks' reports and the lost tasks: tests and tasks
    side by side, the total scored as one grade's (bonus capped at the maximum
    of the tests that ran when the rubric says so)."""
    tasks, tests, notes, toolchain = [], [], [], []
    for r in reports:
        tasks += [TaskResult(**t) for t in r["tasks"]]
        tests += [TestResult(**t) for t in r["tests"]]
        notes += [n for n in r.get("notes", []) if n not in notes]
        toolchain += [n for n in r.get("toolchain_warnings", []) if isinstance(n, str) and n not in toolchain]
    for task, results in lost:
        tasks.append(task)
        tests += results
    order = {"correctness": 0, "performance": 1}
    tests.sort(key=lambda t: order.get(t.kind, 2))
    score = sum(t.score for t in tests)
    ran = sum(t.max_score for t in tests if not t.bonus and t.status != "not_run")
    everything = sum(t.max_score for t in tests if not t.bonus)
    if cap_at_max:
        score = min(score, ran)
    first = reports[0] if reports else {}
    return GradeResult(
        schema_version=SCHEMA_VERSION, submission=first.get("submission", "submission"),
        started=first.get("started", ""), seconds=round(seconds, 1), device=first.get("device", "cpu"),
        gpu=first.get("gpu"), versions=first.get("versions", {}), seed=seed, rubric=first.get("rubric", ""),
        score=round(score, 6), max_score=ran, max_score_all_tests=everything, partial=ran < everything,
        notes=notes, tasks=tasks, tests=tests, hidden_points=sum(r.get("hidden_points", 0) for r in reports),
        rubric_hash=first.get("rubric_hash", ""),
        gradescope_performance=first.get("gradescope_performance", "omit"),
        calibrated_on=first.get("calibrated_on", []), toolchain_warnings=toolchain)


def grade_command(root: Path, report_dir: Path, rubric: Path, seed: int, share: float,
                  task: str | None) -> list[str]:
    """The grade of ``root``/submission (``task`` only, or every task when None) within its
    ``share`` of the budget, GRADE_SHARE of it for grading (the rest: start-up and reports)."""
    return [sys.executable, "-m", "grader", "grade", str(root / "submission"), "--report-dir", str(report_dir),
            "--rubric", str(rubric), "--seed", str(seed), "--budget-s", f"{GRADE_SHARE * share:.0f}",
            *(["--tasks", task] if task else [])]


def run(root: Path, budget: float, seed: int, rubric: Path = DEFAULT_RUBRIC) -> dict:
    """Grade ``root``/submission task by task; the results.json to upload."""
    started = time.monotonic()
    settings, task_tables, tests = _settings_and_tests(rubric)
    names = [t for t in task_tables if isinstance(t, str)] or [None]   # None: one grade of everything
    share = budget / len(names)
    work = Path(tempfile.mkdtemp(prefix="gradescope-report-"))
    reports, lost, last_why = [], [], ""
    try:
        for name in names:
            report_dir = work / (name or "all")
            cmd = grade_command(root, report_dir, rubric, seed, share, name)
            code, timed_out = run_with_deadline(cmd, share + GRACE_S)
            report = None if timed_out else _report(report_dir / "report.json")
            if report is not None:
                reports.append(report)
                continue
            try:
                error = json.loads((report_dir / "report.json").read_text(encoding="utf-8")).get("grader_error", "")
            except (OSError, ValueError, AttributeError):
                error = ""
            last_why = _why(code, timed_out, share, str(error)[:500])
            if name is not None:
                title = task_tables[name].get("title", name) if isinstance(task_tables[name], dict) else name
                lost.append(_lost_task(name, str(title), [t for t in tests if t.get("task") == name], last_why))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds = time.monotonic() - started
    if not reports:
        return _fallback(last_why or "no task to grade", seed, seconds)
    cap = settings["cap_at_max"] if "cap_at_max" in settings else default_settings_raw()["cap_at_max"]
    return gradescope_results(merge(reports, lost, cap, seed, seconds))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.gradescope", description=__doc__)
    p.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"),
                   help="Gradescope's folder: submission/ in, results/results.json out (default /autograder)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="time budget of the whole run, shared equally by the tasks (default: the rubric's "
                        "gradescope_budget_s)")
    args = p.parse_args(argv)
    root = Path(args.root)
    seed = secrets.randbits(62)
    out = root / "results" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        results = run(root, args.budget_s or budget_s(), seed)
    except Exception as e:  # noqa: BLE001 - the bundle itself is broken: still a results.json
        results = _fallback(f"grader error: {type(e).__name__}: {e}", seed, 0.0)
    tmp = out.with_name(".results.json.tmp")
    tmp.write_text(json.dumps(results, indent=2), encoding="utf-8")
    os.replace(tmp, out)
    print(f"results.json: score {results.get('score')}; {str(results.get('output', ''))[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
