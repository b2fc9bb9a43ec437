"""Editing the rubric never breaks the project: in a copy of the repository, a TA changes a
performance threshold and the points of one test in grader/rubric.toml, runs `make docs`, and
the checks of `make test` that read the rubric stay green.

Before `make docs` the docs check fails and says to run it; after it, the regenerated docs
hold the new numbers. The checks run in the copy are those that read grader/rubric.toml and
run in reasonable time: the generated docs and the handout's totals, the rubric's validation
and defaults, the student bundle's rubric, the calibration rule on the recorded runs, and the
score guard on the reference (a full CPU grade of it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.rubric import load_rubric, set_values, tomllib

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ["tests/engine/test_docs.py", "tests/engine/test_rubric.py", "tests/engine/test_scoring.py",
          "tests/classroom/test_dist.py::test_public_rubric_filter_keeps_comments_and_totals",
          "tests/engine/test_calibrate.py::test_the_recorded_runs_give_the_placed_thresholds",
          "tests/engine/test_calibrate.py::test_the_calibration_entry_renders_in_the_docs",
          "tests/engine/test_grader.py::test_every_correctness_test_of_the_default_rubric_runs_on_the_cpu",
          "tests/engine/test_scores_unchanged.py::test_scores_are_what_they_were[reference]"]
SLOW = "not local_check_script"   # test_docs's handout script: it reads no rubric


def _copy_of_the_repository(dest: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _edit_rubric(repo: Path) -> tuple[str, float, str, float]:
    """A threshold and the points of one test changed, as a TA would (comments kept)."""
    path = repo / "grader" / "rubric.toml"
    text = path.read_text()
    rubric = load_rubric(path)
    perf = next(i for i, t in enumerate(rubric.tests) if t.kind == "performance")
    corr = next(i for i, t in enumerate(rubric.tests) if t.kind == "correctness" and not t.bonus)
    full = round(rubric.tests[perf].full_ratio - 0.05, 2)
    points = rubric.tests[corr].points + 2
    path.write_text(set_values(text, {(("tests", perf), "full_ratio"): full, (("tests", corr), "points"): points}))
    return rubric.tests[perf].name, full, rubric.tests[corr].name, points


@pytest.mark.slow
def test_a_threshold_and_points_changed_then_make_docs_keep_the_checks_green(tmp_path):
    repo = _copy_of_the_repository(tmp_path / "repo")
    perf, full, corr, points = _edit_rubric(repo)
    edited = tomllib.loads((repo / "grader" / "rubric.toml").read_text())
    assert {t["name"]: t for t in edited["tests"]}[corr]["points"] == points
    env = {**os.environ, "NO_VENV": "1", "PYTHON": sys.executable}

    stale = subprocess.run([sys.executable, "-m", "tools.render_results", "--check"], cwd=repo, env=env,
                           capture_output=True, text=True)
    assert stale.returncode == 1 and "run make docs" in stale.stdout, stale.stdout + stale.stderr

    made = subprocess.run(["make", "docs"], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    rubric = load_rubric(repo / "grader" / "rubric.toml")
    correctness = sum(t.points for t in rubric.tests if t.kind == "correctness" and not t.bonus)
    assert f"Correctness is {correctness:g}" in " ".join((repo / "handout.md").read_text().split())
    assert f"| {perf} | {full:g} |" in (repo / "docs" / "grading.md").read_text()

    checks = subprocess.run([sys.executable, "-m", "pytest", *CHECKS, "-k", SLOW, "-q", "-p", "no:cacheprovider"],
                            cwd=repo, env=env, capture_output=True, text=True, timeout=1800)
    assert checks.returncode == 0, checks.stdout[-4000:] + checks.stderr[-2000:]
    assert " passed" in checks.stdout and "deselected" in checks.stdout
