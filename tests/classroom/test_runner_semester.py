"""The runner over a semester (classroom/runner/admin.py, store.py, tools/submit.py): the TA's
commands, runs that count only when graded, restarts that cost the student nothing, ETAs from
real grades, the student's own list of runs, tokens kept off command lines.

A real server on loopback (tests/runner_server.py), real ``make submit``, real signals."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time

import pytest

from classroom.runner.store import Closed, Quota, QuotaUsed, Store
from tests.fakes import ROOT
from tests.helpers import scaled
from tests.runner_server import FAST, HANGS, HIDDEN_TEST, RunnerServer
from tools import submit as client

REPORT = '{"score": 1, "max_score": 4, "tests": [], "tasks": []}'


def _store(tmp_path, students=("alice", "bob")) -> Store:
    s = Store(tmp_path, create=True)
    s.add_students(list(students))
    return s


def _grade(s: Store, student: str, now: float, error: str | None = None, seconds: float = 10,
           reached: bool = True, device: str = "cpu") -> str:
    job, _, _ = s.submit(student, FAST, Quota(0, 24), now=now)
    leased = s.lease("w", "slot", 3600, now=now)
    assert leased.id == job
    assert s.finish("w", job, REPORT, "# r", error=error, now=now + seconds, device=device, reached_kernels=reached)
    return job


# ----------------------------------------------------------------------------- the store

def test_a_grader_error_gives_the_run_back_and_a_grant_adds_runs_in_the_window(tmp_path):
    s = _store(tmp_path)
    q = Quota(1, 1.0)
    _grade(s, "alice", now=1000, error="the grader exited with code 1: boom")
    assert s.quota_state("alice", q, now=1100)["left"] == 1        # not counted
    _grade(s, "alice", now=1200)
    with pytest.raises(QuotaUsed):
        s.submit("alice", FAST, q, now=1300)
    s.grant("alice", 1, now=1300)
    assert s.quota_state("alice", q, now=1300) == {"limit": 2, "window_h": 1.0, "used": 1, "renews_at": None,
                                                    "left": 1}
    s.submit("alice", FAST, q, now=1310)
    assert s.quota_state("alice", q, now=5000)["limit"] == 1     # the grant left the window with it
    with pytest.raises(KeyError):
        s.grant("mallory", 1)


def test_uploads_close_at_the_deadline_but_for_an_extension(tmp_path):
    s = _store(tmp_path)
    q = Quota(0, 24)
    s.set_close_at(2000)
    s.submit("alice", FAST, q, now=1999)
    with pytest.raises(Closed) as e:
        s.submit("alice", FAST, q, now=2000)
    assert e.value.until == 2000
    s.extend("bob", 3000)
    s.submit("bob", FAST, q, now=2500)
    with pytest.raises(Closed):
        s.submit("bob", FAST, q, now=3000)
    s.set_close_at(None)
    s.submit("alice", FAST, q, now=5000)


def test_a_clean_stop_spends_no_attempt_and_a_requeue_grades_again(tmp_path):
    s = _store(tmp_path)
    job, _, _ = s.submit("alice", FAST, Quota(0, 24))
    for _ in range(5):                                            # more clean stops than MAX_ATTEMPTS
        assert s.lease("w", "slot", 30).id == job
        s.give_back(owner="w", why="the runner was restarted", spent=False)
    assert s.job(job).attempts == 0 and not s.exhausted()
    assert [r["counted"] for r in s.job(job).retries] == [False] * 5
    assert s.lease("w", "slot", 30).id == job
    assert s.retry("w", job, "the grade process was killed by signal 9 (SIGKILL)")
    assert not s.retry("w", job, "again")                         # no longer its lease
    assert s.job(job).attempts == 1 and s.job(job).state == "queued"
    assert s.lease("w", "slot", 30).id == job and s.finish("w", job, REPORT, "# r")
    again = s.requeue(job)                                        # a TA: grade it again
    assert again.state == "queued" and again.attempts == 0 and s.report(job) is None
    assert s.queue()[0].id == job and set(s.files(job)) == set(FAST)
    replaced, _, _ = s.submit("bob", FAST, Quota(0, 24))
    s.submit("bob", FAST, Quota(0, 24))
    with pytest.raises(ValueError, match="never ran"):
        s.requeue(replaced)


def test_etas_come_from_grades_that_reached_the_kernels(tmp_path):
    from classroom.runner.scheduler import job_seconds
    s = _store(tmp_path, ("alice", "bob", "carol"))
    for i in range(8):                                            # quick stubs: no kernel ran
        _grade(s, "alice", now=1000 + 10 * i, seconds=2, reached=False)
    _grade(s, "bob", now=2000, seconds=95)
    _grade(s, "carol", now=2100, seconds=60)
    _grade(s, "carol", now=2200, seconds=400, device="cuda")      # another device's
    assert job_seconds(s, "cpu") == 95                            # the high percentile, not the stubs' 2 s
    assert job_seconds(s, "cuda") == 400


def test_a_runner_of_schema_1_is_migrated_with_its_data(tmp_path):
    """A semester's data survive this version: the previous schema's file is upgraded in place."""
    old = subprocess.run(["git", "show", "6aad3e0:classroom/runner/store.py"], cwd=ROOT, capture_output=True,
                         text=True)
    if old.returncode != 0:
        pytest.skip("the previous version is not in this checkout's history")
    import sqlite3
    schema = old.stdout.split('_SCHEMA = """', 1)[1].split('"""', 1)[0]
    db = sqlite3.connect(tmp_path / "runner.sqlite")
    db.executescript(schema + "INSERT INTO meta VALUES ('schema_version', '1');"
                     "INSERT INTO students VALUES ('alice', 'h', 0, 1);"
                     "INSERT INTO jobs (id, seq, student, state, created, attempts) "
                     "VALUES ('j1', 1, 'alice', 'done', 5, 1);")
    db.close()
    s = Store(tmp_path, create=True)
    assert s.job("j1").retries == () and s.job("j1").state == "done"
    s.grant("alice", 1)


# ----------------------------------------------------------------------------- a real server

def _runner(srv: RunnerServer, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "classroom", "runner", "--data", str(srv.data), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=scaled(120))


def _make_submit(srv: RunnerServer, token: str, out, *extra: str, submission: str | None = None):
    env = dict(os.environ, SERVER=srv.url, TOKEN=token)
    env.pop("TOKEN_FILE", None)
    cmd = ["make", "-s", "--no-print-directory", "submit", *extra]
    if submission:
        cmd.append(f"SUBMISSION={submission}")
    return subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=scaled(300))


@pytest.fixture
def bundle(tmp_path):
    """A folder to run make submit in: the checkout's Makefile and tools, the student's files."""
    home = tmp_path / "student"
    home.mkdir()
    for name in ("Makefile", "tools", "grader", "assignment", ".venv", "requirements.txt", "toolchain.txt"):
        if (ROOT / name).exists():
            os.symlink(ROOT / name, home / name)
    sub = home / "mine"
    sub.mkdir()
    for name in ("w8a8.py", "w4a16.py", "dds.py"):
        (sub / name).write_bytes((ROOT / "assignment" / name).read_bytes())
    return home


def test_the_ta_runs_a_semester_from_the_command_line(tmp_path, bundle):
    srv = RunnerServer(tmp_path, ("alice", "bob", "carol"), quota=1)
    try:
        tokens = srv.tokens()
        _, first = srv.submit(tokens["alice"], FAST)
        done = srv.wait_job(tokens["alice"], first["job"])
        assert srv.submit(tokens["alice"], FAST)[0] == 429
        out = _runner(srv, "jobs")
        assert out.returncode == 0, out.stderr
        line = next(x for x in out.stdout.splitlines() if first["job"] in x)
        assert "alice" in line and "done" in line and f"0/{done['report']['max_score']:g}" in line
        assert line.split()[-1] == "0" or " 0 " in line                    # runs left
        assert _runner(srv, "grant", "alice", "1").returncode == 0
        assert srv.submit(tokens["alice"], FAST)[0] == 201               # the run given back
        assert _runner(srv, "requeue", first["job"]).returncode == 0
        again = srv.wait_job(tokens["alice"], first["job"])
        assert again["attempts"] == 1 and again["report"]["score"] == 0
        # the deadline: one line for the student, an extension for one of them
        assert _runner(srv, "close").returncode == 0
        refused = _make_submit(srv, tokens["bob"], bundle, submission="mine")
        assert refused.returncode != 0
        said = [x for x in refused.stderr.splitlines() if not x.startswith("make")]
        assert len(said) == 1 and said[0].startswith("refused: uploads are closed: the deadline was "), said
        future = time.strftime("%Y-%m-%d %H:%M", time.localtime(time.time() + 3600))
        assert _runner(srv, "extend", "bob", "--until", future).returncode == 0
        status, bob = srv.submit(tokens["bob"], FAST)
        assert status == 201, bob
        srv.wait_job(tokens["bob"], bob["job"])
        assert srv.submit(tokens["carol"], FAST)[0] == 403
        assert _runner(srv, "open").returncode == 0
        # export: what the reports say, as class.csv columns that make gradebook reads
        exported = tmp_path / "export" / "class.csv"
        exported.parent.mkdir()
        out = _runner(srv, "export", str(exported))
        assert out.returncode == 0, out.stderr
        rows = {r["id"]: r for r in csv.DictReader(io.StringIO(exported.read_text()))}
        assert rows["carol"]["flags"] == "not_graded" and rows["carol"]["runs"] == "0"
        assert rows["bob"]["latest_job"] == bob["job"] and float(rows["bob"]["total"]) == 0
        assert rows["alice"]["runs"] == "2" and rows["alice"]["name"] == "Alice"
        assert "visible_only" in rows["alice"]["flags"].split(";")
        gb = subprocess.run([sys.executable, "-m", "classroom", "gradebook", str(exported), "--format", "gradescope"],
                            cwd=ROOT, capture_output=True, text=True)
        assert gb.returncode == 1 and "visible tests only" in gb.stdout, gb.stdout + gb.stderr
        assert _runner(srv, "requeue", "nope").returncode == 2
        assert _runner(srv, "grant", "mallory", "1").returncode == 2
    finally:
        srv.stop()


@pytest.mark.slow   # three restarts during a grade (HANGS), then the grade to its end
def test_clean_restarts_during_a_grade_cost_the_student_nothing(tmp_path):
    srv = RunnerServer(tmp_path, ("alice",), quota=1)
    try:
        token = srv.tokens()["alice"]
        _, job = srv.submit(token, HANGS)
        for _ in range(3):
            srv.wait_job(token, job["job"], states=("running",))
            srv.stop()
            row = srv.job_row(job["job"])
            assert row["state"] == "queued" and row["attempts"] == 0
            srv.start()
        done = srv.wait_job(token, job["job"], timeout_s=240)
        assert "grader_error" not in done["report"] and done["report"]["tasks"][0]["status"] == "timeout"
        assert [r["why"].startswith("the runner was restarted") for r in done["retries"]] == [True] * 3
        assert srv.job_row(job["job"])["attempts"] == 1
        assert srv.submit(token, FAST)[0] == 429                 # one graded run: the quota's one
    finally:
        srv.stop()


def test_a_student_lists_their_runs_and_gets_a_folder_per_run(tmp_path, bundle):
    srv = RunnerServer(tmp_path, ("alice", "bob"))
    try:
        tokens = srv.tokens()
        token_file = tmp_path / "alice-token"
        token_file.write_text(tokens["alice"] + "\n")
        env = dict(os.environ, SERVER=srv.url, TOKEN_FILE=str(token_file))
        env.pop("TOKEN", None)
        runs = []
        for _ in range(2):
            out = subprocess.run(["make", "-s", "--no-print-directory", "submit", "SUBMISSION=mine"], cwd=bundle,
                                 env=env, capture_output=True, text=True, timeout=scaled(300))
            assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
            assert tokens["alice"] not in out.stdout + out.stderr
            runs.append(out.stdout.split("job ", 1)[1].split()[0].rstrip(":"))
            assert "out of 9 in all: 5 points are in hidden tests only the TA runs" in out.stdout
            assert HIDDEN_TEST not in out.stdout
        folders = sorted(p.name for p in (bundle / "gpu-report").iterdir())
        assert folders == sorted(runs)                                   # one folder per run
        md = (bundle / "gpu-report" / runs[0] / "report.md").read_text()
        assert f"Runner job `{runs[0]}`: uploaded " in md
        assert "make grade SUBMISSION=mine SEED=" in md and "SUBMISSION=submission" not in md
        assert json.loads((bundle / "gpu-report" / runs[0] / "report.json").read_text())["submission"] == "mine"
        listed = subprocess.run(["make", "-s", "--no-print-directory", "submit", "LIST=1"], cwd=bundle, env=env,
                                capture_output=True, text=True, timeout=scaled(120))
        assert listed.returncode == 0, listed.stderr
        lines = [x for x in listed.stdout.splitlines() if x.split() and x.split()[0] in runs]
        assert [x.split()[0] for x in lines] == runs[::-1]              # newest first
        assert all(x.split()[-1] == "0/4" for x in lines)
        _, bob = srv.submit(tokens["bob"], FAST)
        assert bob["job"] not in listed.stdout
    finally:
        srv.stop()


def test_the_token_never_goes_on_a_command_line(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        client.main(["--server", "http://127.0.0.1:9", "--token", "abc"])   # no such option (nor a prefix)
    monkeypatch.delenv("TOKEN", raising=False)
    token_file = tmp_path / "t"
    token_file.write_text("  f00d  \n")
    monkeypatch.setenv("TOKEN_FILE", str(token_file))
    assert client.read_token(None) == "f00d"
    monkeypatch.setenv("TOKEN", "beef")
    assert client.read_token(None) == "beef"                                      # the environment first
    monkeypatch.delenv("TOKEN")
    monkeypatch.setenv("TOKEN_FILE", str(tmp_path / "none"))
    assert client.main(["--server", "http://127.0.0.1:9"]) == 2
    assert "~/.runner-token" in capsys.readouterr().err


def test_the_wait_is_one_line_on_a_terminal_and_says_when_the_job_is_retried(monkeypatch):
    states = iter([{"state": "queued", "position": 2, "eta_s": 300, "retries": []},
                   {"state": "queued", "position": 2, "eta_s": 300, "retries": []},
                   {"state": "queued", "position": 1, "eta_s": 150, "retries": []},
                   {"state": "running", "eta_s": 100, "retries": []},
                   {"state": "queued", "position": 1, "eta_s": 100,
                    "retries": [{"at": 1, "why": "the grade process was killed by signal 9 (SIGKILL)"}]},
                   {"state": "done", "retries": [{"at": 1, "why": "the grade process was killed by signal 9 "
                                                                  "(SIGKILL)"}]}])
    monkeypatch.setattr(client, "request", lambda *a, **k: next(states))

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    client.wait("http://x", "t", "job", poll_s=0, progress=client.Progress(tty))
    text = tty.getvalue()
    assert text.count("\r\033[K") == 4                                # redrawn in place, once per change
    assert text.count("place 2 in the queue") == 1
    notice = [x for x in text.split("\n") if "notice:" in x]
    assert len(notice) == 1 and "killed by signal 9" in notice[0]
    states = iter([{"state": "queued", "position": 1, "eta_s": 5}, {"state": "queued", "position": 1, "eta_s": 5},
                   {"state": "done"}])
    pipe = io.StringIO()
    client.wait("http://x", "t", "job", poll_s=0, progress=client.Progress(pipe))
    assert pipe.getvalue() == "  place 1 in the queue; report in about 5 s\n"  # a line per change


def test_make_tokens_runs_in_the_venv(tmp_path):
    srv = RunnerServer(tmp_path, ("alice",))
    try:
        srv.stop()
        out = subprocess.run(["make", "-s", "--no-print-directory", "tokens", "ACTION=list", f"DATA={srv.data}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=scaled(120),
                             env=dict(os.environ, PATH="/usr/bin:/bin"))
        assert out.returncode == 0 and "alice\tactive" in out.stdout, out.stdout + out.stderr
    finally:
        srv.stop()
