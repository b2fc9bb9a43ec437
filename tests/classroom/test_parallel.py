"""A class graded several students at a time: JOBS=N on the CPU, and the
class sharded over a job array through submitit (its local executor, the
same path as Slurm). Each must give what a serial batch gives, student by
student; resume works across executors, and nothing is graded twice.

A fake grade command (FAKE) stands in for the grader where the tests are
about scheduling; one test runs the real grader with a fixed seed.
"""

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from classroom import batch, cluster, grade_process, slots
from classroom.cli import main
from grader.rubric import load_rubric
from tests.fakes import ROOT, install_fake_grade, rubric_toml

pytest.importorskip("submitit")
pytestmark = pytest.mark.slow  # every test runs batches of grade processes (fake grades, real processes)

FAKE = r'''
import os, sys, time
from pathlib import Path

sys.path.insert(0, ROOT)
sub, reports, log = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
seed = sys.argv[sys.argv.index("--seed") + 1] if "--seed" in sys.argv else "none"
start = time.time_ns()
mode = (sub / "mode").read_text().strip() if (sub / "mode").is_file() else "ok"
# This process's parent is its supervisor (grader/harness/proc.py); the supervisor's, the
# batch or shard that grades it.
with open(f"/proc/{os.getppid()}/stat") as f:
    grader = int(f.read().rsplit(")", 1)[1].split()[1])
if mode == "kill-shard" and not (log / f"killed-{sub.name}").exists():
    (log / f"killed-{sub.name}").touch()
    os.kill(grader, 9)   # the shard dies: a node failure
    sys.exit(3)
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
from grader.report import write_reports
from grader.scoring import GradeResult, TaskResult, TestResult
score = float(int(sub.name[1:]) % 5)
tests = [TestResult(name="w8a8/c0", task="w8a8", kind="correctness", score=score, max_score=4, status="partial",
                    message="ok")]
tasks = [TaskResult(task="w8a8", title="W8A8", score=score, max_score=4, summary="ran")]
write_reports(GradeResult(schema_version=1, submission=str(sub), started="2026-01-01T00:00:00+00:00",
                          seconds=0.1, device="cpu", gpu=None, versions={}, seed=int(seed) if seed != "none" else 7,
                          rubric="r", score=score, max_score=4, max_score_all_tests=7, partial=True, notes=[],
                          tasks=tasks, tests=tests), reports)
threads = os.environ.get("OMP_NUM_THREADS", "unset")
(log / f"run@{sub.name}@{grader}@{threads}@{start}@{time.time_ns()}").touch()
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    log = install_fake_grade(tmp_path, monkeypatch, FAKE, "log")
    rubric_path = tmp_path / "rubric.toml"
    rubric_path.write_text(rubric_toml(tasks=("w8a8",)))
    return load_rubric(rubric_path), log


def _class(tmp_path: Path, n: int, modes: dict | None = None) -> Path:
    folder = tmp_path / "subs"
    for i in range(n):
        (folder / f"s{i:02d}").mkdir(parents=True)
        if modes and f"s{i:02d}" in modes:
            (folder / f"s{i:02d}" / "mode").write_text(modes[f"s{i:02d}"])
    return folder


def _runs(log: Path) -> list[dict]:
    out = []
    for p in log.iterdir():
        if p.name.startswith("run@"):
            name, parent, threads, start, end = p.name[4:].split("@")
            out.append({"name": name, "parent": int(parent), "threads": threads, "start": int(start),
                        "end": int(end)})
    return out


def _rows(out: Path) -> dict:
    with open(out / "class.csv", encoding="utf-8", newline="") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def _same_grades(a: Path, b: Path, ignore=("graded_at",)) -> None:
    """class.csv of two runs, student by student, but for the columns that say when."""
    ra, rb = _rows(a), _rows(b)
    assert set(ra) == set(rb)
    for sid in ra:
        assert {k: v for k, v in ra[sid].items() if k not in ignore} == \
               {k: v for k, v in rb[sid].items() if k not in ignore}, sid


# ---------------------------------------------------------------------------- JOBS=N

def test_two_jobs_grade_two_students_at_once_with_their_share_of_threads(tmp_path, fake, monkeypatch):
    rubric, log = fake
    monkeypatch.setenv("FAKE_SLEEP", "0.5")
    folder = _class(tmp_path, 6)
    assert batch.run_batch(str(folder), str(tmp_path / "serial"), rubric, seed=11) == 0
    serial = _runs(log)
    for p in log.iterdir():
        p.unlink()
    assert batch.run_batch(str(folder), str(tmp_path / "two"), rubric, jobs=2, seed=11) == 0
    runs = _runs(log)
    assert sorted(r["name"] for r in runs) == sorted(p.name for p in folder.iterdir())   # each once
    overlapping = [(a, b) for a in runs for b in runs if a is not b and a["start"] < b["end"] and b["start"] < a["end"]]
    assert overlapping, "no two students were graded at the same time"
    # At most two at any moment: count the runs under way when each one starts (a slow run may
    # overlap two short ones that followed each other in the other slot; that is still two at once).
    assert all(sum(1 for b in runs if b["start"] <= a["start"] < b["end"]) <= 2 for a in runs)
    threads = str(max(1, slots.usable_cores() // 2))
    assert {r["threads"] for r in runs} == {threads} and {r["threads"] for r in serial} == {"unset"}
    _same_grades(tmp_path / "serial", tmp_path / "two")
    assert {r["seed"] for r in _rows(tmp_path / "two").values()} == {
        str(grade_process.student_seed(11, f"s{i:02d}")) for i in range(6)}


def test_jobs_on_the_command_line(tmp_path, fake, capsys):
    rubric, _ = fake
    folder = _class(tmp_path, 3)
    args = ["batch", str(folder), "--out", str(tmp_path / "out"), "--rubric", rubric.source]
    assert main([*args, "--jobs", "2"]) == 0
    assert "2 at a time" in capsys.readouterr().out
    assert main([*args, "--jobs", "0"]) == 2
    assert "--jobs 0: expected a number >= 1 or auto" in capsys.readouterr().err
    assert 1 <= slots.spare_cores() <= slots.usable_cores()


# ---------------------------------------------------------------------------- a job array (submitit local)

def _cluster_batch(folder: Path, out: Path, rubric, *extra: str) -> int:
    return main(["batch", str(folder), "--out", str(out), "--rubric", rubric.source, "--executor", "local",
                 "--gpus-per-task", "0", "--seed", "11", *extra])


def test_a_sharded_run_equals_the_serial_run(tmp_path, fake, capsys):
    rubric, log = fake
    folder = _class(tmp_path, 7)
    assert batch.run_batch(str(folder), str(tmp_path / "serial"), rubric, seed=11) == 0
    for p in log.iterdir():
        p.unlink()
    assert _cluster_batch(folder, tmp_path / "sharded", rubric, "--shards", "3") == 0
    printed = capsys.readouterr().out
    assert "submitted 3 shard(s) of up to 3 student(s) (local" in printed
    runs = _runs(log)
    assert sorted(r["name"] for r in runs) == sorted(p.name for p in folder.iterdir())
    assert len({r["parent"] for r in runs}) == 3     # three shard processes did the grading
    _same_grades(tmp_path / "serial", tmp_path / "sharded")
    assert (tmp_path / "sharded" / "summary.md").read_text().startswith("7 of 7 submissions graded")
    assert json.loads((tmp_path / "sharded" / "cluster" / cluster.JOBS_FILE).read_text()) == []


def test_a_shard_that_dies_is_graded_again_and_nothing_twice(tmp_path, fake, capsys):
    """s04's grading kills its own shard (a node failure) midway: the students its
    shard finished before are kept, s04 and the rest of that shard are graded by a
    second wave, and no student who was finished is graded again."""
    rubric, log = fake
    folder = _class(tmp_path, 6, {"s04": "kill-shard"})
    assert _cluster_batch(folder, tmp_path / "out", rubric, "--shards", "2") == 0
    printed = capsys.readouterr().out
    assert "ended without finishing" in printed and "of shards that died are graded again" in printed
    runs = _runs(log)
    assert sorted(r["name"] for r in runs) == [f"s{i:02d}" for i in range(6)]   # each finished once
    rows = _rows(tmp_path / "out")
    assert all(r["flags"] == "" and r["total"] for r in rows.values()), rows
    assert (log / "killed-s04").exists()
    # A local run afterwards has nothing left to grade: resume across executors.
    assert batch.run_batch(str(folder), str(tmp_path / "out"), rubric) == 0
    assert "6 already graded, 0 to grade" in capsys.readouterr().out


CLUSTER_DRIVER = """
import sys
sys.path.insert(0, {root!r})
import classroom.batch as b
b.grade_command = lambda path, reports, rubric: [sys.executable, {script!r}, str(path), str(reports), {log!r}]
from classroom.cli import main
sys.exit(main(["batch", {folder!r}, "--out", {out!r}, "--rubric", {rubric!r}, "--executor", "local",
               "--gpus-per-task", "0", "--shards", "2"]))
"""


def test_a_rerun_waits_for_the_shards_of_a_killed_run_instead_of_grading_again(tmp_path, fake, capsys):
    """The submitting process dies (SIGKILL) while its shards grade; a local run
    then leaves their students alone, and a cluster run waits for the shards:
    every student is graded exactly once."""
    rubric, log = fake
    folder = _class(tmp_path, 6)
    out = tmp_path / "out"
    code = CLUSTER_DRIVER.format(root=str(ROOT), script=str(tmp_path / "fake_grade.py"), log=str(log),
                                 folder=str(folder), out=str(out), rubric=rubric.source)
    driver = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, FAKE_SLEEP="2"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        jobs = out / "cluster" / cluster.JOBS_FILE
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (jobs.exists() and json.loads(jobs.read_text() or "[]")):
            time.sleep(0.05)
        recorded = json.loads(jobs.read_text())
        assert len(recorded) == 2
        driver.kill()                     # the shards, started by it, go on
        driver.wait()
        assert batch.run_batch(str(folder), str(out), rubric) == 0
        printed = capsys.readouterr().out
        assert "still grading" in printed and "not graded here" in printed
        assert _cluster_batch(folder, out, rubric) == 0
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    runs = _runs(log)
    assert sorted(r["name"] for r in runs) == [f"s{i:02d}" for i in range(6)]   # each exactly once
    assert all(r["flags"] == "" for r in _rows(out).values())
