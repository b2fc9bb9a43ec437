"""Batch grading: isolation per student, interruption and resume, the class CSV."""

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fakes import ROOT, SOLUTION, rubric_toml, wrap_entry
from tests.helpers import HAS_CUDA


def _class(tmp_path: Path) -> Path:
    subs = tmp_path / "subs"
    subs.mkdir()
    students = {
        "alice": SOLUTION["dds"],                                               # correct: 4 points
        "bob": SOLUTION["dds"].replace("acc = tl.dot(a, w, acc)", "acc = tl.dot(a, w, acc) * 0.5"),  # wrong
        "carol": wrap_entry("dds", "raise MemoryError('boom')"),                 # crashes in every call
        "dave": wrap_entry("dds", "while True:\n    pass"),                      # hangs
        "frank": "def dds_mm(x, w):\n    return x\n",                             # no kernel at all
    }
    for sid, src in students.items():
        (subs / sid).mkdir()
        (subs / sid / "dds.py").write_text(src)
    (subs / "eve.zip").write_bytes(b"PK\x03\x04 truncated")                   # corrupt zip
    (subs / "empty").mkdir()                                                  # empty folder
    return subs


EXPECTED = {"alice": 4.0, "bob": 0.0, "carol": 0.0, "dave": 0.0, "eve": 0.0, "empty": 0.0, "frank": 0.0}
EXPECTED_FLAGS = {"dave": "timeout", "eve": "unreadable", "empty": "missing_file"}


def _finished(out: Path) -> dict:
    """Finished students (their folder has a report.json); in-progress temp folders start with '.'."""
    return {p.parent.name: p.read_bytes() for p in (out / "students").glob("*/report.json")
            if not p.parent.name.startswith(".")}


def _batch(subs, out, rubric_path, **popen):
    cmd = [sys.executable, "-m", "grader", "batch", str(subs), "--out", str(out), "--rubric", str(rubric_path)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), **popen)


def test_batch_survives_a_kill_and_resumes(tmp_path):
    subs = _class(tmp_path)
    rubric_path = tmp_path / "rubric.toml"
    # The limit only needs to stop the hanging student quickly; on a GPU the child
    # also initializes CUDA and compiles the kernel, which can take over 10 s.
    rubric_path.write_text(rubric_toml(tasks=("dds",), timeout_s=60 if HAS_CUDA else 10))
    out = tmp_path / "out"

    first = _batch(subs, out, rubric_path, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and len(_finished(out)) < 2:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # power loss: no clean-up at all
    first.wait()
    done_before = _finished(out)
    assert 2 <= len(done_before) < len(EXPECTED)

    second = _batch(subs, out, rubric_path)
    log = second.communicate(timeout=600)[0].decode()
    assert second.returncode == 0, log
    assert f"{len(done_before)} already graded" in log
    for sid, data in done_before.items():  # finished students were not regraded
        assert (out / "students" / sid / "report.json").read_bytes() == data

    rows = list(csv.DictReader((out / "class.csv").open()))
    assert sorted(r["student"] for r in rows) == sorted(EXPECTED)
    for r in rows:
        assert float(r.get("correctness") or 0) == EXPECTED[r["student"]], r  # perf points need a GPU
        if r["student"] in EXPECTED_FLAGS:
            assert EXPECTED_FLAGS[r["student"]] in r["flags"], r
    assert "7 of 7 submissions graded" in (out / "summary.md").read_text()
    assert not list((out / "students").glob(".*"))  # no half-written leftovers
