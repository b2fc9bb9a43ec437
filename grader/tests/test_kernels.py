"""The graded tests: one per rubric entry, correctness before performance (a
task's performance tests need the verdicts of its correctness tests).

Run by the grader (python -m grader), which hands them the outputs its child
processes brought back; the judging itself is in grader/judge.py.
"""

import pytest


def test_rubric(spec, grading, record_property):
    verdict = grading.judge(spec)
    record_property("fraction", verdict.fraction)
    if verdict.fraction is None:
        pytest.skip(verdict.message)
    assert verdict.passed, verdict.message
