"""The course GPU runner (classroom/runner/, tools/submit.py): a real server on loopback, --device cpu.

What a student sees (make submit's table and reports, its one-line refusals),
the bounds of an upload, quotas, fair order, a killed worker, a restart, and
that one student never reads another's report. Grades that are not the
point of a test fail fast (tests/runner_server.py: FAST, HANGS)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
import zipfile

import pytest

from classroom.runner import store as store_mod
from classroom.runner.store import MAX_ATTEMPTS, NameTaken, Quota, QuotaUsed, Store
from classroom.runner.upload import UploadRefused, read_kernel_files
from grader.rubric import load_rubric, parse_rubric, tomllib, visible_only
from tests.fakes import ROOT
from tests.helpers import scaled
from tests.runner_server import FAST, HANGS, HIDDEN_TEST, STUB, RunnerServer, runner_rubric, zip_of
from tools import submit as client
from tools.dist import public_rubric

KERNEL_FILES = ("w8a8.py", "w4a16.py", "dds.py")


# ----------------------------------------------------------------------------- the grader's --tests visible

def test_visible_only_is_the_student_bundles_rubric():
    text = (ROOT / "grader" / "rubric.toml").read_text()
    full = load_rubric()
    mine, bundle = visible_only(full), parse_rubric(tomllib.loads(public_rubric(text)))
    assert any(t.hidden for t in full.tests)
    assert [t.name for t in mine.tests] == [t.name for t in bundle.tests]
    assert {n: t.hidden_points for n, t in mine.tasks.items()} == {n: t.hidden_points for n, t in bundle.tasks.items()}
    assert sum(t.hidden_points for t in mine.tasks.values()) > 0


@pytest.mark.slow   # a CPU grade through python -m grader grade
def test_grade_with_tests_visible_runs_no_hidden_test(tmp_path):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(runner_rubric(scaled(60)))
    out = subprocess.run([sys.executable, "-m", "grader", "grade", str(ROOT / "assignment"), "--rubric", str(rubric),
                          "--device", "cpu", "--tests", "visible", "--report-dir", str(tmp_path / "r")],
                         cwd=ROOT, capture_output=True, text=True, timeout=scaled(300))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [t["name"] for t in report["tests"]] == ["dds/c0", "dds/c1", "dds/perf"]
    assert report["hidden_points"] == 5
    for name in ("report.json", "report.md", "results.json"):
        assert HIDDEN_TEST not in (tmp_path / "r" / name).read_text()
    # one correctness worker only: the hidden tests' worker never started
    assert out.stdout.count("correctness case(s) in a sandboxed worker") == 1, out.stdout
    assert "5 in hidden tests only the TA runs" in out.stdout


# ----------------------------------------------------------------------------- uploads, without a server

def _zip(members, method=zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", method) as zf:
        warnings.simplefilter("ignore")   # a name twice: on purpose
        for name, data in members:
            zf.writestr(zipfile.ZipInfo(name), data, compress_type=method)
    return out.getvalue()


def test_an_upload_gives_back_exactly_the_kernel_files():
    files = read_kernel_files(zip_of(STUB), KERNEL_FILES)
    assert files == STUB


@pytest.mark.parametrize("body, status, words", [
    (b"not a zip at all", 400, "not a readable zip"),
    (_zip([]), 400, "empty"),
    (_zip([("../w8a8.py", b"x")]), 400, "unexpected member '../w8a8.py'"),
    (_zip([("/w8a8.py", b"x")]), 400, "unexpected member"),
    (_zip([("sub/w8a8.py", b"x")]), 400, "unexpected member"),
    (_zip([("w8a8.py/", b"")]), 400, "unexpected member"),
    (_zip([("..\\w8a8.py", b"x")]), 400, "unexpected member"),
    (_zip([("notes.txt", b"x")]), 400, "unexpected member"),
    (_zip([("w8a8.py", b"x"), ("w8a8.py", b"y")]), 400, "twice"),
    (_zip([(n, b"x") for n in ("w8a8.py", "dds.py", "w4a16.py", "a", "b", "c", "d", "e", "f")]), 400, "9 members"),
    (_zip([("w8a8.py", b" " * (600 << 10))]), 413, "w8a8.py unpacks to 600 KiB"),
    (_zip([(n, os.urandom(400 << 10)) for n in KERNEL_FILES]), 413, "more than 1024 KiB"),
    (_zip([("dds.py", b"\0" * (300 << 10))]), 400, "zip bomb"),
    (_zip([("dds.py", b"x")], zipfile.ZIP_BZIP2), 400, "compression method"),
], ids=lambda v: "body" if isinstance(v, bytes) else str(v))   # named by words: the bodies differ run to run
def test_an_upload_outside_the_bounds_is_refused_with_a_line(body, status, words):
    with pytest.raises(UploadRefused) as e:
        read_kernel_files(body, KERNEL_FILES)
    assert e.value.status == status and words in e.value.message, e.value.message


def test_a_member_larger_than_its_directory_says_is_never_unpacked_past_it():
    body = bytearray(_zip([("dds.py", b"print('hello')\n" * 100)], zipfile.ZIP_STORED))
    # the central directory says 10 bytes; the data are 1500: zipfile stops at 10, the CRC fails
    cd = body.rindex(b"PK\x01\x02")
    body[cd + 24:cd + 28] = (10).to_bytes(4, "little")
    with pytest.raises(UploadRefused) as e:
        read_kernel_files(bytes(body), KERNEL_FILES)
    assert e.value.status == 400 and "dds.py" in e.value.message


def test_no_damaged_archive_gets_past_the_reader_as_anything_but_a_refusal():
    """Any parser error in an upload is a 4xx with a line: bytes of a real upload flipped at random,
    mostly in the zip's directories (its end), and cut short."""
    import random
    rng, base = random.Random(34), zip_of(STUB)
    outcomes = set()
    for _ in range(3000):
        body = bytearray(base)
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(body)) if rng.random() < 0.3 else len(body) - 1 - rng.randrange(250)
            body[at] = rng.randrange(256)
        if rng.random() < 0.2:
            body = body[:rng.randrange(len(body))]
        try:
            read_kernel_files(bytes(body), KERNEL_FILES)
            outcomes.add("read")
        except UploadRefused as e:
            assert 400 <= e.status < 500 and e.message
            outcomes.add(e.status)
    assert 400 in outcomes


