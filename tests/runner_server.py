"""A real course GPU runner on loopback for the tests (tests/classroom/test_runner.py,
tests/classroom/test_runner_page.py).

``RunnerServer(tmp, students, ...)`` runs ``python -m classroom serve --device
cpu`` as a child process on a free port, with a small rubric (tests/fakes.py's
DDS tests and one hidden test) whose task time limit scales with the machine
(tests/helpers.scaled). Submissions that fail fast (only ``w8a8.py``: the DDS
task is then missing, no worker starts) keep the suite short where the grade
itself is not the point; ``HANGS`` (tests/fixtures/submissions/dds_hangs.py)
keeps a worker busy until that time limit.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from tests.fakes import ROOT, rubric_toml, submission
from tests.helpers import scaled

STUB = {name: (ROOT / "assignment" / name).read_bytes() for name in ("w8a8.py", "w4a16.py", "dds.py")}
FAST = {"w8a8.py": STUB["w8a8.py"]}                     # the rubric's one task (dds) is missing: no worker
HANGS = {"dds.py": submission("dds_hangs").encode()}     # a worker busy until the task's time limit
HIDDEN_TEST = "dds/hidden_zero_rows_only_the_ta_sees"


def runner_rubric(task_timeout_s: float) -> str:
    text = rubric_toml(timeout_s=task_timeout_s, tasks=("dds",))
    return text + (f'[[tests]]\nname = "{HIDDEN_TEST}"\ntask = "dds"\nkind = "correctness"\npoints = 5\n'
                   "shape = [8, 64, 64]\ncpu_shape = [8, 64, 64]\ndensity = 0.5\nhidden = true\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def zip_of(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return out.getvalue()


class RunnerServer:
    def __init__(self, tmp: Path, students=("alice", "bob", "carol"), quota: int = 0, workers: int = 1,
                 task_timeout_s: float | None = None, extra=()):
        self.tmp, self.data = Path(tmp), Path(tmp) / "data"
        self.task_timeout_s = task_timeout_s or scaled(15)   # a stub grade fits; HANGS waits this long
        self.rubric = self.tmp / "rubric.toml"
        self.rubric.write_text(runner_rubric(self.task_timeout_s))
        self.roster = self.tmp / "roster.csv"
        self.roster.write_text("id,name\n" + "".join(f"{s},{s.title()}\n" for s in students))
        self.args = ["--roster", str(self.roster), "--data", str(self.data), "--device", "cpu",
                     "--rubric", str(self.rubric), "--quota", str(quota), "--workers", str(workers), *extra]
        self.process = None
        self.start()

    def start(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.tmp / f"server-{self.port}.log", "wb")
        self.process = subprocess.Popen([sys.executable, "-m", "classroom", "serve", *self.args,
                                         "--port", str(self.port)], cwd=ROOT, stdout=self.log,
                                        stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        deadline = time.monotonic() + scaled(60)
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log_text()
            try:
                self.get("/api/status")
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("the runner did not answer:\n" + self.log_text())

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(scaled(30))
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        self.log.close()

    def log_text(self) -> str:
        if not self.log.closed:
            self.log.flush()
        text = "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.tmp.glob("server-*.log")))
        logs = self.data / "logs"
        if logs.is_dir():
            text += "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(logs.glob("*.log")))
        return text

    def tokens(self) -> dict[str, str]:
        lines = (self.data / "tokens.csv").read_text().splitlines()[1:]
        return dict(line.split(",", 1) for line in lines)

    # ------------------------------------------------------------------------- HTTP

    def call(self, method: str, path: str, token: str | None = None, body: bytes | None = None,
             headers: dict | None = None) -> tuple[int, dict]:
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=body, headers=h, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def get(self, path: str, token: str | None = None) -> dict:
        status, body = self.call("GET", path, token)
        assert status == 200, (status, body)
        return body

    def submit(self, token: str, files: dict[str, bytes], display_name: str | None = None) -> tuple[int, dict]:
        query = f"?display_name={urllib.parse.quote(display_name)}" if display_name else ""
        return self.call("POST", "/api/submissions" + query, token, zip_of(files),
                         {"Content-Type": "application/zip"})

    def wait_job(self, token: str, job: str, states=("done",), timeout_s: float = 120) -> dict:
        deadline = time.monotonic() + scaled(timeout_s)
        while time.monotonic() < deadline:
            state = self.get(f"/api/submissions/{job}", token)
            if state["state"] in states:
                return state
            time.sleep(0.3)
        raise AssertionError(f"job {job} not {states} in time:\n" + self.log_text())

    # ------------------------------------------------------------------------- the store, read only

    def db(self) -> sqlite3.Connection:
        db = sqlite3.connect(f"file:{self.data / 'runner.sqlite'}?mode=ro", uri=True, timeout=30)
        db.row_factory = sqlite3.Row
        return db

    def job_row(self, job: str) -> sqlite3.Row:
        with self.db() as db:
            return db.execute("SELECT * FROM jobs WHERE id = ?", (job,)).fetchone()

    def grade_pids(self, job: str) -> list[int]:
        """The process ids of the grade commands running for ``job`` now."""
        from classroom.runner.worker import grade_pids
        return grade_pids(self.data, job)

    def kill_grade(self, job: str, sig: int = signal.SIGKILL, timeout_s: float = 60) -> int:
        """Send ``sig`` to the grade of ``job`` as soon as it runs; its process id."""
        deadline = time.monotonic() + scaled(timeout_s)
        while time.monotonic() < deadline:
            pids = self.grade_pids(job)
            if pids:
                os.kill(pids[0], sig)
                return pids[0]
            time.sleep(0.1)
        raise AssertionError(f"no grade of job {job} ran in time:\n" + self.log_text())

    def worker_row(self) -> sqlite3.Row:
        with self.db() as db:
            return db.execute("SELECT * FROM workers").fetchone()

