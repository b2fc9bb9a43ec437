"""Batch grading: isolation per student, interruption and resume, the class CSV.

Most tests replace the grade command with a small fake (FAKE_GRADE) that
hangs, crashes, leaves processes behind or writes bad reports on request, so
that they run in seconds; one test runs the real grader end to end.
"""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from classroom import batch, grade_process, reports
from classroom.batch import find_entries, load_report, run_batch, student_id, write_class_files
from grader.rubric import load_rubric
from tests.fakes import ROOT, SOLUTION, install_fake_grade, rubric_toml, submission
from tests.helpers import HAS_CUDA, scaled

# ---------------------------------------------------------------------------- a fake grade command

FAKE_GRADE = r'''
"""Fake `grader grade`: argv = submission, report dir, pid folder. The
submission's file `mode` says what to do."""
import os, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, ROOT)
sub, reports, pids = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
(pids / f"grade-{os.getpid()}").touch()
mode = (sub / "mode").read_text().strip() if (sub / "mode").is_file() else "ok"


def escaper(new_session=True):
    """A process that keeps this one's stdout/stderr open and outlives it."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # fake-grade-leftover"],
                         start_new_session=new_session)
    (pids / f"left-{p.pid}").touch()


def write(score=1.0, flags=()):
    from grader.report import write_reports
    from grader.scoring import GradeResult, TaskResult, TestResult
    tests = [TestResult(name="w8a8/c0", task="w8a8", kind="correctness", score=score, max_score=2,
                        status="passed" if score == 2 else "partial", message="ok")]
    tasks = [TaskResult(task="w8a8", title="W8A8", score=score, max_score=2, summary="ran to completion",
                        flags=list(flags))]
    write_reports(GradeResult(schema_version=1, submission=str(sub), started="2026-01-01T00:00:00+00:00",
                              seconds=0.1, device="cpu", gpu=None, versions={}, seed=7, rubric="r",
                              score=score, max_score=2, max_score_all_tests=5, partial=True, notes=[],
                              tasks=tasks, tests=tests), reports)


if mode == "ok":
    write()
elif mode == "two":
    write(score=2.0)
elif mode == "hash":  # a report that records the rubric hash written in the submission's file `hash`
    import json
    write()
    data = json.loads((reports / "report.json").read_text())
    data["rubric_hash"] = (sub / "hash").read_text().strip()
    (reports / "report.json").write_text(json.dumps(data))
elif mode == "hang":
    escaper(new_session=False)
    escaper()
    time.sleep(60)
elif mode == "escape":
    escaper()
    write()
elif mode == "slow":
    (pids / f"started-{sub.name}").touch()
    escaper()
    time.sleep(1.0)
    write()
elif mode == "crash":
    print("Traceback (most recent call last):\nRuntimeError: grader broke", file=sys.stderr)
    sys.exit(3)
elif mode == "noreport":
    pass
elif mode == "badjson":
    write()
    (reports / "report.json").write_text("[" * 100000)
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Install FAKE_GRADE as the grade command; returns (rubric, pid folder)."""
    pids = install_fake_grade(tmp_path, monkeypatch, FAKE_GRADE, "pids")
    rubric_path = tmp_path / "rubric.toml"
    rubric_path.write_text(rubric_toml(tasks=("w8a8",)))
    return load_rubric(rubric_path), pids


def _students(tmp_path: Path, modes: dict) -> Path:
    subs = tmp_path / "subs"
    subs.mkdir(exist_ok=True)
    for name, mode in modes.items():
        d = subs / name
        d.mkdir()
        (d / "mode").write_text(mode)
    return subs


def _alive(pid: int) -> bool:
    """A process of this test (fake grader or its leftover) still exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and (b"fake_grade" in cmdline or b"fake-grade" in cmdline)


def _survivors(pids: Path) -> list[str]:
    names = [p.name for p in pids.iterdir() if p.name.startswith(("grade-", "left-"))]
    assert names, "the fake grader never ran"
    return [n for n in names if _alive(int(n.split("-")[1]))]


def _rows(out: Path) -> dict:
    return {r["id"]: r for r in csv.DictReader((out / "class.csv").open(encoding="utf-8"))}


def _complete(out: Path) -> None:
    """Only complete student folders: no temporary folder, no folder without all three reports."""
    for p in (out / "students").iterdir():
        assert not p.name.startswith("."), f"temporary folder left: {p.name}"
        assert sorted(f.name for f in p.iterdir()) == ["report.json", "report.md", "results.json"], p


# ---------------------------------------------------------------------------- student ids

HOSTILE_NAMES = ["a" * 250 + ".zip", os.fsdecode(b"\xff\xfe caf\xe9.zip"), "bob", "bob.zip", "Jos\u00e9.zip",
                 "=HYPERLINK(x).zip", "x\ny.zip", "-rf.zip", "alice", "john.smith"]


def _hostile_folder(tmp_path: Path) -> Path:
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in HOSTILE_NAMES:
        if "." in name[-4:]:
            (subs / name).write_bytes(b"PK\x03\x04 not a zip")
        else:
            (subs / name).mkdir()
    return subs


def test_student_ids_are_safe_unique_bounded_and_stable(tmp_path):
    subs = _hostile_folder(tmp_path)
    entries = find_entries(subs)
    ids = [e.sid for e in entries]
    assert len(entries) == len(HOSTILE_NAMES) and len(set(ids)) == len(ids)
    for sid in ids:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", sid), sid
    by_name = {e.original: e for e in entries}
    assert by_name["alice"].sid == "alice" and by_name["john.smith"].sid == "john.smith"
    assert by_name["bob"].duplicate and by_name["bob.zip"].duplicate and by_name["bob"].sid != "bob"
    assert [e.sid for e in find_entries(subs)] == ids  # the same ids on resume
    assert student_id("bob", is_file=False) == "bob" and student_id("bob.zip") == "bob"
    assert student_id("a/b") != student_id("a_b")  # cleaning alone never merges two names


@pytest.mark.slow
def test_hostile_file_names_cannot_stop_the_batch_or_the_csv(tmp_path, fake, monkeypatch):
    rubric, _ = fake
    _hostile_folder(tmp_path)
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)  # relative folders, while grade processes run in ROOT
    assert run_batch("subs", "out", rubric) == 0
    _complete(out)
    rows = list(csv.DictReader((out / "class.csv").open(encoding="utf-8")))
    assert len(rows) == len(HOSTILE_NAMES)
    originals = {r["original_name"] for r in rows}
    assert "\\xff\\xfe caf\\xe9.zip" in originals and "a" * 250 + ".zip" in originals and "x\\x0ay.zip" in originals
    assert "'=HYPERLINK(x).zip" in originals and "'-rf.zip" in originals  # never a spreadsheet formula
    assert all(r["total"] for r in rows)


@pytest.mark.slow
def test_real_grader_with_long_and_undecodable_names(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / ("a" * 250 + ".zip")).write_bytes(b"PK\x03\x04 not a zip")
    (subs / os.fsdecode(b"\xff\xfe.zip")).write_bytes(b"PK\x03\x04 not a zip")
    rubric_path = tmp_path / "rubric.toml"
    rubric_path.write_text(rubric_toml(tasks=("w8a8",)))
    out = tmp_path / "out"
    assert run_batch(str(subs), str(out), load_rubric(rubric_path)) == 0
    _complete(out)
    rows = list(csv.DictReader((out / "class.csv").open(encoding="utf-8")))
    assert len(rows) == 2 and all("unreadable" in r["flags"] and float(r["total"]) == 0 for r in rows), rows
    assert {r["original_name"] for r in rows} == {"a" * 250 + ".zip", "\\xff\\xfe.zip"}


# ---------------------------------------------------------------------------- processes

@pytest.mark.slow
def test_timeout_kills_the_whole_tree_and_leftovers_do_not_stall_later_students(tmp_path, fake):
    rubric, pids = fake
    subs = _students(tmp_path, {"a_hang": "hang", "b_escape": "escape", "c_ok": "ok"})
    out = tmp_path / "out"
    limit = scaled(3)   # the fake grader's start-up on this machine now, for b and c
    start = time.monotonic()
    assert run_batch(str(subs), str(out), rubric, timeout_s=limit) == 0
    assert time.monotonic() - start < scaled(30)  # the escaped holder of b's output did not make b wait for it
    assert _survivors(pids) == []
    _complete(out)
    rows = _rows(out)
    assert rows["a_hang"]["flags"] == "grader_error" and f"longer than {limit:g} s" in rows["a_hang"]["error"]
    assert rows["b_escape"]["total"] == "1.0" and rows["c_ok"]["total"] == "1.0"
    report = json.loads((out / "students" / "a_hang" / "report.json").read_text())
    assert report["score"] == 0 and "longer than" in report["grader_error"]


@pytest.mark.parametrize("mode, reason", [("crash", "exited with code 3: RuntimeError: grader broke"),
                                          ("noreport", "wrote no report.md, report.json, results.json"),
                                          ("badjson", "report.json unusable: not valid JSON")])
def test_a_failed_grade_is_a_grader_error_in_every_format(tmp_path, fake, mode, reason):
    rubric, _ = fake
    subs = _students(tmp_path, {"s": mode, "t": "ok"})
    out = tmp_path / "out"
    assert run_batch(str(subs), str(out), rubric) == 0
    _complete(out)
    folder = out / "students" / "s"
    report = json.loads((folder / "report.json").read_text())
    assert report["score"] == 0 and reason in report["grader_error"]
    results = json.loads((folder / "results.json").read_text())
    assert results["score"] == 0 and results["output"].startswith("Grader error:") and reason in results["output"]
    md = (folder / "report.md").read_text()
    assert "Grader error" in md and "# Grade report: 0 /" in md
    row = _rows(out)["s"]
    assert row["flags"] == "grader_error" and reason in row["error"] and row["total"] == "0"
    assert _rows(out)["t"]["total"] == "1.0"
    # Retried on resume; finished students are not.
    before = (out / "students" / "t" / "report.json").read_bytes()
    (subs / "s" / "mode").write_text("ok")
    assert run_batch(str(subs), str(out), rubric) == 0
    assert _rows(out)["s"]["total"] == "1.0" and (out / "students" / "t" / "report.json").read_bytes() == before


def test_a_stop_signal_during_clean_up_waits_for_it(tmp_path, fake, monkeypatch):
    rubric, pids = fake
    subs = _students(tmp_path, {"a": "escape", "b": "ok"})
    real_install = grade_process._install

    def sigterm_then_install(*args):
        os.kill(os.getpid(), signal.SIGTERM)   # arrives while a's folder is being installed
        real_install(*args)
    monkeypatch.setattr(grade_process, "_install", sigterm_then_install)
    out = tmp_path / "out"
    assert run_batch(str(subs), str(out), rubric) == 128 + signal.SIGTERM
    assert _survivors(pids) == []
    _complete(out)                                   # the installation ran to its end first
    assert _rows(out)["a"]["total"] == "1.0" and _rows(out)["b"]["flags"] == "not_graded"


BATCH_WITH_FAKE = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even if started in the background
sys.path.insert(0, {root!r})
import classroom.batch as b
b.grade_command = lambda path, reports, rubric: [sys.executable, {script!r}, str(path), str(reports), {pids!r}]
from classroom.cli import main
sys.exit(main(["batch", {subs!r}, "--out", {out!r}, "--rubric", {rubric!r}, "--jobs", "1", *{extra!r}]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_the_batch_cleanly_and_resume_finishes(tmp_path, fake, signum):
    rubric, pids = fake
    names = ["s0", "s1", "s2"]
    subs = _students(tmp_path, {n: "slow" for n in names})
    out = tmp_path / "out"
    code = BATCH_WITH_FAKE.format(root=str(ROOT), script=str(tmp_path / "fake_grade.py"), pids=str(pids),
                                  subs=str(subs), out=str(out), rubric=rubric.source, extra=[])
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + scaled(60)
        while time.time() < deadline and not (pids / "started-s1").exists():
            time.sleep(0.05)
        assert (pids / "started-s1").exists(), "the batch did not reach its second student"
        proc.send_signal(signum)  # while s1 is being graded
        assert proc.wait(timeout=30) == 128 + signum
        assert _survivors(pids) == []
        _complete(out)
        done = {p.parent.name: p.read_bytes() for p in (out / "students").glob("*/report.json")}
        assert set(done) == {"s0"}
        assert _rows(out)["s1"]["flags"] == "not_graded"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert run_batch(str(subs), str(out), rubric) == 0
    assert all(_rows(out)[n]["total"] == "1.0" for n in names)
    assert (out / "students" / "s0" / "report.json").read_bytes() == done["s0"]
    assert _survivors(pids) == []


# ---------------------------------------------------------------------------- class files

def _report(**change) -> dict:
    report = {"score": 3, "max_score": 4, "partial": True, "seed": 1, "gpu": None, "started": "2026-01-01",
              "notes": [], "tests": [{"kind": "correctness", "score": 3}],
              "tasks": [{"task": "w8a8", "score": 3, "summary": "ran to completion", "flags": []}]}
    report.update(change)
    return report


HOSTILE_REPORTS = {
    "corrupt": b'{"score": 1,',
    "huge": json.dumps(_report(pad="x" * reports.REPORT_JSON_BYTES)).encode(),  # valid but for its size
    "deep": b"[" * 200_000 + b"]" * 200_000,
    "deep_dict": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "string_score": json.dumps(_report(score="100")).encode(),
    "nan_score": json.dumps(_report(score=float("nan"))).encode(),
    "bool_max": json.dumps(_report(max_score=True)).encode(),
    "tasks_not_list": json.dumps(_report(tasks=5)).encode(),
    "test_not_dict": json.dumps(_report(tests=["x"])).encode(),
    "flag_wrong_type": json.dumps(_report(tasks=[{"task": "w8a8", "score": 1, "summary": "", "flags": [7]}])).encode(),
    "list": b"[1, 2]",
    "not_utf8": b'{"score": "\xff"}',
    "too_many_tests": json.dumps(_report(tests=[{"kind": "correctness", "score": 0}] * 10_001)).encode(),
}


def test_class_files_survive_any_report_json(tmp_path):
    out = tmp_path / "out"
    entries = []
    for sid, data in {**HOSTILE_REPORTS, "good": json.dumps(_report()).encode()}.items():
        (out / "students" / sid).mkdir(parents=True)
        (out / "students" / sid / "report.json").write_bytes(data)
        entries.append(batch.Entry(sid, tmp_path / sid, sid))
    (out / "students" / "link").mkdir()
    (out / "students" / "link" / "report.json").symlink_to("/dev/zero")  # never followed
    entries.append(batch.Entry("link", tmp_path / "link", "link"))
    entries.append(batch.Entry("absent", tmp_path / "absent", "absent"))
    rows = {r["id"]: r for r in write_class_files(out, entries, ["w8a8"])}
    for sid in [*HOSTILE_REPORTS, "link"]:
        assert rows[sid]["flags"] == "grader_error" and rows[sid]["error"].startswith("report.json unusable"), sid
    assert rows["good"]["total"] == 3 and rows["good"]["w8a8"] == 3 and rows["absent"]["flags"] == "not_graded"
    assert len(_rows(out)) == len(entries) and "1 of" in (out / "summary.md").read_text()


def test_flags_come_from_kinds_never_from_sentences(tmp_path):
    def flags(tasks, notes=()):
        path = tmp_path / "r.json"
        path.write_text(json.dumps(_report(tasks=tasks, notes=list(notes))))
        return reports._flags(load_report(path))
    new = [{"task": "w8a8", "score": 0, "summary": "no points", "status": "library_matmul", "flags": [
        {"kind": "library_matmul", "detail": "calls torch.matmul"}, {"kind": "Bad Kind!"}, {"kind": 3}]},
           {"task": "dds", "score": 0, "summary": "time limit exceeded", "status": "timeout", "flags": []},
           {"task": "w4a16", "score": 5, "summary": "ran to completion", "status": "ok", "flags": []}]
    assert flags(new) == ["library_matmul", "timeout"]
    # Rewording a sentence changes no column: text is never read.
    worded = [{"task": "w8a8", "score": 0, "summary": "time limit exceeded; forbidden code; not implemented",
               "flags": [{"kind": "forbidden_code", "detail": "library matmul, no Triton kernel"}]}]
    assert flags(worded, ["submission unreadable: x.zip"]) == ["forbidden_code"]


# ---------------------------------------------------------------------------- over a semester

def test_files_that_are_not_submissions_are_skipped_with_a_warning(tmp_path, fake, capsys):
    rubric, _ = fake
    subs = _students(tmp_path, {"alice": "ok"})
    (subs / "bob.ZIP").write_bytes(b"PK\x03\x04 not a zip")  # a zip, whatever the case of its extension
    for stray in ("late_days.txt", ".DS_Store", "notes.md"):
        (subs / stray).write_text("x")
    (subs / "__MACOSX").mkdir()
    out = tmp_path / "out"
    assert run_batch(str(subs), str(out), rubric) == 0
    assert set(_rows(out)) == {"alice", "bob"}
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: skipped")]
    assert len(warnings) == 4 and all(any(n in w for w in warnings)
                                      for n in ("late_days.txt", ".DS_Store", "notes.md", "__MACOSX"))


def test_class_csv_has_bonus_apart_from_correctness_and_the_rubric_hash(tmp_path):
    out = tmp_path / "out"
    tests = [{"kind": "correctness", "score": 3}, {"kind": "correctness", "score": 2, "bonus": True},
             {"kind": "performance", "score": 1.5}, {"kind": "performance", "score": 0.5, "bonus": True}]
    reports = {"new": _report(tests=tests, score=4, rubric_hash="0123456789ab"),
               "old": _report(), "error": {"grader_error": "boom", "score": 0, "rubric_hash": "0123456789ab"}}
    entries = []
    for sid, report in reports.items():
        (out / "students" / sid).mkdir(parents=True)
        (out / "students" / sid / "report.json").write_text(json.dumps(report))
        entries.append(batch.Entry(sid, tmp_path / sid, sid))
    write_class_files(out, entries, ["w8a8"])
    header = (out / "class.csv").read_text().splitlines()[0].split(",")
    for column in ("total", "max", "correctness", "bonus", "performance", "w8a8", "flags", "graded_at",
                   "rubric_hash", "device"):
        assert column in header
    rows = _rows(out)
    new = rows["new"]
    assert (new["correctness"], new["bonus"], new["performance"], new["total"]) == ("3", "2.5", "1.5", "4")
    assert new["rubric_hash"] == "0123456789ab" and rows["error"]["rubric_hash"] == "0123456789ab"
    assert rows["old"]["rubric_hash"] == "" and rows["old"]["bonus"] == "0"  # older reports have no hash


def test_reports_made_under_another_rubric_are_listed(tmp_path, fake, capsys):
    rubric, _ = fake
    subs = _students(tmp_path, {"alice": "hash", "bob": "hash", "carol": "hash", "dave": "ok"})
    for name, digest in {"alice": "aaaaaaaaaaaa", "bob": "bbbbbbbbbbbb", "carol": rubric.hash}.items():
        (subs / name / "hash").write_text(digest)
    out = tmp_path / "out"
    assert rubric.hash and run_batch(str(subs), str(out), rubric) == 0
    line = ("2 reports were made under an older rubric: alice, bob; regrade them with --force "
            "or make regrade STUDENT=id")
    assert line in capsys.readouterr().out and line in (out / "summary.md").read_text()
    assert _rows(out)["carol"]["rubric_hash"] == rubric.hash


@pytest.mark.slow
def test_one_student_is_regraded_by_id_or_by_file_name(tmp_path, fake, capsys):
    from classroom.cli import main
    rubric, _ = fake
    subs = _students(tmp_path, {"alice": "ok", "bob": "ok"})
    (subs / "carol.zip").write_bytes(b"PK\x03\x04 not a zip")
    out = tmp_path / "out"
    assert run_batch(str(subs), str(out), rubric) == 0
    before = {sid: (out / "students" / sid / "report.json").read_bytes() for sid in ("alice", "carol")}
    (subs / "bob" / "mode").write_text("two")
    (subs / "alice" / "mode").write_text("two")  # changed too, but not asked for: stays as it was
    args = ["batch", str(subs), "--out", str(out), "--rubric", rubric.source]
    assert main([*args, "--student", "bob"]) == 0
    assert _rows(out)["bob"]["total"] == "2.0" and _rows(out)["alice"]["total"] == "1.0"
    assert (out / "students" / "alice" / "report.json").read_bytes() == before["alice"]
    mtime = (out / "students" / "carol" / "report.json").stat().st_mtime_ns
    time.sleep(0.01)
    assert main(["regrade", str(subs), "carol.zip", "--out", str(out), "--rubric", rubric.source]) == 0  # by name
    assert (out / "students" / "carol" / "report.json").stat().st_mtime_ns > mtime
    capsys.readouterr()
    assert main([*args, "--student", "zed"]) == 2
    assert "no submission 'zed'" in capsys.readouterr().err
    assert set(_rows(out)) == {"alice", "bob", "carol"}


def test_the_engine_points_classroom_commands_to_the_classroom(capsys):
    from grader.cli import main as grader_main
    for command in ("batch", "regrade", "gradebook", "merge"):
        assert grader_main([command, "submissions"]) == 2
        assert f"python -m classroom {command}" in capsys.readouterr().err


@pytest.mark.slow
def test_an_interrupted_force_run_is_finished_on_resume_without_force(tmp_path, fake):
    rubric, pids = fake
    names = ["s0", "s1", "s2", "s3"]
    subs = _students(tmp_path, {n: "ok" for n in names})
    out = tmp_path / "out"
    assert run_batch(str(subs), str(out), rubric) == 0  # everyone graded once
    for n in names:
        (subs / n / "mode").write_text("slow")
    code = BATCH_WITH_FAKE.format(root=str(ROOT), script=str(tmp_path / "fake_grade.py"), pids=str(pids),
                                  subs=str(subs), out=str(out), rubric=rubric.source, extra=["--force"])
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + scaled(60)
        while time.time() < deadline and not (pids / "started-s2").exists():
            time.sleep(0.05)
        assert (pids / "started-s2").exists(), "the --force run did not reach its third student"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    marker = out / batch.FORCE_MARKER
    since = marker.stat().st_mtime_ns
    assert json.loads(marker.read_text())["rubric_hash"] == rubric.hash
    mtimes = {n: (out / "students" / n / "report.json").stat().st_mtime_ns for n in names}
    assert mtimes["s0"] >= since > mtimes["s3"]  # mixed: the state a plain resume must not accept
    graded_by_force = (out / "students" / "s0" / "report.json").read_bytes()
    assert run_batch(str(subs), str(out), rubric) == 0  # no --force
    for n in names:
        assert (out / "students" / n / "report.json").stat().st_mtime_ns >= since, n
    assert (out / "students" / "s0" / "report.json").read_bytes() == graded_by_force
    assert (out / "students" / "s0" / "report.json").stat().st_mtime_ns == mtimes["s0"]  # not graded twice
    assert not marker.exists()
    assert _survivors(pids) == []


# ---------------------------------------------------------------------------- end to end, real grader

def _class(tmp_path: Path) -> Path:
    subs = tmp_path / "subs"
    subs.mkdir()
    students = {
        "alice": SOLUTION["dds"],                                               # correct: 4 points
        "carol": submission("dds_raises_memory_error"),                         # crashes in every call
        "dave": submission("dds_hangs"),                                         # hangs
        "frank": "def dds_mm(x, w):\n    return x\n",                             # no kernel at all
    }
    for sid, src in students.items():
        (subs / sid).mkdir()
        (subs / sid / "dds.py").write_text(src)
    (subs / "eve.zip").write_bytes(b"PK\x03\x04 truncated")                   # corrupt zip
    (subs / "empty").mkdir()                                                  # empty folder
    return subs


EXPECTED = {"alice": 4.0, "carol": 0.0, "dave": 0.0, "eve": 0.0, "empty": 0.0, "frank": 0.0}
EXPECTED_FLAGS = {"dave": "timeout", "eve": "unreadable", "empty": "missing_file"}


def _finished(out: Path) -> dict:
    """Finished students (their folder has a report.json); in-progress temp folders start with '.'."""
    return {p.parent.name: p.read_bytes() for p in (out / "students").glob("*/report.json")
            if not p.parent.name.startswith(".")}


def _batch(subs, out, rubric_path, tmp, **popen):
    cmd = [sys.executable, "-m", "classroom", "batch", str(subs), "--out", str(out), "--rubric", str(rubric_path)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp)), **popen)


def _kill_leftovers(tmp: Path) -> None:
    """Kill the processes working under ``tmp``: a task child whose grade
    process was killed by the simulated power loss has nobody left to stop it."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(tmp) + os.sep):
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.slow
def test_batch_survives_a_kill_and_resumes(tmp_path):
    subs = _class(tmp_path)
    rubric_path = tmp_path / "rubric.toml"
    # The limit stops the hanging student and must let a correct one finish on this
    # machine now; on a GPU the child also initializes CUDA and compiles the kernel.
    rubric_path.write_text(rubric_toml(tasks=("dds",), timeout_s=scaled(60 if HAS_CUDA else 15)))
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    try:
        _kill_and_resume(subs, out, rubric_path, tmp)
    finally:
        _kill_leftovers(tmp)


def _kill_and_resume(subs, out, rubric_path, tmp):
    first = _batch(subs, out, rubric_path, tmp, start_new_session=True)
    deadline = time.time() + scaled(300)
    while time.time() < deadline and len(_finished(out)) < 2:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # power loss: no clean-up at all
    first.wait()
    done_before = _finished(out)
    assert 2 <= len(done_before) < len(EXPECTED)

    second = _batch(subs, out, rubric_path, tmp)
    log = second.communicate(timeout=scaled(600))[0].decode()
    assert second.returncode == 0, log
    assert f"{len(done_before)} already graded" in log
    for sid, data in done_before.items():  # finished students were not regraded
        assert (out / "students" / sid / "report.json").read_bytes() == data

    rows = list(csv.DictReader((out / "class.csv").open()))
    assert sorted(r["id"] for r in rows) == sorted(EXPECTED)
    for r in rows:
        assert float(r.get("correctness") or 0) == EXPECTED[r["id"]], r  # perf points need a GPU
        if r["id"] in EXPECTED_FLAGS:
            assert EXPECTED_FLAGS[r["id"]] in r["flags"], r
    assert f"{len(EXPECTED)} of {len(EXPECTED)} submissions graded" in (out / "summary.md").read_text()
    _complete(out)  # no half-written leftovers