# ----------------------------------------------------------------------------- the store, without a server

def _store(tmp_path, students=("alice", "bob")) -> tuple[Store, dict]:
    s = Store(tmp_path, create=True)
    return s, s.add_students(list(students))


def test_tokens_are_stored_hashed_and_every_hash_is_compared(tmp_path, monkeypatch):
    s, tokens = _store(tmp_path, ("alice", "bob", "carol"))
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("runner.sqlite*"))
    assert tokens and all(t.encode() not in raw for t in tokens.values())
    calls = []
    real = store_mod.hmac.compare_digest
    monkeypatch.setattr(store_mod.hmac, "compare_digest", lambda a, b: calls.append(1) or real(a, b))
    assert s.authenticate(tokens["alice"]) == "alice"
    assert len(calls) == 3            # not stopped at the match: every student's hash compared
    calls.clear()
    alice = tokens["alice"]
    wrong = alice[:-1] + ("1" if alice[-1] == "0" else "0")   # one character off (never the token itself)
    assert s.authenticate(wrong) is None and len(calls) == 3
    s.revoke("bob")
    assert s.authenticate(tokens["bob"]) is None
    new = s.reissue("bob")
    assert s.authenticate(new) == "bob" and s.authenticate(tokens["bob"]) is None


def test_a_job_whose_lease_was_lost_is_stored_once_by_its_new_holder(tmp_path):
    s, _ = _store(tmp_path)
    job, _, _ = s.submit("alice", FAST, Quota(0, 24))
    first = s.lease("w1", "gpu0", lease_s=30)
    assert first.id == job and first.attempts == 1
    assert [j.id for j in s.give_back(expired_before=time.time() + 60)] == [job]   # w1 went silent
    second = s.lease("w2", "gpu1", lease_s=30)
    assert second.id == job and second.attempts == 2
    assert not s.renew("w1", job, 30)                         # w1 must stop grading it
    assert not s.finish("w1", job, '{"score": 1}', "old")     # and its report is dropped
    assert s.finish("w2", job, '{"score": 2}', "new")
    assert not s.finish("w2", job, '{"score": 3}', "again")   # never twice
    assert s.report(job) == ('{"score": 2}', "new") and s.job(job).state == "done"


