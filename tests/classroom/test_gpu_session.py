"""tools/gpu_session.py's parts that need no GPU: the clock check (a grade's ratio
against the bench's for the same case), the candidate rubric, and stages that are
cut at their time limit keep what they wrote."""

from __future__ import annotations

import sys

from grader.rubric import load_rubric
from tools import gpu_session


def _bench_row(task, M, N, K, fp16, kernel, density=None):
    row = dict(task=task, M=M, N=N, K=K, times_ms={"fp16": fp16, "kernel": kernel})
    return row | ({"density": density} if density is not None else {})


def test_the_clock_check_compares_each_graded_case_with_the_bench():
    record = {
        "bench": [{"results": [_bench_row("dds", 65536, 1024, 1024, 0.1836, 0.1003, 0.05),
                               _bench_row("w8a8", 4096, 4096, 4096, 0.1860, 0.1382),
                               _bench_row("w8a8", 64, 4096, 4096, 0.0220, 0.0193)]}],
        "calibration": {"grades": {"reference": [{"tests": {
            "dds/perf_m65536_d5": {"kind": "performance", "ratio": 1.22},     # the old clock's figure
            "w8a8/perf_m4096": {"kind": "performance", "ratio": 1.30},
            "w8a8/perf_m1": {"kind": "performance", "ratio": 1.0}}}]}},   # no bench row for M = 1 here
    }
    check = gpu_session.clock_check(record)
    assert set(check) == {"dds/perf_m65536_d5", "w8a8/perf_m4096"}
    dds, w8a8 = check["dds/perf_m65536_d5"], check["w8a8/perf_m4096"]
    assert abs(dds["bench_ratio"] - 1.8305) < 1e-3 and dds["grade_ratios"] == [1.22]
    assert not dds["within_10_percent"]                  # 1.22 is 33 % below 1.83
    assert w8a8["within_10_percent"]                     # 1.30 vs 1.346: 3.4 % apart


def test_the_candidate_rubric_grades_the_commented_candidates(tmp_path):
    shipped = load_rubric()
    assert "dds/perf_m4096_d10" not in {t.name for t in shipped.tests}   # not graded as shipped
    path = gpu_session.candidate_rubric(tmp_path)
    rubric = load_rubric(path)
    extra = [t for t in rubric.tests if t.name not in {s.name for s in shipped.tests}]
    assert [(t.name, t.kind, t.shape, t.options) for t in extra] == [
        ("dds/perf_m4096_d10", "performance", (4096, 1024, 1024), {"density": 0.1})]


def test_a_stage_past_its_time_is_stopped_and_says_so(tmp_path):
    rc, seconds = gpu_session._run([sys.executable, "-c", "import time; print('started', flush=True); "
                                    "time.sleep(60)"], tmp_path / "log", timeout=2)
    assert rc == "timeout" and seconds < 30
    assert (tmp_path / "log").read_text().startswith("started")
    assert gpu_session._run([sys.executable, "-c", "pass"], tmp_path / "log", timeout=30)[0] == 0
