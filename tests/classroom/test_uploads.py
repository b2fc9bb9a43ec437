"""Gradebook uploads that cannot mislead: every format refuses a score that is
not final (listed with the reason, exit status 1) unless the TA names its kind
with --allow, which is then written beside the upload; Moodle's grading
worksheet; merge refuses a performance that was never measured."""

import csv
from pathlib import Path

import pytest

from classroom import batch
from classroom.cli import main
from classroom.lms import gradebook
from grader.rubric import DEFAULT_RUBRIC, load_rubric, rubric_hash
from tests.classroom.test_lms import CLASS_COLUMNS, FAKE_GRADE, SAMPLES, _moodle
from tests.fakes import install_fake_grade

HASH = rubric_hash(DEFAULT_RUBRIC)
FINAL = {"max": "100", "correctness": "55", "performance": "30", "total": "85", "flags": "", "partial": "False",
         "device": "NVIDIA H100 80GB HBM3", "rubric_hash": HASH, "graded_at": "2026-03-03T10:00:00+00:00"}
CPU = dict(FINAL, max="60", performance="0", total="55", partial="True", device="cpu")


def _class_csv(folder: Path, rows: list[dict], batch_hash: str | None = HASH) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "class.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CLASS_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    if batch_hash:
        (folder / "batch.json").write_text(f'{{"rubric_hash": "{batch_hash}"}}\n')
    return path


def _csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


MIXED = [dict(FINAL, id="ok", email="ok@x", sid="1", layout="canvas", lms_id="11"),
         dict(CPU, id="cpu", email="cpu@x", sid="2", layout="canvas", lms_id="12"),
         dict(FINAL, id="old", email="old@x", sid="3", rubric_hash="aaaaaaaaaaaa", layout="canvas", lms_id="13"),
         dict(FINAL, id="nofile", email="nofile@x", sid="4", flags="missing_file", total="60", layout="canvas",
              lms_id="14"),
         dict(FINAL, id="err", email="err@x", sid="5", flags="grader_error", total="0", layout="canvas",
              lms_id="15")]


@pytest.mark.parametrize("fmt", gradebook.FORMATS)
def test_every_format_refuses_each_kind_of_score_that_is_not_final(tmp_path, fmt, capsys):
    rows = [dict(r, layout="moodle" if fmt == "moodle" else r["layout"]) for r in MIXED]
    class_csv = _class_csv(tmp_path, rows)
    assert main(["gradebook", str(class_csv), "--format", fmt]) == 1
    printed = capsys.readouterr().out
    out = tmp_path / f"gradebook-{fmt}.csv"
    uploaded = [r for r in _csv(out) if r.get("Student") != "Points Possible"]
    assert len(uploaded) == 1, uploaded     # only the final score
    assert "4 left out:" in printed
    assert "cpu@x: CPU-only partial score 55/60: performance was never measured" in printed
    assert "(--allow cpu-partial to upload it anyway)" in printed
    assert "old@x: made under rubric aaaaaaaaaaaa, the batch's is " + HASH in printed
    assert "nofile@x: missing_file: a kernel file could not be found or read" in printed
    assert "err@x: grader error: regrade it first" in printed
    assert not gradebook.accepted_path(out).exists()


def test_allow_names_what_is_accepted_and_says_so_beside_the_upload(tmp_path, capsys):
    class_csv = _class_csv(tmp_path, MIXED)
    out = tmp_path / "gradebook-canvas.csv"
    assert main(["gradebook", str(class_csv), "--format", "canvas", "--allow", "cpu-partial"]) == 1  # still 3 out
    capsys.readouterr()
    assert {r["ID"] for r in _csv(out)[1:]} == {"11", "12"}
    side = gradebook.accepted_path(out).read_text()
    assert "accepted with --allow cpu-partial" in side and "cpu@x: CPU-only partial score 55/60" in side
    assert main(["gradebook", str(class_csv), "--format", "canvas", "--allow", "cpu-partial,stale-rubric",
                 "--allow", "missing-files"]) == 1   # the grader error is never accepted
    printed = capsys.readouterr().out
    assert "accepted with --allow: 1 cpu-partial, 1 missing-files, 1 stale-rubric" in printed
    assert {r["ID"] for r in _csv(out)[1:]} == {"11", "12", "13", "14"}
    # A later upload without --allow removes the list: it never describes another file.
    assert main(["gradebook", str(class_csv), "--format", "canvas"]) == 1
    assert not gradebook.accepted_path(out).exists()
    assert main(["gradebook", str(class_csv), "--format", "canvas", "--allow", "typo"]) == 2
    assert "--allow typo: expected some of cpu-partial, stale-rubric, missing-files" in capsys.readouterr().err


def test_a_cpu_only_batch_never_uploads_60_of_100_silently(tmp_path, capsys):
    """The TA review's case: a CPU batch exported to Canvas wrote 'Points Possible 60'."""
    rows = [dict(CPU, id=f"s{i}", sid=str(i), layout="canvas", lms_id=str(100 + i)) for i in range(3)]
    class_csv = _class_csv(tmp_path, rows)
    assert main(["gradebook", str(class_csv), "--format", "canvas"]) == 1
    out = _csv(tmp_path / "gradebook-canvas.csv")
    assert len(out) == 1 and out[0]["Student"] == "Points Possible"   # no student row
    assert "3 left out:" in capsys.readouterr().out


