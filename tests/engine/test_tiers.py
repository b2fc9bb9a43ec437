"""The fast tier holds no grade: a test that starts a grading worker without the
``slow`` mark fails, and says what to do (tests/conftest.py)."""

import os
import subprocess
import sys

from tests.fakes import ROOT

TIER_TESTS = '''
import pytest

from grader.harness import session


def _start():
    session.Session(None, "w8a8.py", "w8a8_mm", "cpu", 0.0)


def test_unmarked_grades():
    _start()


def test_unmarked_grades_and_swallows_the_refusal():
    try:
        _start()
    except RuntimeError:
        pass


@pytest.fixture(scope="module")
def graded_once():
    _start()


def test_unmarked_uses_a_module_fixture_that_grades(graded_once):
    pass


@pytest.mark.slow
def test_marked_grades(monkeypatch):
    def reached(prefix):
        raise LookupError("the worker's start was reached")
    monkeypatch.setattr(session.sandbox, "task_dir", reached)
    with pytest.raises(LookupError, match="was reached"):
        _start()


def test_unmarked_grades_nothing():
    assert 1 + 1 == 2
'''


def test_a_test_that_grades_without_the_slow_mark_fails_and_says_so(tmp_path):
    (tmp_path / "test_tier_cases.py").write_text(TIER_TESTS)
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="1000")   # whole lines in pytest's summary
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "-rA", "-q", "test_tier_cases.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    for unmarked in ("test_unmarked_grades", "test_unmarked_grades_and_swallows_the_refusal",
                     "test_unmarked_uses_a_module_fixture_that_grades"):
        lines = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))
                 and f"::{unmarked} " in line + " "]
        assert lines, f"{unmarked} did not fail:\n{out}"
        assert any("starts a grading worker" in line and "slow" in line for line in lines), lines
    assert "PASSED test_tier_cases.py::test_marked_grades" in out, out
    assert "PASSED test_tier_cases.py::test_unmarked_grades_nothing" in out, out
