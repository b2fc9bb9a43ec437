"""Gradescope's run_autograder: grade /autograder/submission within a time budget, and always
leave a results.json.

    python -m grader.gradescope [--root /autograder] [--budget-s SECONDS]

The grade itself runs as a child process (``python -m grader grade``), under
the grader's process supervisor (grader/harness/proc.py: at the deadline or
when the grade ends, it and everything it started are killed), with the
rubric's ``gradescope_budget_s`` as its budget: each task gets a share of
what is left, so a hanging kernel costs its own task, and the run ends in
time. Whatever happens to that child (a crash, the memory limit, the budget
running out, a grader bug), this process writes a results.json that says
why, with the seed the student can reproduce the run with. It imports
neither torch nor Triton, so it survives what kills the grade.
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
from .rubric import DEFAULT_RUBRIC, RubricError, default_settings_raw, tomllib

GRACE_S = 20   # after the budget: time for the child to write its reports before it is killed


UNREADABLE_BUDGET_S = 120   # no rubric can be read: the grade stops at once and says why; this bounds it


def budget_s(rubric: Path = DEFAULT_RUBRIC) -> float:
    """The rubric's ``gradescope_budget_s`` (or the shipped rubric's, its default), read
    without validating the rubric (that imports torch; the grade validates it and says
    what is wrong)."""
    try:
        value = tomllib.loads(rubric.read_text(encoding="utf-8")).get("settings", {}).get("gradescope_budget_s")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError):
        value = None
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


def _readable(path: Path) -> dict | None:
    """The child's results.json if it is a JSON object with a numeric score, else None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and isinstance(data.get("score"), (int, float)) \
        and isinstance(data.get("tests", []), list)
    return data if ok else None


def _why(code: int | None, timed_out: bool, budget: float) -> str:
    if timed_out:
        return f"the time budget of {budget:g} s ran out"
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the grader was killed ({name}{', most likely out of memory' if name == 'SIGKILL' else ''})"
    return f"the grader exited with code {code} without a usable report"


def grade_command(root: Path, report_dir: Path, seed: int, budget: float) -> list[str]:
    """The grade of ``root``/submission, with 10 % of the budget kept for start-up and reports."""
    return [sys.executable, "-m", "grader", "grade", str(root / "submission"), "--report-dir", str(report_dir),
            "--seed", str(seed), "--budget-s", f"{0.9 * budget:.0f}"]


def run(root: Path, budget: float, seed: int) -> dict:
    """Grade ``root``/submission; the results.json to upload (the grader's, or a fallback)."""
    started = time.monotonic()
    report_dir = Path(tempfile.mkdtemp(prefix="gradescope-report-"))
    # The supervisor kills the grade, and whatever it left behind, at the deadline or when it ends.
    p = proc.start(grade_command(root, report_dir, seed, budget), deadline_s=budget + GRACE_S)
    try:
        code = p.wait()
    finally:
        p.kill()
    seconds = time.monotonic() - started
    results = None if p.timed_out else _readable(report_dir / "results.json")
    shutil.rmtree(report_dir, ignore_errors=True)
    return results if results is not None else _fallback(_why(code, p.timed_out, budget), seed, seconds)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.gradescope", description=__doc__)
    p.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"),
                   help="Gradescope's folder: submission/ in, results/results.json out (default /autograder)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="time budget of the whole run (default: the rubric's gradescope_budget_s)")
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
