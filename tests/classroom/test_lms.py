"""The batch's round trip with Gradescope, Canvas and Moodle: layouts read from
platform samples (tests/fixtures/lms/), the roster, class.csv's columns, the
upload files and the merge, and the multi-GPU batch's scheduling.

A fake grade command stands in for the grader: it reads the submission's
w8a8.py, whose one line ``# fake: correctness=C performance=P`` says what
report to write, and records which GPU it was given and when it ran.
tests/classroom/test_batch.py runs the real grader end to end.
"""

import csv
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from classroom import batch, gpus
from classroom.cli import main
from classroom.lms import gradebook, layouts, roster
from classroom.lms.csvio import CsvError
from grader.rubric import DEFAULT_RUBRIC, load_rubric
from tests.fakes import install_fake_grade
from tests.helpers import scaled

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = Path(__file__).parents[1] / "fixtures" / "lms"
CLASS_COLUMNS = ["id", "name", "email", "sid", "total", "max", "correctness", "bonus", "performance",
                 "w8a8", "w4a16", "dds", "flags", "submitted_at", "graded_at", "rubric_hash", "device",
                 "partial", "seed", "layout", "lms_id", "original_name", "error"]

FAKE_GRADE = r'''
import os, re, subprocess, sys, time, zipfile
from pathlib import Path

sys.path.insert(0, ROOT)
sub, reports, log = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
start = time.time_ns()
if sub.is_dir():
    found = sorted(sub.rglob("w8a8.py"), key=lambda p: len(p.parts))
    text = found[0].read_text() if found else ""
elif zipfile.is_zipfile(sub):
    with zipfile.ZipFile(sub) as zf:
        names = [n for n in zf.namelist() if n.endswith("w8a8.py")]
        text = zf.read(names[0]).decode() if names else ""
else:
    text = ""
if "fake: hang" in text:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # fake-lms-leftover"],
                         start_new_session=True)
    (log / f"left-{p.pid}").touch()
    time.sleep(60)
if "fake: escape" in text:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # fake-lms-leftover"],
                         start_new_session=True)
    (log / f"left-{p.pid}").touch()
m = re.search(r"fake: correctness=([0-9.]+) performance=([0-9.]+)", text)
c, p = (float(m.group(1)), float(m.group(2))) if m else (0.0, 0.0)
if "fake: helper" in text:  # a helper that leaves this process's tree at once (double fork) must live on
    pidfile = log / f"helper-{sub.name}"
    if os.fork() == 0:
        h = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # fake-lms-leftover"])
        pidfile.write_text(str(h.pid))
        os._exit(0)
    os.wait()
    helper = int(pidfile.read_text())
    time.sleep(2.5)
    try:
        os.kill(helper, 0)
    except ProcessLookupError:
        c, p = 0.0, 0.0  # another student's clean-up killed it
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))

from grader.report import write_reports
from grader.rubric import DEFAULT_RUBRIC, rubric_hash
from grader.scoring import GradeResult, TaskResult, TestResult
tests = [TestResult(name="w8a8/c", task="w8a8", kind="correctness", score=c, max_score=60, status="passed",
                    message="ok"),
         TestResult(name="w8a8/p", task="w8a8", kind="performance", score=p, max_score=40, status="passed",
                    message="ok")]
tasks = [TaskResult(task="w8a8", title="W8A8", score=c + p, max_score=100, summary="ran")]
write_reports(GradeResult(schema_version=1, submission=str(sub), started="2026-03-03T00:00:00+00:00",
                          seconds=0.1, device="cuda", gpu="fake GPU", versions={}, seed=7, rubric="r",
                          score=c + p, max_score=100, max_score_all_tests=100, partial=False, notes=[],
                          tasks=tasks, tests=tests, rubric_hash=rubric_hash(DEFAULT_RUBRIC)), reports)
gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "none")
(log / f"run@{sub.name}@{gpu}@{start}@{time.time_ns()}").touch()
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake grade command; returns (rubric, log folder)."""
    return load_rubric(DEFAULT_RUBRIC), install_fake_grade(tmp_path, monkeypatch, FAKE_GRADE, "log")


def _sample(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(SAMPLES / name, dst)
    return dst


def _zip(path: Path, members: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)   # git keeps no empty folder of the samples
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)


def _csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


def _rows(out: Path) -> dict:
    header, rows = _csv(out / "class.csv")
    assert header == CLASS_COLUMNS
    return {r["id"]: r for r in rows}


def _runs(log: Path) -> list[tuple[str, str, int, int]]:
    """(submission folder or zip name, CUDA_VISIBLE_DEVICES, start ns, end ns) of each fake grade."""
    out = []
    for p in log.iterdir():
        if p.name.startswith("run@"):
            name, gpu, start, end = p.name[4:].split("@")
            out.append((name, gpu, int(start), int(end)))
    return out


def _errors(capsys) -> list[str]:
    """Lines on stderr, but for the batch's warning that this machine has no isolating sandbox."""
    return [line for line in capsys.readouterr().err.splitlines()
            if line.strip() and not line.startswith("WARNING: grades on this machine are not tamper-proof")]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z" and b"fake-lms-leftover" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


# ---------------------------------------------------------------------------- layouts

def _canvas(tmp_path: Path) -> Path:
    folder = _sample(tmp_path, "canvas_download")
    _zip(folder / "turingalan_LATE_1912_90031_kernels.zip",
         {"kernels/w8a8.py": "# fake: correctness=55 performance=35\n", "kernels/dds.py": "# dds\n"})
    return folder


def _moodle(tmp_path: Path) -> Path:
    folder = _sample(tmp_path, "moodle_download")
    _zip(folder / "Alan Turing_502_assignsubmission_file_" / "kernels.zip",
         {"w8a8.py": "# fake: correctness=50 performance=20\n"})
    return folder


def _plain(tmp_path: Path) -> Path:
    folder = tmp_path / "plain"
    for name, line in (("alice", "correctness=60 performance=40"), ("bob", "correctness=10 performance=0")):
        (folder / name).mkdir(parents=True)
        (folder / name / "w8a8.py").write_text(f"# fake: {line}\n")
    _zip(folder / "bob.zip", {"w8a8.py": "# fake: correctness=20 performance=5\n"})
    (folder / "late_days.txt").write_text("bob: 1\n")
    return folder


def test_each_layout_is_detected_and_can_be_forced(tmp_path):
    folders = {"gradescope": _sample(tmp_path, "gradescope_export"), "canvas": _canvas(tmp_path),
               "moodle": _moodle(tmp_path), "plain": _plain(tmp_path)}
    for layout, folder in folders.items():
        assert layouts.detect(folder)[0] == layout, folder
    # the export's own folder works as well as its parent
    assert layouts.detect(folders["gradescope"] / "assignment_4242_export")[0] == "gradescope"
    forced = layouts.read_layout(folders["canvas"], "plain")
    assert forced.layout == "plain" and {e.original for e in forced.entries} == {
        "turingalan_LATE_1912_90031_kernels.zip"}
    with pytest.raises(layouts.LayoutError, match="no submission_metadata.yml"):
        layouts.read_layout(folders["plain"], "gradescope")


@pytest.mark.slow
def test_gradescope_export_through_the_batch(tmp_path, fake, capsys):
    rubric, _ = fake
    export = _sample(tmp_path, "gradescope_export")
    lone = export / "assignment_4242_export" / "submission_270099"
    (lone / "w8a8.py").unlink()  # this student uploaded a zip
    _zip(lone / "mine.zip", {"kernels/w8a8.py": "# fake: correctness=1 performance=1\n"})
    out = tmp_path / "out"
    assert batch.run_batch(str(export), str(out), rubric) == 0
    printed = capsys.readouterr()
    assert "layout: gradescope (it holds Gradescope's submission_metadata.yml)" in printed.out
    assert "'../escape', which is not a folder of the export: left out" in printed.err
    assert "'submission_270099' is not in submission_metadata.yml" in printed.err
    rows = _rows(out)
    assert set(rows) == {"submission_270001", "submission_270002", "submission_270003", "submission_270099"}
    ada = rows["submission_270001"]
    assert (ada["name"], ada["email"], ada["sid"], ada["lms_id"], ada["layout"]) == (
        "Ada Lovelace", "ada@example.edu", "1815", "270001", "gradescope")
    assert ada["submitted_at"] == "2026-03-01T23:41:07.123456-08:00"
    assert (ada["total"], ada["correctness"], ada["performance"], ada["max"]) == ("80.0", "50.0", "30.0", "100")
    group = rows["submission_270002"]
    assert group["name"] == "Alan Turing; Grace Hopper" and group["email"] == "alan@example.edu; grace@example.edu"
    assert rows["submission_270003"]["name"].startswith("'=HYPERLINK")  # never a formula
    assert rows["submission_270099"]["name"] == "" and rows["submission_270099"]["total"] == "2.0"
    assert not (out / "students" / "escape").exists() and not (tmp_path / "escape").exists()


@pytest.mark.slow
def test_canvas_download_through_the_batch(tmp_path, fake, capsys):
    rubric, _ = fake
    folder = _canvas(tmp_path)
    out = tmp_path / "out"
    assert batch.run_batch(str(folder), str(out), rubric) == 0
    printed = capsys.readouterr()
    assert "layout: canvas" in printed.out
    assert "skipped late_days.txt: not a file of Canvas's submissions download" in printed.err
    assert "hoppergrace_1906: 2 files for dds.py; graded dds-2.py" in printed.err
    rows = _rows(out)
    assert set(rows) == {"lovelaceada_1815", "hoppergrace_1906", "turingalan_1912", "anon_x7k2p"}
    assert rows["lovelaceada_1815"]["total"] == "100.0" and rows["lovelaceada_1815"]["lms_id"] == "1815"
    assert rows["turingalan_1912"]["flags"] == "late" and rows["turingalan_1912"]["total"] == "90.0"
    assert rows["hoppergrace_1906"]["total"] == "20.0"  # w8a8-1.py: Canvas's name for a re-upload
    assert rows["anon_x7k2p"]["lms_id"] == "" and rows["anon_x7k2p"]["total"] == "40.0"
    staged = out / "staged"
    assert sorted(p.name for p in (staged / "lovelaceada_1815").iterdir()) == ["dds.py", "w4a16.py", "w8a8.py"]
    assert (staged / "hoppergrace_1906" / "dds.py").read_text() == "# new dds\n"
    assert not (staged / "turingalan_1912").exists()  # a zip is graded as it is
    report = json.loads((out / "students" / "turingalan_1912" / "report.json").read_text())
    assert report["submission"].endswith("turingalan_LATE_1912_90031_kernels.zip")


def test_moodle_download_through_the_batch(tmp_path, fake, capsys):
    rubric, _ = fake
    folder = _moodle(tmp_path)
    out = tmp_path / "out"
    assert batch.run_batch(str(folder), str(out), rubric) == 0
    printed = capsys.readouterr()
    assert "layout: moodle" in printed.out and "skipped grades.csv" in printed.err
    rows = _rows(out)
    assert set(rows) == {"Ada_Lovelace_501", "Alan_Turing_502", "Grace_Hopper_503"}
    assert rows["Ada_Lovelace_501"]["name"] == "Ada Lovelace" and rows["Ada_Lovelace_501"]["total"] == "100.0"
    assert rows["Alan_Turing_502"]["total"] == "70.0"      # the zip in its file folder
    assert rows["Grace_Hopper_503"]["total"] == "50.0"     # loose files, staged
    assert sorted(p.name for p in (out / "staged" / "Grace_Hopper_503").iterdir()) == ["dds.py", "w8a8.py"]
    assert {r["lms_id"] for r in rows.values()} == {"501", "502", "503"}


def test_plain_folder_duplicates_stray_files_and_roster(tmp_path, fake, capsys):
    rubric, _ = fake
    folder = _plain(tmp_path)
    roster_csv = tmp_path / "roster.csv"
    roster_csv.write_text("ID,Name,Email,SID\nalice,Alice A,alice@example.edu,11\nbob,Bob B,bob@example.edu,12\n"
                          "carol,Carol C,carol@example.edu,13\n", encoding="utf-8")
    out = tmp_path / "out"
    assert batch.run_batch(str(folder), str(out), rubric, roster=str(roster_csv)) == 0
    printed = capsys.readouterr()
    assert "skipped late_days.txt: not a folder or a .zip" in printed.err
    rows = list(_rows(out).values())
    bobs = [r for r in rows if r["original_name"] in ("bob", "bob.zip")]
    assert len(bobs) == 2 and all("duplicate" in r["flags"].split(";") for r in bobs)  # both graded, both kept
    assert sorted(r["total"] for r in bobs) == ["10.0", "25.0"]
    assert {r["email"] for r in bobs} == {"bob@example.edu"}
    alice = next(r for r in rows if r["id"] == "alice")
    assert (alice["name"], alice["sid"], alice["flags"]) == ("Alice A", "11", "")
    carol = next(r for r in rows if r["flags"] == "no_submission")
    assert (carol["id"], carol["email"], carol["total"]) == ("carol", "carol@example.edu", "")
    assert "3 of 3 submissions graded" in (out / "summary.md").read_text()
    # A later run without --roster uses the copy kept in OUT; a regrade by email finds alice.
    assert batch.run_batch(str(folder), str(out), rubric, student="ALICE@example.edu") == 0
    assert "from an earlier run" in capsys.readouterr().out
    assert next(r for r in _rows(out).values() if r["id"] == "alice")["name"] == "Alice A"


@pytest.mark.slow
def test_a_forced_layout_is_remembered_until_auto(tmp_path, fake, capsys):
    rubric, _ = fake
    folder = _canvas(tmp_path)
    out = tmp_path / "out"
    assert batch.run_batch(str(folder), str(out), rubric, layout="plain") == 0
    assert batch.run_batch(str(folder), str(out), rubric, student="turingalan_LATE_1912_90031_kernels.zip") == 0
    assert "given with --layout earlier" in capsys.readouterr().out
    assert batch.run_batch(str(folder), str(out), rubric, layout="auto") == 0
    assert "layout: canvas" in capsys.readouterr().out and "lovelaceada_1815" in _rows(out)


@pytest.mark.parametrize("text, expected", [
    ("!!python/object/apply:os.system ['touch /tmp/pwned']\n", "not the YAML of a Gradescope export"),
    ("- a\n- b\n", "expected a mapping of submission_<n> folders"),
    ("a: [unclosed\n", "(line "),
])
def test_bad_gradescope_metadata_is_a_clear_error(tmp_path, fake, capsys, text, expected):
    rubric, _ = fake
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "submission_metadata.yml").write_text(text)
    assert batch.run_batch(str(tmp_path / "export"), str(tmp_path / "out"), rubric) == 2
    err = _errors(capsys)
    assert len(err) == 1 and expected in err[0], err


def test_metadata_and_file_sizes_are_capped(tmp_path, monkeypatch):
    export = _sample(tmp_path, "gradescope_export") / "assignment_4242_export"
    monkeypatch.setattr(layouts, "METADATA_BYTES", 100)
    with pytest.raises(layouts.LayoutError, match="larger than"):
        layouts.read_layout(export)
    folder = tmp_path / "canvas"
    folder.mkdir()
    (folder / "bigbob_42_1_w8a8.py").write_bytes(b"#" * (layouts.MAX_FILE_BYTES + 5000))
    entries = layouts.stage_files(layouts.read_layout(folder).entries, tmp_path / "staged")
    assert (entries[0].path / "w8a8.py").stat().st_size == layouts.MAX_FILE_BYTES + 1  # the grader says "too large"


def test_names_from_platforms_never_escape(tmp_path):
    folder = tmp_path / "canvas"
    folder.mkdir()
    (folder / "x_1_2_..%2F..%2Fw8a8.py").write_text("#")
    (folder / "y_3_4_w8a8.py").write_text("#")
    found = layouts.read_layout(folder, "canvas")
    staged = layouts.stage_files(found.entries, tmp_path / "out" / "staged")
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert written == [tmp_path / "out" / "staged" / "y_3" / "w8a8.py"]
    assert all(e.path.is_relative_to(tmp_path) for e in staged)


# ---------------------------------------------------------------------------- roster

def test_roster_from_a_canvas_gradebook_export(tmp_path):
    r = roster.load_roster(SAMPLES / "canvas_gradebook.csv")
    assert [m.key for m in r.members] == ["1815", "1912", "1906", "1791"]  # the Points Possible row is not a student
    entries = layouts.read_layout(_canvas(tmp_path)).entries
    named, missing = roster.apply_roster(entries, r)
    by_id = {e.sid: e for e in named}
    assert by_id["lovelaceada_1815"].people[0] == layouts.Person("Lovelace, Ada", "", "S1815")
    assert [m.key for m in missing] == ["1791"]


def test_a_roster_without_an_identifying_column_is_refused(tmp_path, fake, capsys):
    bad = tmp_path / "r.csv"
    bad.write_text("Name,Section\nAda,1\n")
    with pytest.raises(CsvError, match="expected a header with an id, email or sid column"):
        roster.load_roster(bad)
    assert batch.run_batch(str(_plain(tmp_path)), str(tmp_path / "out"), fake[0], roster=str(bad)) == 2
    err = _errors(capsys)
    assert len(err) == 1 and "expected a header with an id, email or sid column" in err[0], err
    assert not (tmp_path / "out" / "class.csv").exists()
    bad.write_bytes(b"id,name\n\xff\xfe,x\n")
    with pytest.raises(CsvError, match="not UTF-8"):
        roster.load_roster(bad)


# ---------------------------------------------------------------------------- uploads and the merge

def _class_csv(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "class.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CLASS_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


GRADED = {"max": "100", "correctness": "50", "performance": "30", "total": "80", "flags": ""}


def test_gradescope_upload_has_gradescope_columns_and_one_row_per_person(tmp_path, fake, capsys):
    rubric, _ = fake
    out = tmp_path / "out"
    assert batch.run_batch(str(_sample(tmp_path, "gradescope_export")), str(out), rubric) == 0
    assert main(["gradebook", str(out / "class.csv"), "--format", "gradescope"]) == 1  # 270099 has no email
    printed = capsys.readouterr().out
    assert "submission_270099: no name, email or SID (give a roster)" in printed
    header, rows = _csv(out / "gradebook-gradescope.csv")
    assert header == ["Name", "SID", "Email", "Total Score"]
    gs_header, _ = _csv(SAMPLES / "gradescope_scores.csv")
    assert set(header) <= set(gs_header) | {"Name"}  # the columns of Gradescope's own grade export
    assert gradebook.read_gradescope_scores(out / "gradebook-gradescope.csv")  # readable as Gradescope's file
    assert {r["Email"]: r["Total Score"] for r in rows} == {
        "ada@example.edu": "80", "alan@example.edu": "100", "grace@example.edu": "100", "mallory@example.edu": "10"}
    assert stat.S_IMODE((out / "gradebook-gradescope.csv").stat().st_mode) == 0o640


def test_canvas_upload_matches_canvas_gradebook_export(tmp_path, fake, capsys):
    rubric, _ = fake
    out = tmp_path / "out"
    folder = _canvas(tmp_path)
    assert batch.run_batch(str(folder), str(out), rubric, roster=str(SAMPLES / "canvas_gradebook.csv")) == 0
    export_header, export_rows = _csv(SAMPLES / "canvas_gradebook.csv")
    code = main(["gradebook", str(out / "class.csv"), "--format", "canvas", "--assignment", export_header[5]])
    assert code == 1  # the anonymous submission has neither a Canvas id nor a SIS User ID
    assert "anon_x7k2p: no name, email or SID" in capsys.readouterr().out
    header, rows = _csv(out / "gradebook-canvas.csv")
    assert header[:5] == export_header[:5] and header[5] == "Triton kernels (4242)"
    assert rows[0]["Student"] == export_rows[0]["Student"].strip() and rows[0][header[5]] == "100"
    scores = {r["ID"]: (r["Student"], r["SIS User ID"], r[header[5]]) for r in rows[1:]}
    assert scores == {"1815": ("Lovelace, Ada", "S1815", "100"), "1912": ("Turing, Alan", "S1912", "90"),
                      "1906": ("Hopper, Grace", "S1906", "20")}


def test_uploads_leave_out_scores_that_are_not_final(tmp_path):
    rows = [dict(GRADED, id="a", email="a@x", sid="1"),
            dict(GRADED, id="b1", email="b@x", flags="duplicate"), dict(GRADED, id="b2", email="b@x", total="90"),
            dict(GRADED, id="c", email="c@x", flags="grader_error", total="0"),
            dict(GRADED, id="d", email="d@x", flags="not_graded", total=""),
            {"id": "e", "email": "e@x", "flags": "no_submission"},
            dict(GRADED, id="f")]
    up = gradebook.gradebook(gradebook.read_class_csv(_class_csv(tmp_path, rows)), "gradescope")
    assert up.rows == [["", "1", "a@x", "80"]]
    why = dict(up.left_out)
    assert why["b@x"].startswith("in more than one submission") and why["c@x"].startswith("grader error")
    assert why["d@x"] == "not graded yet" and why["f"].startswith("no name, email or SID")
    assert up.not_submitted == 1 and "e@x" not in why
    up = gradebook.gradebook(gradebook.read_class_csv(_class_csv(tmp_path, rows)), "gradescope", score="performance")
    assert up.rows == [["", "1", "a@x", "30"]]


def test_merge_adds_gpu_performance_to_gradescope_scores(tmp_path, fake, capsys):
    rubric, _ = fake
    out = tmp_path / "out"
    assert batch.run_batch(str(_sample(tmp_path, "gradescope_export")), str(out), rubric) == 0
    merged = out / "merged.csv"
    code = main(["merge", str(SAMPLES / "gradescope_scores.csv"), str(out / "class.csv"), "--format", "gradescope",
                 "-o", str(merged)])
    printed = capsys.readouterr().out
    assert code == 1
    assert "mallory@example.edu: the GPU graded submission 270003, Gradescope scored submission 270555" in printed
    assert "mary@example.edu: no GPU result in class.csv" in printed
    assert "charles" not in printed  # no Gradescope submission: nothing to merge, nothing to report
    header, rows = _csv(merged)
    assert header == ["Name", "SID", "Email", "Total Score"]
    # Gradescope's correctness (58, 60, 60) + the GPU batch's performance (30, 40, 40)
    assert {r["Email"]: r["Total Score"] for r in rows} == {
        "ada@example.edu": "88", "alan@example.edu": "100", "grace@example.edu": "100"}
    assert rows[0]["Name"] == "Ada Lovelace" and rows[0]["SID"] == "1815"
    code = main(["merge", str(SAMPLES / "gradescope_scores.csv"), str(out / "class.csv"), "--format", "canvas",
                 "-o", str(tmp_path / "m.csv")])
    header, rows = _csv(tmp_path / "m.csv")
    assert header[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert rows[0]["Student"] == "Points Possible" and rows[0]["Triton kernels"] == "100"


def test_merge_and_gradebook_refuse_files_of_the_wrong_shape(tmp_path, capsys):
    class_csv = _class_csv(tmp_path, [dict(GRADED, id="a", email="a@x")])
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("Name,Score\nA,1\n")
    assert main(["merge", str(wrong), str(class_csv), "--format", "gradescope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expected Gradescope's Download Grades CSV" in err[0]
    assert main(["gradebook", str(wrong), "--format", "canvas"]) == 2
    assert "expected the class.csv that make batch writes" in capsys.readouterr().err
    assert main(["gradebook", str(tmp_path / "none.csv"), "--format", "canvas"]) == 2
    assert "cannot read it" in capsys.readouterr().err


# ---------------------------------------------------------------------------- class files and errors

def test_reports_and_class_files_are_group_readable_only(tmp_path, fake):
    rubric, _ = fake
    out = tmp_path / "out"
    assert batch.run_batch(str(_canvas(tmp_path)), str(out), rubric) == 0
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(out / "students") == 0o750 and mode(out / "staged" / "lovelaceada_1815") == 0o750
    for d in (out / "students").iterdir():
        assert mode(d) == 0o750 and {mode(f) for f in d.iterdir()} == {0o640}, d
    assert mode(out / "class.csv") == 0o640 and mode(out / "summary.md") == 0o640


def test_an_unwritable_output_folder_is_one_line_naming_the_user(tmp_path, fake, capsys):
    rubric, _ = fake
    (tmp_path / "file").write_text("")
    assert batch.run_batch(str(_plain(tmp_path)), str(tmp_path / "file" / "out"), rubric) == 2
    err = _errors(capsys)
    assert len(err) == 1 and f"user id {os.getuid()} needs write access" in err[0]


def test_a_zip_given_as_the_folder_says_to_unzip_it(tmp_path, fake, capsys):
    rubric, _ = fake
    _zip(tmp_path / "export.zip", {"submission_metadata.yml": "{}"})
    assert batch.run_batch(str(tmp_path / "export.zip"), str(tmp_path / "out"), rubric) == 2
    assert "unzip it first" in capsys.readouterr().err


# ---------------------------------------------------------------------------- several GPUs

def test_gpu_lists():
    assert gpus.visible_gpus("all", {}, count=lambda: 3) == ["0", "1", "2"]
    assert gpus.visible_gpus("all", {"CUDA_VISIBLE_DEVICES": "2,5"}, count=lambda: 8) == ["2", "5"]
    assert gpus.visible_gpus("1", {"CUDA_VISIBLE_DEVICES": "2,5"}) == ["5"]  # positions among those the batch sees
    assert gpus.visible_gpus("0,GPU-1a2b-3c", {}) == ["0", "GPU-1a2b-3c"]
    for spec, env, why in (("all", {}, "no CUDA GPU"), ("0,0", {}, "listed twice"), ("0;rm", {}, "expected 'all'"),
                           ("2", {"CUDA_VISIBLE_DEVICES": "4"}, "index 2 is not one of them")):
        with pytest.raises(gpus.GpuListError, match=why):
            gpus.visible_gpus(spec, env, count=lambda: 0)


def _many(tmp_path: Path, n: int) -> Path:
    folder = tmp_path / "many"
    for i in range(n):
        (folder / f"s{i:02d}").mkdir(parents=True)
        (folder / f"s{i:02d}" / "w8a8.py").write_text(f"# fake: correctness={i} performance={i % 7}\n")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("n_gpus", [3])
def test_several_gpus_one_student_each_and_the_serial_result(tmp_path, fake, monkeypatch, n_gpus):
    rubric, log = fake
    monkeypatch.setenv("FAKE_SLEEP", "0.4")
    folder = _many(tmp_path, 7)
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    assert batch.run_batch(str(folder), str(serial), rubric) == 0
    shutil.rmtree(log)
    log.mkdir()
    slots = ",".join(f"GPU-fake{i}" for i in range(n_gpus))
    assert batch.run_batch(str(folder), str(parallel), rubric, gpus=slots) == 0
    runs = _runs(log)
    assert any(a[1] != b[1] and a[2] < b[3] and b[2] < a[3] for a in runs for b in runs)  # GPUs at work at once
    assert sorted(r[0] for r in runs) == sorted(p.name for p in folder.iterdir())  # each student once
    assert {r[1] for r in runs} == set(slots.split(","))                           # on every GPU
    for gpu in slots.split(","):  # never two students on one GPU at a time
        spans = sorted((s, e) for _, g, s, e in runs if g == gpu)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), gpu
    assert (serial / "class.csv").read_bytes() == (parallel / "class.csv").read_bytes()


@pytest.mark.slow
def test_a_hang_on_one_gpu_costs_only_that_student(tmp_path, fake):
    rubric, log = fake
    folder = _many(tmp_path, 4)
    (folder / "s01" / "w8a8.py").write_text("# fake: hang\n")
    (folder / "s02" / "w8a8.py").write_text("# fake: escape correctness=5 performance=1\n"
                                            "# fake: correctness=5 performance=1\n")
    limit = scaled(4)   # the fake grader's start-up on this machine now
    assert batch.run_batch(str(folder), str(tmp_path / "out"), rubric, timeout_s=limit, gpus="0,1") == 0
    rows = _rows(tmp_path / "out")
    assert rows["s01"]["flags"] == "grader_error" and f"longer than {limit:g} s" in rows["s01"]["error"]
    assert (rows["s00"]["total"], rows["s02"]["total"], rows["s03"]["total"]) == ("0.0", "6.0", "6.0")
    left = [int(p.name.split("-")[1]) for p in log.iterdir() if p.name.startswith("left-")]
    assert len(left) == 2 and not any(_alive(pid) for pid in left)


def test_a_student_clean_up_leaves_other_gpus_processes_alone(tmp_path, fake):
    """While one GPU's student runs a helper that left its tree (re-parented to
    that student's supervisor), the other GPU's students finish and are cleaned
    up: the helper lives on until its own student is done, then dies with it."""
    rubric, log = fake
    folder = _many(tmp_path, 5)
    (folder / "s00" / "w8a8.py").write_text("# fake: helper\n# fake: correctness=50 performance=25\n")
    assert batch.run_batch(str(folder), str(tmp_path / "out"), rubric, gpus="0,1") == 0
    rows = _rows(tmp_path / "out")
    assert rows["s00"]["total"] == "75.0", rows["s00"]
    runs = _runs(log)
    gpu_of_s00 = next(gpu for name, gpu, _, _ in runs if name == "s00")
    assert sum(1 for _, gpu, _, _ in runs if gpu != gpu_of_s00) >= 2  # others were cleaned up meanwhile
    helper = int((log / "helper-s00").read_text())
    assert not _alive(helper)


PARALLEL_BATCH = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {root!r})
import classroom.batch as b
from grader.rubric import load_rubric
b.grade_command = lambda path, reports, rubric: [sys.executable, {script!r}, str(path), str(reports), {log!r}]
sys.exit(b.run_batch({folder!r}, {out!r}, load_rubric({rubric!r}), gpus="0,1"))
"""


@pytest.mark.slow
def test_a_stop_signal_stops_every_gpu_cleanly_and_resume_finishes(tmp_path, fake):
    rubric, log = fake
    folder = _many(tmp_path, 6)
    out = tmp_path / "out"
    code = PARALLEL_BATCH.format(root=str(ROOT), script=str(tmp_path / "fake_grade.py"), log=str(log),
                                 folder=str(folder), out=str(out), rubric=str(DEFAULT_RUBRIC))
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, start_new_session=True,
                            env=dict(os.environ, FAKE_SLEEP="1.5"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + scaled(60)
        while time.time() < deadline and not any(True for _ in (out / "students").glob("s0*")):
            time.sleep(0.05)
        time.sleep(0.3)  # the next two students are being graded
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    done = {p.name for p in (out / "students").iterdir()}
    assert not any(n.startswith(".") for n in done)  # no half-graded student
    assert 1 <= len(done) < 6
    rows = _rows(out)
    assert sum(r["flags"] == "not_graded" for r in rows.values()) == 6 - len(done)
    assert batch.run_batch(str(folder), str(out), rubric, gpus="0,1") == 0
    assert all(r["flags"] == "" for r in _rows(out).values())


# ---------------------------------------------------------------------------- the real grader

@pytest.mark.slow
def test_real_grader_reads_staged_canvas_files(tmp_path):
    """The staged folder is what the grader's loader expects: it finds dds.py
    there (the kernel is judged, not reported missing)."""
    from tests.fakes import rubric_toml
    folder = tmp_path / "canvas"
    folder.mkdir()
    (folder / "doejane_LATE_31_7001_dds-1.py").write_text("def dds_mm(x, w):\n    return x\n")
    rubric_path = tmp_path / "rubric.toml"
    rubric_path.write_text(rubric_toml(tasks=("dds",), timeout_s=60))
    out = tmp_path / "out"
    assert batch.run_batch(str(folder), str(out), load_rubric(rubric_path)) == 0
    row = _rows_any(out)["doejane_31"]
    flags = row["flags"].split(";")
    assert "missing_file" not in flags and "late" in flags and float(row["total"]) == 0, row
    report = json.loads((out / "students" / "doejane_31" / "report.json").read_text())
    assert report["submission"] == str(out / "staged" / "doejane_31")
    assert "not found" not in json.dumps(report["tasks"]) + json.dumps(report["notes"])  # dds.py was judged


def _rows_any(out: Path) -> dict:
    """class.csv's rows by id, whatever the rubric's tasks."""
    _, rows = _csv(out / "class.csv")
    return {r["id"]: r for r in rows}
