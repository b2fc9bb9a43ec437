"""The grader on small fake submissions: each fault costs exactly what it should,
with a message that says why; the reports are complete and well-formed.

The faults are fixture files (tests/fixtures/submissions/, tests/variants/):
complete student files whose docstrings say what the grader must make of them."""

import dataclasses
import json
import zipfile

import pytest

from grader.estimate_report import draw_plots
from grader.report import gradescope, markdown, write_reports
from grader.rubric import RubricError, load_rubric, parse_rubric
from tests.fakes import ROOT, SOLUTION, by_name, correctness, grade_files, submission
from tests.helpers import HAS_CUDA, scaled, validate_gradescope


def _correctness(result, task):
    return [t for t in result.tests if t.task == task and t.kind == "correctness"]


@pytest.mark.slow
def test_correct_submission_gets_full_correctness(tmp_path):
    result = grade_files(tmp_path, SOLUTION, ["w8a8", "w4a16", "dds"])
    for t in result.tests:
        if t.kind == "correctness":
            assert t.status == "passed", f"{t.name}: {t.message}"
    if not HAS_CUDA:
        perf = [t for t in result.tests if t.kind == "performance"]
        assert all(t.status == "not_run" and "needs a CUDA GPU" in t.message for t in perf)
        assert result.partial and result.score == result.max_score == 12
        assert any("partial" in n for n in result.notes)


@pytest.mark.slow
def test_unsigned_int4_unpack_fails_with_a_numeric_diff(tmp_path):
    # (word >> 4j) & 0xF: every nibble read as unsigned, in [0, 15].
    src = (ROOT / "tests" / "variants" / "w4a16_bug_unsigned_unpack.py").read_text()
    result = grade_files(tmp_path, {"w4a16": src}, ["w4a16"])
    for t in _correctness(result, "w4a16"):
        assert t.score == 0 and "differ beyond tolerance" in t.message and "first bad at" in t.message


@pytest.mark.slow
def test_missing_tail_mask_is_caught(tmp_path):
    # Loads along K without a mask: K = 96 and 64 are not multiples of BLOCK_K = 128,
    # so the tile reads past each row (the next row's values, or out of bounds).
    src = submission("w8a8_no_k_mask")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    assert correctness(result) == 0, [t.message for t in result.tests]


@pytest.mark.slow
def test_nan_output(tmp_path):
    src = submission("w8a8_nan_output")
    t = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"]))["w8a8/c0"]
    assert t.score == 0 and "NaN or Inf" in t.message and "(0, 0)" in t.message


@pytest.mark.slow
def test_wrong_dtype(tmp_path):
    src = submission("w8a8_float32_output")
    t = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"]))["w8a8/c0"]
    assert t.score == 0 and "dtype is torch.float32, expected torch.float16" in t.message


@pytest.mark.slow
def test_wrong_shape(tmp_path):
    src = submission("w8a8_wrong_shape")
    t = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"]))["w8a8/c0"]
    assert t.score == 0 and "output shape" in t.message


@pytest.mark.slow
def test_import_error_costs_only_that_task(tmp_path):
    files = dict(SOLUTION, w8a8="def w8a8_mm(:\n")
    result = grade_files(tmp_path, files, ["w8a8", "dds"])
    tasks = {t.task: t for t in result.tasks}
    assert tasks["w8a8"].score == 0 and "could not be imported" in tasks["w8a8"].summary
    assert "SyntaxError" in tasks["w8a8"].summary
    assert correctness(result, "dds") == 4


def test_missing_function(tmp_path):
    src = submission("w8a8_misnamed_entry")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    assert result.score == 0 and "w8a8_mm" in result.tasks[0].summary


def test_a_missing_entry_point_is_named_before_forbidden_code(tmp_path):
    """A dds.py without dds_mm (here with a PyTorch product too) is told that dds_mm is
    missing, not that its code is forbidden: there is nothing the grader can call."""
    src = "import torch\n\ndef my_dds(x, w):\n    return x @ w.to_dense().t()\n"
    result = grade_files(tmp_path, {"dds": src}, ["dds"])
    task = result.tasks[0]
    assert task.status == "missing_entry" and task.summary.startswith("dds.py defines no dds_mm")
    assert result.score == 0 and all("defines no dds_mm" in t.message for t in result.tests
                                    if t.task == "dds" and t.status != "not_run")


@pytest.mark.parametrize("src,found", [
    ("def w8a8_mm(x): pass", True), ("w8a8_mm = lambda *a: None", True),
    ("try:\n    import x\nexcept ImportError:\n    def w8a8_mm(): pass", True),
    ("if True:\n    w8a8_mm: object = None", True), ("from .other import w8a8_mm", True),
    ("def w8a8_matmul(): pass\nclass K:\n    w8a8_mm = 1", False), ("def w8a8_mm(:", None),
])
def test_entry_point_detection(src, found):
    from grader.harness.run import _defines
    assert _defines(src.encode(), "w8a8_mm") is found


@pytest.mark.slow
def test_missing_file(tmp_path):
    result = grade_files(tmp_path, {"dds": SOLUTION["dds"]}, ["w8a8", "dds"])
    tasks = {t.task: t for t in result.tasks}
    assert "w8a8.py not found" in tasks["w8a8"].summary and correctness(result, "dds") == 4