def test_a_job_given_back_max_attempts_times_is_closed_not_lost(tmp_path):
    s, _ = _store(tmp_path)
    job, _, _ = s.submit("alice", FAST, Quota(0, 24))
    for i in range(MAX_ATTEMPTS):
        assert s.lease(f"w{i}", "gpu0", 30).id == job
        s.give_back(owner=f"w{i}")
    assert [j.id for j in s.exhausted()] == [job]
    assert s.lease("w9", "gpu0", 30) is None                 # no fourth try
    assert s.close_exhausted(job, '{"score": 0}', "interrupted", "interrupted 3 times")
    assert s.job(job).state == "done" and s.report(job) == ('{"score": 0}', "interrupted")


def test_fair_order_is_round_robin_by_student_and_one_queued_job_each(tmp_path):
    s, _ = _store(tmp_path, ("alice", "bob", "carol"))
    q = Quota(0, 24)
    a1, _, _ = s.submit("alice", FAST, q, now=100)
    assert s.lease("w", "gpu0", 30, now=101).id == a1          # alice is being served
    a2, _, _ = s.submit("alice", FAST, q, now=102)
    b1, _, _ = s.submit("bob", FAST, q, now=103)
    c1, _, _ = s.submit("carol", FAST, q, now=104)
    assert [j.id for j in s.queue()] == [b1, c1, a2]           # alice was served: she waits for the others
    a3, replaced, _ = s.submit("alice", FAST, q, now=105)      # a new upload replaces her queued one
    assert replaced == a2 and s.job(a2).state == "replaced" and s.files(a2) == {}
    assert [j.id for j in s.queue()] == [b1, c1, a3]


def test_quota_counts_runs_in_the_rolling_window_and_says_when_it_renews(tmp_path):
    s, _ = _store(tmp_path)
    q = Quota(2, 1.0)
    s.submit("alice", FAST, q, now=1000)
    s.lease("w", "gpu0", 30, now=1001)            # running: one run used
    s.submit("alice", FAST, q, now=1010)          # queued: the second
    for t in (1020, 1030):                        # replacing a queued upload costs nothing more
        assert s.submit("alice", FAST, q, now=t)[2] == 2
    s.lease("w2", "gpu1", 30, now=1031)
    with pytest.raises(QuotaUsed) as e:
        s.submit("alice", FAST, q, now=1040)
    assert e.value.renews_at == 1000 + 3600 and e.value.limit == 2
    assert s.quota_state("alice", q, now=1040) == {"limit": 2, "window_h": 1.0, "used": 2, "renews_at": 4600,
                                                   "left": 0}
    s.submit("bob", FAST, q, now=1040)            # another student's quota is their own
    s.submit("alice", FAST, q, now=4601)          # the first run left the window


def _graded(s: Store, student: str, name: str | None, report: str = '{"score": 1, "max_score": 4}',
            error: str | None = None) -> str:
    """A run of ``student`` graded to its end (``error``: the grader's own failure)."""
    job, _, _ = s.submit(student, FAST, Quota(0, 24), display_name=name)
    leased = s.lease("w", "gpu0", 30)
    assert leased.id == job
    assert s.finish("w", job, report, "# r", error=error)
    return job


def test_a_display_name_belongs_to_one_student(tmp_path):
    s, _ = _store(tmp_path)
    _graded(s, "alice", "fast kernels")
    with pytest.raises(NameTaken):
        s.submit("bob", FAST, Quota(0, 24), display_name="fast kernels")
    s.submit("alice", FAST, Quota(0, 24), display_name="fast kernels")