def test_stale_rubric_uses_the_batch_record_or_the_rubric_given(tmp_path, capsys):
    rows = [dict(FINAL, id="a", email="a@x", rubric_hash="bbbbbbbbbbbb")]
    class_csv = _class_csv(tmp_path, rows, batch_hash="bbbbbbbbbbbb")
    assert main(["gradebook", str(class_csv), "--format", "gradescope"]) == 0     # the batch's own rubric
    assert main(["gradebook", str(class_csv), "--format", "gradescope", "--rubric", str(DEFAULT_RUBRIC)]) == 1
    assert "a@x: made under rubric bbbbbbbbbbbb" in capsys.readouterr().out


def test_moodle_worksheet_has_moodles_columns_and_participant_identifiers(tmp_path):
    """Moodle's importer (mod/assign/feedback/offline/importgradeslib.php) needs the
    columns Identifier, Grade and 'Last modified (grade)', and reads the participant
    id after 'Participant ' in Identifier."""
    rows = [dict(FINAL, id="Ada_Lovelace_501", name="Ada Lovelace", email="", layout="moodle", lms_id="501"),
            dict(FINAL, id="Grace_Hopper_503", name="Grace Hopper", total="72.5", layout="moodle", lms_id="503"),
            dict(FINAL, id="bob", name="Bob", email="bob@x", layout="plain")]
    class_csv = _class_csv(tmp_path, rows)
    assert main(["gradebook", str(class_csv), "--format", "moodle"]) == 1   # bob has no participant id
    sample = _csv(SAMPLES / "moodle_worksheet.csv")
    written = _csv(tmp_path / "gradebook-moodle.csv")
    assert list(written[0]) == list(sample[0]) == gradebook.MOODLE_HEADER
    assert [(r["Identifier"], r["Full name"], r["Grade"], r["Maximum Grade"]) for r in written] == [
        ("Participant 501", "Ada Lovelace", "85", "100"), ("Participant 503", "Grace Hopper", "72.5", "100")]
    assert all(r["Last modified (grade)"] == "2026-03-03T10:00:00+00:00" for r in written)
    # What Moodle's importer does with a row: the id after its 'Participant ' string.
    assert [r["Identifier"][len(gradebook.MOODLE_PARTICIPANT):] for r in written] == ["501", "503"]
    assert all(r["Identifier"].startswith(gradebook.MOODLE_PARTICIPANT) for r in sample)


def test_moodle_download_to_worksheet_round_trip(tmp_path, monkeypatch):
    """A batch of the Moodle sample, then its worksheet: every participant id of the download."""
    install_fake_grade(tmp_path, monkeypatch, FAKE_GRADE, "log")
    out = tmp_path / "out"
    assert batch.run_batch(str(_moodle(tmp_path)), str(out), load_rubric(DEFAULT_RUBRIC)) == 0
    assert main(["gradebook", str(out / "class.csv"), "--format", "moodle"]) == 0
    written = _csv(out / "gradebook-moodle.csv")
    assert {r["Identifier"]: r["Grade"] for r in written} == {
        "Participant 501": "100", "Participant 502": "70", "Participant 503": "50"}


def test_merge_refuses_performance_that_was_never_measured(tmp_path, capsys):
    rows = [dict(CPU, id="ada", email="ada@example.edu", sid="1815"),
            dict(FINAL, id="alan", email="alan@example.edu", sid="1912", performance="40")]
    class_csv = _class_csv(tmp_path, rows)
    code = main(["merge", str(SAMPLES / "gradescope_scores.csv"), str(class_csv), "--format", "gradescope",
                 "--allow", "cpu-partial"])
    printed = capsys.readouterr().out
    assert code == 1
    assert "ada@example.edu: performance was never measured (graded without a GPU)" in printed
    merged = {r["Email"]: r["Total Score"] for r in _csv(tmp_path / "merged-gradescope.csv")}
    assert merged == {"alan@example.edu": "100"}   # 60 from Gradescope + 40 measured


def test_merge_to_moodle_and_a_stale_gpu_row(tmp_path, capsys):
    rows = [dict(FINAL, id="a", email="ada@example.edu", sid="1815", layout="moodle", lms_id="501",
                 rubric_hash="cccccccccccc")]
    class_csv = _class_csv(tmp_path, rows)
    args = ["merge", str(SAMPLES / "gradescope_scores.csv"), str(class_csv), "--format", "moodle"]
    assert main(args) == 1
    assert "ada@example.edu: made under rubric cccccccccccc" in capsys.readouterr().out
    assert main([*args, "--allow", "stale-rubric"]) == 1     # the other Gradescope rows have no GPU result
    written = _csv(tmp_path / "merged-moodle.csv")
    assert [(r["Identifier"], r["Grade"]) for r in written] == [("Participant 501", "88")]
    assert "stale-rubric" in gradebook.accepted_path(tmp_path / "merged-moodle.csv").read_text()