@pytest.mark.slow
def test_hang_is_killed_and_costs_only_that_task(tmp_path):
    files = dict(SOLUTION, w4a16=submission("w4a16_hangs"))
    # The limit must let the correct task finish on this machine now; the hang uses all of it.
    result = grade_files(tmp_path, files, ["w4a16", "dds"], timeout_s=scaled(15))
    tasks = {t.task: t for t in result.tasks}
    assert tasks["w4a16"].score == 0 and "time limit exceeded" in tasks["w4a16"].summary
    assert correctness(result, "dds") == 4


@pytest.mark.slow
def test_crash_is_reported(tmp_path):
    src = submission("w8a8_segfault")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False)
    assert result.score == 0 and "crashed (SIGSEGV)" in result.tasks[0].summary


@pytest.mark.slow
def test_exception_message_reaches_the_report(tmp_path):
    src = submission("w8a8_raises")
    t = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"]))["w8a8/c0"]
    assert "RuntimeError: my kernel broke" in t.message


def test_unreadable_zip_is_a_report_not_a_crash(tmp_path):
    bad = tmp_path / "student.zip"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    from grader.grade import grade
    from tests.fakes import rubric
    result = grade(bad, rubric(), seed=1, tasks=["dds"], log=lambda *_: None)
    assert result.score == 0 and result.tests


@pytest.mark.slow
def test_zip_submission_with_top_folder(tmp_path):
    z = tmp_path / "s.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("alice/dds.py", SOLUTION["dds"])
        zf.writestr("../evil.py", "x = 1")
    from grader.grade import grade
    from tests.fakes import rubric
    result = grade(z, rubric(), seed=1, tasks=["dds"], log=lambda *_: None)
    assert correctness(result) == 4


@pytest.mark.slow
def test_reports_and_gradescope_schema(tmp_path):
    result = grade_files(tmp_path, SOLUTION, ["dds"])
    out = write_reports(result, tmp_path / "report")
    gs = json.loads((out / "results.json").read_text())
    validate_gradescope(gs)
    full = json.loads((out / "report.json").read_text())
    assert full["schema_version"] == 1 and full["seed"] == 1234
    assert "Seed 1234" in gs["output"] and gs["extra_data"]["seed"] == 1234   # the student sees the seed
    md = (out / "report.md").read_text()
    assert "dds/c0" in md and "SEED=1234" in md
    plots = draw_plots(result, tmp_path / "again")   # what write_reports drew beside report.md
    assert markdown(result, None, plots) == md and gradescope(result)["score"] == gs["score"]


def test_gradescope_schema_refuses_what_the_spec_does_not_name():
    import jsonschema
    with pytest.raises(jsonschema.ValidationError):
        validate_gradescope({"score": 1, "max_score": 2})
    with pytest.raises(jsonschema.ValidationError):
        validate_gradescope({"tests": [{"score": 1, "status": "skipped"}]})


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["omit", "informational"])
def test_performance_not_run_is_never_a_failure_on_gradescope(tmp_path, mode):
    # On the CPU (as on Gradescope) performance does not run: left out with one line, or 0/0.
    result = grade_files(tmp_path, SOLUTION, ["dds"])
    result = dataclasses.replace(result, gradescope_performance=mode)
    perf = [t for t in result.tests if t.kind == "performance"]
    assert perf and all(t.status == "not_run" for t in perf)
    gs = gradescope(result)
    validate_gradescope(gs)
    listed = {t["name"]: t for t in gs["tests"]}
    for t in perf:
        if mode == "omit":
            assert t.name not in listed
        else:
            assert listed[t.name]["max_score"] == 0 and "status" not in listed[t.name]
    assert all(t["status"] == "passed" for t in gs["tests"] if "status" in t)
    assert "graded separately on a GPU" in gs["output"]
    assert gs["score"] == sum(t["score"] for t in gs["tests"])


def test_every_correctness_test_of_the_default_rubric_runs_on_the_cpu():
    # (its totals are the handout's: tests/engine/test_docs.py; make docs writes them there)
    assert all(t.cpu_shape for t in load_rubric().tests if t.kind == "correctness")


def test_rubric_errors_name_the_entry():
    with pytest.raises(RubricError, match=r"tests\[0\] \(x\): missing 'shape'"):
        parse_rubric({"schema_version": 1, "tasks": {"dds": dict(title="d", file="dds.py", entry="dds_mm")},
                      "tests": [dict(name="x", task="dds", kind="correctness", points=1)]})
    with pytest.raises(RubricError, match="zero_ratio < full_ratio"):
        parse_rubric({"schema_version": 1, "tasks": {"dds": dict(title="d", file="dds.py", entry="dds_mm")},
                      "tests": [dict(name="x", task="dds", kind="performance", points=1, shape=[1, 32, 32],
                                     full_ratio=0.5, zero_ratio=0.9)]})


def test_sanitize_needs_a_gpu_and_reads_the_error_count():
    import pytest as _pytest

    from grader.grade import _sanitizer
    from grader.harness.session import Session
    with _pytest.raises(SystemExit, match="needs a CUDA GPU"):
        _sanitizer("cpu")
    fake = type("S", (), {"log_tail": lambda self: "========= ERROR SUMMARY: 690 errors\n"
                          "========= ERROR SUMMARY: 670 errors were not printed.\n"})()
    assert Session.sanitizer_errors(fake) == 690
    fake.log_tail = lambda: "nothing printed"
    assert Session.sanitizer_errors(fake) is None
