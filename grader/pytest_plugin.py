"""Hands the judge's state to the pytest run in grader/tests (same, trusted process)."""

from __future__ import annotations

import pytest


class GradingPlugin:
    def __init__(self, judging):
        self.judging = judging   # grader.judge.Judging

    @pytest.fixture
    def grading(self):
        return self.judging

    def pytest_generate_tests(self, metafunc):
        if "spec" in metafunc.fixturenames:
            specs = self.judging.selected_tests()
            metafunc.parametrize("spec", specs, ids=[t.name for t in specs])
