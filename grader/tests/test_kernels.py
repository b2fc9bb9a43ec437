"""The graded tests: one per rubric entry, correctness before performance.

Run by the grader (python -m grader), which hands them what its sandboxed
workers brought back. Each test reaches its entry's verdict (grader/judge.py),
records it for the scores, and asserts it: the outcome pytest reports is the
test's result.
"""

import pytest


def test_rubric(spec, grading, record_property):
    verdict = grading.verdict(spec)
    record_property("verdict", grading.recorded(verdict))
    if verdict.fraction is None:
        pytest.skip(verdict.message)
    assert verdict.passed, verdict.message
