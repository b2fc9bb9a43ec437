"""Partial credit, rounding, bonus capping and the borderline re-measure rule."""

import dataclasses

import pytest

from grader.facts import Timing
from grader.harness.run import borderline
from grader.rubric import TestSpec, default_settings, parse_rubric
from grader.scoring import resolve_test, round_to_step, totals


def _rubric(cap=True):
    tasks = {"dds": dict(title="d", file="dds.py", entry="dds_mm")}
    tests = [dict(name="c", task="dds", kind="correctness", points=10, shape=[1, 32, 32]),
             dict(name="b", task="dds", kind="correctness", points=4, shape=[1, 32, 32], bonus=True),
             dict(name="p", task="dds", kind="performance", points=8, shape=[1, 32, 32],
                  full_ratio=1.0, zero_ratio=0.5)]
    return parse_rubric({"schema_version": 1, "settings": {"cap_at_max": cap}, "tasks": tasks, "tests": tests})


@pytest.mark.parametrize("value,step,expected", [(3.13, 0.25, 3.25), (3.12, 0.25, 3.0), (7.0, 0.5, 7.0)])
def test_round_to_step(value, step, expected):
    assert round_to_step(value, step) == expected


def test_partial_credit_and_statuses():
    spec = _rubric().tests[2]
    assert resolve_test(spec, 1.0, "m", 0.25).status == "passed"
    half = resolve_test(spec, 0.5, "m", 0.25)
    assert (half.score, half.status) == (4.0, "partial")
    assert resolve_test(spec, 0.0, "m", 0.25).status == "failed"
    not_run = resolve_test(spec, None, "needs a GPU", 0.25)
    assert (not_run.score, not_run.status) == (0.0, "not_run")


@pytest.mark.parametrize("cap,expected", [(True, 10.0), (False, 12.0)])
def test_bonus_is_capped_at_the_maximum_of_tests_that_ran(cap, expected):
    r = _rubric(cap)
    results = [resolve_test(r.tests[0], 0.8, "", 0.25),   # 8 of 10
               resolve_test(r.tests[1], 1.0, "", 0.25),   # 4 bonus
               resolve_test(r.tests[2], None, "", 0.25)]  # performance not run (no GPU)
    score, ran, everything = totals(r, results)
    assert (score, ran, everything) == (expected, 10.0, 18.0)


def test_borderline_ratios_are_measured_again():
    spec = TestSpec("w8a8/p", "w8a8", "performance", 4, (1, 8, 8), full_ratio=1.0, zero_ratio=0.5)

    def at(ratio):
        return Timing(kernel_ms=[1 / ratio], baseline_ms=[1.0])

    settings = default_settings()           # grader/rubric.toml: borderline_margin 0.03
    assert borderline(spec, at(1.01), settings)       # 1% from full credit
    assert borderline(spec, at(0.51), settings)       # 2% from zero
    assert not borderline(spec, at(0.75), settings)   # in the middle: the linear part absorbs noise
    assert not borderline(spec, at(1.01), dataclasses.replace(settings, borderline_margin=0.005))