@pytest.mark.parametrize("raw, shown", [("Alice A", "Alice A"), ("  Alice   A ", "Alice A"),
                                         ("\uff21\uff4c\uff49\uff43\uff45\u3000A", "Alice A"),  # fullwidth
                                         ("Alice\tA", "Alice A"), ("\u0410lice", None),             # Cyrillic A
                                         ("<b>", None), ("   ", None), ("x" * 33, None)])
def test_a_display_name_is_read_after_nfkc_and_whitespace_collapse(raw, shown):
    from classroom.runner.names import display_name
    assert display_name(raw) == shown


@pytest.mark.parametrize("other", ["Alice A ", "alice a", "ALICE  A", "\uff41\uff4c\uff49\uff43\uff45 \uff21"])
def test_names_that_look_the_same_are_the_same_name(tmp_path, other):
    s, _ = _store(tmp_path)
    _graded(s, "alice", "Alice A")
    with pytest.raises(NameTaken):
        s.submit("bob", FAST, Quota(0, 24), display_name=other)


def test_a_name_belongs_only_to_a_student_with_a_graded_run(tmp_path):
    from classroom.runner.scheduler import leaderboard
    s, _ = _store(tmp_path, ("alice", "bob", "carol"))
    q = Quota(0, 24)
    _graded(s, "carol", "Carol", error="the grader exited with code 1")
    s.submit("alice", FAST, q, display_name="Alice A")       # queued, then replaced before it ran
    s.submit("alice", FAST, q)
    s.submit("bob", FAST, q, display_name="alice a")         # the name was never alice's: bob may use it
    s.submit("bob", FAST, q, display_name="carol")           # a run the grader could not grade holds no name
    # two students queued under one name: the first graded run holds it, the other is not on the board
    (tmp_path / "two").mkdir()
    s2, _ = _store(tmp_path / "two", ("alice", "bob"))
    s2.submit("alice", FAST, q, display_name="Same")
    s2.submit("bob", FAST, q, display_name="same")
    for _ in range(2):
        job = s2.lease("w", "gpu0", 30)
        assert s2.finish("w", job.id, _board_report(3.0, 0.5, "passed"), "# r")
    assert [(r.name, r.total) for r in leaderboard(s2)] == [("Same", 3.0)]
    with pytest.raises(NameTaken):
        s2.submit("bob", FAST, q, display_name="SAME")


def _board_report(points: float, kernel_ms: float, status: str, message: str = "ratio 1.2",
                  task_status: str = "ok") -> str:
    tests = [{"name": "dds/c0", "task": "dds", "kind": "correctness", "score": 2, "status": "passed"},
             {"name": "dds/perf", "task": "dds", "kind": "performance", "score": points, "status": status,
              "message": message, "details": {"kernel_ms": kernel_ms}}]
    return json.dumps({"score": 2 + points, "max_score": 5, "tests": tests,
                       "tasks": [{"task": "dds", "score": 2 + points, "status": task_status}]})


def test_the_board_keeps_only_timings_the_judge_trusted():
    from classroom.runner.scheduler import board_numbers
    assert board_numbers(json.loads(_board_report(1.5, 0.02, "partial"))) == ({"dds": 1.5}, {"dds/perf": 0.02})
    below_floor = _board_report(0, 0.0001, "failed", "timed at 0.1 us, below the memory floor of 9.0 us (bytes "
                                "that must move / measured bandwidth): the timing is not trusted")
    voided = _board_report(0, 0.001, "failed", "no points for this task: output not computed by the kernels",
                           task_status="output_not_computed")
    for text in (below_floor, voided):
        assert board_numbers(json.loads(text))[1] == {}


# ----------------------------------------------------------------------------- a real server

STUDENTS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "henry")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = RunnerServer(tmp_path_factory.mktemp("runner"), STUDENTS, quota=2)
    yield srv
    srv.stop()


