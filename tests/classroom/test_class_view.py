"""What a TA sees of a class: summary.md and summary.html (per-test failures
with the most common likely cause, the distribution as a plot, what did not
run), the regrade history, and the small things a TA trips over: an empty
folder, a truncated zip, file modes, entries that are not submissions."""

import os
import stat
import zipfile
from pathlib import Path

import pytest

from classroom import batch
from grader.report import write_reports
from grader.rubric import load_rubric
from grader.submission import SubmissionError, load_submission
from tests.fakes import install_fake_grade, rubric_toml

FAKE = r'''
import sys
from pathlib import Path

sys.path.insert(0, ROOT)
sub, reports = Path(sys.argv[1]), Path(sys.argv[2])
kind = (sub / "kind").read_text().strip()
from grader.report import write_reports
from grader.scoring import GradeResult, TaskResult, TestResult
CAUSE = {"clamp": "likely cause: no clamp to [-127, 127] before the int8 cast (handout: \"Task 1\")",
         "mask": "likely cause: the K tail is not masked (handout: \"Task 1\")", "ok": ""}[kind]
c0 = 0.0 if kind != "ok" else 2.0
tests = [TestResult(name="w8a8/c0", task="w8a8", kind="correctness", score=c0, max_score=2,
                    status="passed" if c0 else "failed", message=f"max abs error 3\n{CAUSE}" if CAUSE else "ok"),
         TestResult(name="w8a8/c1", task="w8a8", kind="correctness", score=2, max_score=2, status="passed",
                    message="ok"),
         TestResult(name="w8a8/perf", task="w8a8", kind="performance", score=0, max_score=3, status="not_run",
                    message="not run: needs a CUDA GPU")]
score = c0 + 2
tasks = [TaskResult(task="w8a8", title="W8A8", score=score, max_score=4, summary="ran")]
write_reports(GradeResult(schema_version=1, submission=str(sub), started="2026-01-01T00:00:00+00:00",
                          seconds=0.1, device="cpu", gpu=None, versions={}, seed=7, rubric="r",
                          score=score, max_score=4, max_score_all_tests=7, partial=True, notes=[],
                          tasks=tasks, tests=tests), reports)
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    install_fake_grade(tmp_path, monkeypatch, FAKE, "log")
    rubric_path = tmp_path / "rubric.toml"
    rubric_path.write_text(rubric_toml(tasks=("w8a8",)))
    return load_rubric(rubric_path)


def _class(tmp_path: Path, kinds: dict) -> Path:
    folder = tmp_path / "subs"
    for name, kind in kinds.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "kind").write_text(kind)
    return folder


@pytest.mark.slow
def test_summary_names_the_tests_the_class_fails_and_why(tmp_path, fake):
    kinds = {"a": "clamp", "b": "clamp", "c": "mask", "d": "ok", "e": "clamp"}
    out = tmp_path / "out"
    assert batch.run_batch(str(_class(tmp_path, kinds)), str(out), fake) == 0
    md = (out / "summary.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| w8a8/c0"))
    assert "4/5 (80%)" in row and "no clamp to" in row and "(3)" in row    # most common: 3 of 4
    assert next(line for line in md.splitlines() if line.startswith("| w8a8/c1")).count("0/5 (0%)") == 1
    assert "performance  not run (no GPU)" in md                    # not a mean of zeros
    assert "performance: some of its 1 tests did not run for 5 of 5 graded students (needs a CUDA GPU" in md
    assert "5 totals are partial, out of 4: uploads leave them out unless --allow cpu-partial" in md
    assert "distribution of totals (% of the maximum, 4):" in md
    page = (out / "summary.html").read_text()
    assert "<table>" in page and "no clamp to [-127, 127]" in page and "80%" in page
    assert (out / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert '<img src="summary.png"' in page and "(plot: summary.png)" in md
    assert stat.S_IMODE((out / "summary.png").stat().st_mode) == 0o640


def test_summary_without_matplotlib_still_has_the_text_histogram(tmp_path, fake, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    out = tmp_path / "out"
    assert batch.run_batch(str(_class(tmp_path, {"a": "ok"})), str(out), fake) == 0
    assert not (out / "summary.png").exists() and "<img" not in (out / "summary.html").read_text()
    assert "100-110%" not in (out / "summary.md").read_text() and " 90-100%  # 1" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_a_regrade_keeps_the_previous_report_and_shows_old_and_new(tmp_path, fake, capsys):
    folder = _class(tmp_path, {"a": "clamp", "b": "ok"})
    out = tmp_path / "out"
    assert batch.run_batch(str(folder), str(out), fake) == 0
    first = (out / "students" / "a" / "report.json").read_bytes()
    (folder / "a" / "kind").write_text("ok")
    assert batch.run_batch(str(folder), str(out), fake, student="a") == 0
    assert (out / "history" / "a" / "1" / "report.json").read_bytes() == first
    assert sorted(p.name for p in (out / "history" / "a" / "1").iterdir()) == [
        "report.json", "report.md", "results.json"]
    md = (out / "summary.md").read_text()
    assert "a: 2/4 -> 4/4 (previous report of 2026-01-01T00:00:00+00:00)" in md
    assert "b:" not in md.split("regraded")[1].split("\n\n")[0]      # b was never regraded
    assert batch.run_batch(str(folder), str(out), fake, force=True) == 0
    assert sorted(p.name for p in (out / "history" / "a").iterdir()) == ["1", "2"]
    assert stat.S_IMODE((out / "history" / "a").stat().st_mode) == 0o750


def test_an_empty_submissions_folder_is_an_error_not_an_empty_class(tmp_path, fake, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".DS_Store").write_text("x")
    assert batch.run_batch(str(tmp_path / "empty"), str(tmp_path / "out"), fake) == 2
    err = capsys.readouterr().err
    assert "no submissions found" in err and "skipped .DS_Store: a hidden or system entry" in err
    assert not (tmp_path / "out" / "class.csv").exists()


def test_platform_downloads_warn_about_what_they_skip(tmp_path):
    from classroom.lms import layouts
    canvas = tmp_path / "canvas"
    canvas.mkdir()
    (canvas / "doejane_31_7001_w8a8.py").write_text("#")
    (canvas / ".DS_Store").write_text("x")
    moodle = tmp_path / "moodle"
    (moodle / "Ada Lovelace_501_assignsubmission_file_").mkdir(parents=True)
    (moodle / "Ada Lovelace_501_assignsubmission_file_" / "w8a8.py").write_text("#")
    (moodle / "Ada Lovelace_501_assignsubmission_onlinetext_").mkdir()
    (moodle / "__MACOSX").mkdir()
    for folder, expected in ((canvas, [".DS_Store: a hidden or system entry"]),
                             (moodle, ["Ada Lovelace_501_assignsubmission_onlinetext_: Moodle's onlinetext "
                                       "submission, not a file upload", "__MACOSX: a hidden or system entry"])):
        warnings = []
        layouts.read_layout(folder, warn=warnings.append)
        for e in expected:
            assert any(e in w for w in warnings), (e, warnings)


def test_a_truncated_zip_is_named_as_such(tmp_path):
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr("w8a8.py", "x = 1\n" * 2000)
    data = good.read_bytes()
    for name, payload in (("cut.zip", data[: len(data) // 2]), ("renamed.bin", data[:100])):
        (tmp_path / name).write_bytes(payload)
        with pytest.raises(SubmissionError, match=r"a truncated or corrupt \.zip file"):
            load_submission(tmp_path / name)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SubmissionError, match="not a folder or a .zip file"):
        load_submission(tmp_path / "notes.txt")


def test_reports_are_group_readable_only_as_readme_says(tmp_path):
    from tests.engine.test_report import _result  # a small GradeResult
    write_reports(_result("ok"), tmp_path / "grade-report")
    assert stat.S_IMODE((tmp_path / "grade-report").stat().st_mode) == 0o750
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "grade-report").iterdir()} == {0o640}
    os.chmod(tmp_path / "grade-report", 0o755)     # a folder the TA made is left as it is
    write_reports(_result("ok"), tmp_path / "grade-report")
    assert stat.S_IMODE((tmp_path / "grade-report").stat().st_mode) == 0o755