def _table(text: str) -> list[str]:
    """The table make grade prints: from its header to the first blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("test ") and "status" in line)
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    return lines[start:end]


@pytest.mark.slow   # the stubs graded twice: by the runner and by python -m grader grade
def test_submit_prints_make_grades_table_and_writes_the_reports(server, tmp_path):
    token = server.tokens()["alice"]
    env = dict(os.environ, SERVER=server.url, TOKEN=token)
    out = subprocess.run([sys.executable, "-m", "tools.submit", str(ROOT / "assignment"), "--out",
                          str(tmp_path / "gpu-report"), "--display-name", "Alice A. kernels"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(300))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:] + server.log_text()
    # the queue's place (or, when the idle worker took it at once, its grading) and an ETA
    assert re.search(r"^  (place 1 in the queue|being graded); report in about \d+ (s|min)$", out.stdout,
                     re.M), out.stdout
    assert "hidden tests are not run" in out.stdout
    (folder,) = (tmp_path / "gpu-report").iterdir()                  # gpu-report/<job>/
    report = json.loads((folder / "report.json").read_text())
    assert (folder / "report.md").read_text().startswith("# Grade report: 0 / 4")
    assert report["runner"]["job"] == folder.name and f"job {folder.name}, uploaded " in out.stdout
    assert "out of 9 in all: 5 points are in hidden tests only the TA runs" in out.stdout
    assert report["score"] == 0 and [t["name"] for t in report["tests"]] == ["dds/c0", "dds/c1", "dds/perf"]
    assert HIDDEN_TEST not in out.stdout + json.dumps(report) + (folder / "report.md").read_text()
    local = subprocess.run([sys.executable, "-m", "grader", "grade", str(ROOT / "assignment"), "--rubric",
                            str(server.rubric), "--device", "cpu", "--tests", "visible", "--report-dir",
                            str(tmp_path / "local")], cwd=ROOT, capture_output=True, text=True, timeout=scaled(300))
    assert _table(out.stdout) == _table(local.stdout)
    assert "5 in hidden tests only the TA runs" in out.stdout
    assert server.get("/api/status")["leaderboard"] == []          # a CPU grade times nothing: no board
    status, body = server.submit(server.tokens()["bob"], FAST, display_name="alice a. KERNELS")
    assert status == 409 and "taken by another student" in body["error"]   # but the graded run holds the name


def test_a_student_never_reads_another_students_job(server):
    tokens = server.tokens()
    status, job = server.submit(tokens["dave"], FAST)
    assert status == 201
    done = server.wait_job(tokens["dave"], job["job"])
    assert done["report"]["tasks"][0]["status"] == "missing_file"
    for token in (tokens["erin"], tokens["alice"]):
        status, body = server.call("GET", f"/api/submissions/{job['job']}", token)
        assert status == 404 and body == {"error": "no such submission for this token"}
    status, body = server.call("GET", f"/api/submissions/{job['job']}")
    assert status == 401
    status, body = server.call("GET", "/api/submissions/../../tokens.csv", tokens["dave"])
    assert status == 404
    assert "report" not in json.dumps(server.get("/api/status"))


def test_refusals_are_one_line_for_the_student(server, tmp_path, capsys, monkeypatch):
    tokens = server.tokens()
    status, body = server.submit("0" * 48, FAST)
    assert status == 401 and "unknown or revoked token" in body["error"]
    monkeypatch.setenv("TOKEN", "0" * 48)
    assert client.main([str(ROOT / "assignment"), "--server", server.url]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("refused: bad token") and len(err.splitlines()) == 1
    # too large: the body counted as it arrives, and the client's line
    with pytest.raises(client.Refused, match=r"^refused: too large \(the upload is larger than 1024 KiB\)"):
        client.request(server.url, "/api/submissions", tokens["bob"], os.urandom(1100 << 10))
    status, body = server.submit(tokens["bob"], {"dds.py": b"\0" * (400 << 10)})
    assert status == 400 and "zip bomb" in body["error"]
    status, body = server.call("POST", "/api/submissions", tokens["bob"], _zip([("../../w8a8.py", b"x")]))
    assert status == 400 and "unexpected member '../../w8a8.py'" in body["error"]
    status, body = server.submit(tokens["bob"], FAST, display_name="<script>")
    assert status == 400 and "display name" in body["error"]
    assert not (server.data.parent / "w8a8.py").exists() and not (server.tmp.parent / "w8a8.py").exists()
    with server.db() as db:   # nothing was queued, no quota used
        assert db.execute("SELECT COUNT(*) FROM jobs WHERE student = 'bob'").fetchone()[0] == 0
    # unreachable
    dead = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("TOKEN", tokens["bob"])
    assert client.main([str(ROOT / "assignment"), "--server", dead]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"cannot reach the runner at {dead}") and len(err.splitlines()) == 1
    # the static check runs first, with make grade's message, and nothing is uploaded
    sub = tmp_path / "sub"
    sub.mkdir()
    for name, data in STUB.items():
        (sub / name).write_bytes(data)
    (sub / "w8a8.py").write_bytes(STUB["w8a8.py"] + b"\nimport subprocess\n")
    assert client.main([str(sub), "--server", dead]) == 1
    err = capsys.readouterr().err
    assert err.startswith("forbidden code in w8a8.py: line ") and "subprocess" in err and "cannot reach" not in err


def _closed_port() -> int:
    from tests.runner_server import free_port
    return free_port()


def test_the_quota_refuses_with_when_it_renews(server, capsys, monkeypatch):
    token = server.tokens()["carol"]
    for _ in range(2):
        status, body = server.submit(token, FAST)
        assert status == 201, body
        server.wait_job(token, body["job"])
    assert body["quota"]["used"] == 2 and body["quota"]["limit"] == 2
    status, body = server.submit(token, FAST)
    assert status == 429 and body["renews_at"] > time.time() + 23 * 3600
    monkeypatch.setenv("TOKEN", token)
    assert client.main([str(ROOT / "assignment"), "--server", server.url]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("refused: quota used: 2 run(s) per 24 h; the next run is possible at ")
    assert len(err.splitlines()) == 1
    assert re.search(r"\(in 23 h 5\d min\)$", err), err     # 23 h 59 min, never "24 h 59 min"


def _started_order(server, jobs) -> list[str]:
    with server.db() as db:
        rows = db.execute(f"SELECT id, started FROM jobs WHERE id IN ({','.join('?' * len(jobs))})", jobs)
        return [r["id"] for r in sorted(rows, key=lambda r: r["started"])]


@pytest.mark.slow   # a worker busy until its time limit (HANGS)
def test_two_students_at_once_are_served_in_turn(server):
    tokens = server.tokens()
    _, slow = server.submit(tokens["frank"], HANGS)
    server.wait_job(tokens["frank"], slow["job"], states=("running",))
    _, again = server.submit(tokens["frank"], FAST)        # frank uploads again first ...
    _, other = server.submit(tokens["grace"], FAST)        # ... grace after him
    assert again["position"] == 1 and other["position"] == 1   # grace goes before frank's second run
    assert server.get(f"/api/submissions/{again['job']}", tokens["frank"])["position"] == 2
    assert [q["position"] for q in server.get("/api/status")["queue"]] == [1, 2]
    for token, job in ((tokens["frank"], again), (tokens["grace"], other), (tokens["frank"], slow)):
        server.wait_job(token, job["job"], timeout_s=180)
    assert _started_order(server, [slow["job"], again["job"], other["job"]]) == [slow["job"], other["job"],
                                                                              again["job"]]
    frank = server.get(f"/api/submissions/{slow['job']}", tokens["frank"])
    assert frank["report"]["tasks"][0]["status"] == "timeout"


@pytest.mark.slow   # a worker busy until its time limit (HANGS), twice
def test_a_worker_killed_mid_job_gives_it_back_and_it_is_graded_once(server):
    token = server.tokens()["henry"]
    _, job = server.submit(token, HANGS)
    server.wait_job(token, job["job"], states=("running",))
    worker = server.worker_row()
    assert worker["job"] == job["job"]
    os.kill(worker["pid"], signal.SIGKILL)                 # the worker process that holds the job
    done = server.wait_job(token, job["job"], timeout_s=240)
    row = server.job_row(job["job"])
    assert row["attempts"] == 2 and row["state"] == "done" and row["error"] is None
    assert done["report"]["tasks"][0]["status"] == "timeout"
    with server.db() as db:
        assert db.execute("SELECT COUNT(*) FROM reports WHERE job = ?", (job["job"],)).fetchone()[0] == 1
        assert db.execute("SELECT pid FROM workers").fetchone()[0] != worker["pid"]   # a new worker took it
    logs = "".join(p.read_text() for p in (server.data / "logs").glob("*.log"))
    assert logs.count(f"job {job['job']}: graded") == 1
    assert not list((server.data / "work").glob(f"*/{job['job']}-1-*"))   # the killed attempt's folder is gone
    server.log.flush()
    said = "".join(p.read_text() for p in server.tmp.glob("server-*.log"))   # the whole log
    assert "worker job0 ended (status -9" in said and f"job {job['job']} queued again" in said


@pytest.mark.slow   # a worker busy until its time limit (HANGS), twice
def test_a_restart_keeps_the_queue_the_quotas_and_the_tokens(tmp_path):
    srv = RunnerServer(tmp_path, ("alice", "bob", "carol"), quota=1)
    try:
        tokens = srv.tokens()
        _, first = srv.submit(tokens["alice"], FAST)
        srv.wait_job(tokens["alice"], first["job"])               # alice's one run of the day
        _, running = srv.submit(tokens["bob"], HANGS)
        srv.wait_job(tokens["bob"], running["job"], states=("running",))
        _, queued = srv.submit(tokens["carol"], FAST)
        srv.stop()                                                # with one job running and one queued
        with srv.db() as db:
            states = dict(db.execute("SELECT id, state FROM jobs").fetchall())
        assert states == {first["job"]: "done", running["job"]: "queued", queued["job"]: "queued"}
        assert "running jobs are queued again" in srv.log_text()
        srv.start()
        assert srv.tokens() == tokens
        status, body = srv.submit(tokens["alice"], FAST)
        assert status == 429, body                                # the quota survived
        assert srv.get(f"/api/submissions/{first['job']}", tokens["alice"])["report"]["score"] == 0
        assert srv.get(f"/api/submissions/{running['job']}", tokens["bob"])["position"] == 1   # given back: first
        for token, job in ((tokens["carol"], queued), (tokens["bob"], running)):
            srv.wait_job(token, job["job"], timeout_s=180)
        assert srv.job_row(running["job"])["attempts"] == 1      # a clean stop spends no attempt
    finally:
        srv.stop()


@pytest.mark.slow   # a grade killed MAX_ATTEMPTS times
def test_a_grade_killed_by_a_signal_is_retried_then_reported_without_the_hidden_tests(tmp_path, capsys):
    """A grade killed by a signal (the OOM killer, a TA) is the runner's failure: graded again, up to
    MAX_ATTEMPTS times, then a grader-error report that says what happened, made from the rubric
    the student sees (no hidden test named, the visible maximum), and the run given back."""
    from grader.rubric import load_rubric
    srv = RunnerServer(tmp_path, ("alice",), quota=1)
    try:
        token = srv.tokens()["alice"]
        _, job = srv.submit(token, HANGS)
        killed = []
        while srv.job_row(job["job"])["state"] != "done":
            if srv.job_row(job["job"])["state"] == "running" and srv.grade_pids(job["job"]):
                pid = srv.kill_grade(job["job"])
                if pid not in killed:
                    killed.append(pid)
            time.sleep(0.2)
        assert len(killed) == MAX_ATTEMPTS
        done = srv.get(f"/api/submissions/{job['job']}", token)
        report, report_md = done["report"], done["report_md"]
        assert report["grader_error"].startswith(f"grading was interrupted {MAX_ATTEMPTS} times (the grade "
                                                 "process was killed by signal 9 (SIGKILL))"), report
        assert "does not count against your quota" in report["grader_error"]
        assert [r["why"] for r in done["retries"]] == ["the grade process was killed by signal 9 (SIGKILL)"] * 3
        assert HIDDEN_TEST not in json.dumps(report) + report_md
        visible = visible_only(load_rubric(str(srv.rubric)))
        most = sum(t.points for t in visible.tests if not t.bonus)
        assert report["max_score"] == most and report["hidden_points"] == 5
        client.write_report(done, tmp_path / "gpu-report")      # what make submit prints
        printed = capsys.readouterr().out
        assert f"TOTAL 0/{most:g}" in printed and "5 in hidden tests only the TA runs" in printed, printed
        assert HIDDEN_TEST not in printed
        for attempt in range(1, MAX_ATTEMPTS + 1):                # each killed grade kept for the TA
            kept = srv.data / "failed" / job["job"] / str(attempt)
            assert (kept / "grade.log").is_file() and (kept / "submission" / "dds.py").is_file()
        status, again = srv.submit(token, FAST)                   # quota 1: the run was given back
        assert status == 201, again
    finally:
        srv.stop()


def test_tokens_cli_revokes_and_reissues(tmp_path):
    srv = RunnerServer(tmp_path, ("alice", "bob"))
    try:
        old = srv.tokens()
        cli = [sys.executable, "-m", "classroom", "tokens", "--data", str(srv.data)]
        out = subprocess.run([*cli, "revoke", "alice"], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0 and "revoked" in out.stdout
        assert srv.submit(old["alice"], FAST)[0] == 401 and srv.tokens()["alice"] == ""
        out = subprocess.run([*cli, "reissue", "alice"], cwd=ROOT, capture_output=True, text=True)
        new = srv.tokens()["alice"]
        assert out.returncode == 0 and new in out.stdout and new != old["alice"]
        assert srv.submit(new, FAST)[0] == 201 and srv.tokens()["bob"] == old["bob"]
        out = subprocess.run([*cli, "reissue", "mallory"], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 2 and "no student 'mallory'" in out.stderr
    finally:
        srv.stop()


def test_serve_refuses_what_it_cannot_do_with_one_line(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("id\nalice\n")
    base = [sys.executable, "-m", "classroom", "serve", "--roster", str(roster), "--data", str(tmp_path / "d")]
    cases = [(["--device", "cpu", "--quota", "-1"], "--quota must be >= 0"),
             (["--device", "cpu", "--rubric", str(tmp_path / "none.toml")], "cannot read rubric"),
             (["--device", "cpu", "--roster", str(tmp_path / "missing.csv")], "missing.csv")]
    import torch
    if not torch.cuda.is_available():
        cases.append(([], "--device cuda (the default): no CUDA GPU here"))
    for extra, words in cases:
        out = subprocess.run(base + extra, cwd=ROOT, capture_output=True, text=True, timeout=scaled(120))
        assert out.returncode == 2 and words in out.stderr, (extra, out.stderr[-2000:])
        assert not (tmp_path / "d").exists()      # nothing created for a start that fails


def test_a_cluster_executor_grades_each_job_as_a_submitit_job(tmp_path):
    """--executor local: the path of --executor slurm (submitit), with local processes."""
    srv = RunnerServer(tmp_path, ("alice",), extra=("--executor", "local", "--cluster-jobs", "1"))
    try:
        token = srv.tokens()["alice"]
        status, job = srv.submit(token, FAST)
        assert status == 201
        done = srv.wait_job(token, job["job"], timeout_s=180)
        assert done["report"]["tasks"][0]["status"] == "missing_file"
        kind, _, remote = srv.job_row(job["job"])["remote"].partition(":")
        assert kind == "local" and list((srv.data / "cluster").glob(f"{remote}_*result.pkl")), \
            sorted(p.name for p in (srv.data / "cluster").iterdir())
    finally:
        srv.stop()
