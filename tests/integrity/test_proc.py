"""The one process supervisor (grader/harness/proc.py) and its three users: the sandbox (each
worker), the classroom's batch (each student's grade) and the Gradescope runner (the grade).

- There is one definition of killing a process tree in the trusted code: a grep finds the
  primitives (process groups, subreapers, reaping any child, killing a user's processes,
  environment tokens) in grader/harness/proc.py and nowhere else.
- Nothing a command starts survives it (fork, setsid, double fork), whichever user started it,
  whether the command exits or hangs until its deadline.
- A task's clean-up kills only that task's processes, whatever runs beside it: two trees of the
  same sandbox user, one killed, the other untouched; and two students graded at once, one's
  workers ending again and again, the other with full points. Run as root (setpriv switch) and
  as the Docker image runs (a non-root grader, sudo to a shared student user: tests/docker_users.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from grader.harness import proc, sandbox
from grader.worker.fence import interpreter_problem
from tests.docker_users import DockerUsers
from tests.fakes import install_fake_grade, rubric_toml

ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------------ one definition

# The primitives of tree killing; each must appear in proc.py (so that the search means something)
# and in no other trusted file.
TREE_KILLING = {
    "a process group killed": r"\bkillpg\s*\(",
    "a child subreaper": r"PR_SET_CHILD_SUBREAPER|prctl\s*\(\s*36\b",
    "any child reaped": r"waitpid\s*\(\s*-1\b",
    "a parent-death signal": r"PR_SET_PDEATHSIG|prctl\s*\(\s*1\s*,",
    "a kill by another user": r"\"-KILL\"",
}
# What must appear nowhere: every process of a user killed, or processes told apart by a token in
# their environment.
NOWHERE = {"kill -1": r"kill\b[^\n]*[\"' ]-1\b(?![.\d])", "an environment token": r"/proc/\{\w+\}/environ"}


def _trusted_files() -> list[Path]:
    files = [*ROOT.glob("grader/**/*.py"), *ROOT.glob("classroom/**/*.py"), *ROOT.glob("tools/**/*.py"),
             *ROOT.glob("tools/**/*.sh"), *ROOT.glob("bench/**/*.py")]
    # grader/worker/ runs inside the jail and may import nothing trusted (tests/engine/test_import_graph.py):
    # what it starts (the compile check's children) it ends itself, and whatever it leaves, the
    # supervisor's kill_tree kills.
    return sorted(p for p in files if "worker" not in p.relative_to(ROOT).parts[:2])


def test_one_definition_of_process_tree_killing():
    home = ROOT / "grader" / "harness" / "proc.py"
    text = home.read_text()
    for what, pattern in TREE_KILLING.items():
        assert re.search(pattern, text), f"proc.py no longer has {what}: update this test"
    found = []
    for path in _trusted_files():
        body = path.read_text()
        for what, pattern in {**(TREE_KILLING if path != home else {}), **NOWHERE}.items():
            for m in re.finditer(pattern, body):
                line = body.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not found, "process trees are killed in grader/harness/proc.py only:\n" + "\n".join(found)


def test_the_search_finds_a_second_definition(tmp_path, monkeypatch):
    # The check itself: the old batch's and Gradescope runner's ways would be found.
    fake = tmp_path / "grader" / "harness"
    fake.mkdir(parents=True)
    (fake / "proc.py").write_text((ROOT / "grader" / "harness" / "proc.py").read_text())
    (tmp_path / "classroom").mkdir()
    (tmp_path / "classroom" / "batch.py").write_text(
        "os.killpg(proc.pid, signal.SIGKILL)\nopen(f'/proc/{pid}/environ')\n")
    (tmp_path / "grader" / "sandbox.py").write_text(
        'cmd = [sudo, "-u", user, "--", "/bin/kill", "-KILL", "-1"]\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError) as e:
        test_one_definition_of_process_tree_killing()
    for what in ("classroom/batch.py:1: a process group killed", "classroom/batch.py:2: an environment token",
                 "grader/sandbox.py:1: kill -1", "grader/sandbox.py:1: a kill by another user"):
        assert what in str(e.value), str(e.value)


# ------------------------------------------------------------------------ escapes

# A sleeper marks its start with a file in MARKS (argv: MARKS, TOKEN), so a test knows the escape ran.
_SLEEPER = "import os, sys, time; open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close(); time.sleep(120)"
ESCAPES = {
    "fork": """
        import os, sys
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", SLEEPER, MARKS, TOKEN])
    """,
    "setsid": """
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", SLEEPER, MARKS, TOKEN], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    """,
    "double-fork": """
        import os, sys
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", SLEEPER, MARKS, TOKEN])
            os._exit(0)
        os.wait()
    """,
}
WAIT_FOR_THE_MARK = """
import os, time
for _ in range(2400):
    if os.listdir(MARKS):
        break
    time.sleep(0.05)
"""


def escape_code(how: str | tuple, token: str, marks: Path, hang: bool = False) -> str:
    """Python source that leaves a sleeper (``token`` in its command line) behind by ``how`` (or
    one by each of several ways), waits until one has started, then exits or (``hang``) sleeps."""
    hows = (how,) if isinstance(how, str) else how
    body = "".join(textwrap.dedent(ESCAPES[h]) for h in hows) + WAIT_FOR_THE_MARK \
        + ("time.sleep(120)\n" if hang else "")
    return body.replace("SLEEPER", repr(_SLEEPER)).replace("MARKS", repr(str(marks))).replace("TOKEN", repr(token))


def survivors(token: str) -> list[int]:
    """Live processes whose command line holds ``token``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmd = Path(f"/proc/{name}/cmdline").read_bytes()
                state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if token.encode() in cmd and state not in (b"Z", b"X"):
                found.append(int(name))
    return found


def _wait_for(cond, seconds: float = 90) -> bool:
    deadline = time.monotonic() + seconds
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
    return cond()


@pytest.fixture
def marks():
    """A folder every user may write: the sleepers' marks (bound into the jail as writable)."""
    path = sandbox.task_dir("proc-marks-")
    path.chmod(0o777)
    yield path
    subprocess.run(["rm", "-rf", str(path)])


@pytest.fixture
def token():
    tok = f"procmark{uuid.uuid4().hex}"
    yield tok
    for pid in survivors(tok):   # never leave a failed test's processes behind
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ------------------------------------------------------------------------ the three users


def _by_the_sandbox(tmp_path, monkeypatch, code: str, hang: bool, marks: Path) -> None:
    top = sandbox.task_dir("proc-test-")
    try:
        (top / "scratch").mkdir()
        jail = sandbox.Jail(scratch=top / "scratch", env={"PATH": "/usr/bin:/bin"}, writable=[marks])
        p = sandbox.spawn([sys.executable, "-c", code], jail, stdout=subprocess.DEVNULL)
        if hang:   # the grader's deadline: kill
            assert p.wait(HANG_S) is None
            p.kill()
        assert p.wait(90) is not None
    finally:
        subprocess.run(["rm", "-rf", str(top)])


FAKE_GRADE_ESCAPE = """
import sys
exec(compile(CODE, "escape", "exec"))
"""


def _by_the_batch(tmp_path, monkeypatch, code: str, hang: bool, marks: Path) -> None:
    from classroom.batch import run_batch
    from grader.rubric import load_rubric
    install_fake_grade(tmp_path, monkeypatch, f"CODE = {code!r}\n" + FAKE_GRADE_ESCAPE, "own")
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(rubric_toml(tasks=("w8a8",)))
    assert run_batch(str(subs), str(tmp_path / "out"), load_rubric(rubric), timeout_s=HANG_S if hang else 90) == 0


def _by_the_gradescope_runner(tmp_path, monkeypatch, code: str, hang: bool, marks: Path) -> None:
    from grader import gradescope
    monkeypatch.setattr(gradescope, "grade_command", lambda *a: [sys.executable, "-c", code])
    monkeypatch.setattr(gradescope, "GRACE_S", 0)
    (tmp_path / "submission").mkdir()
    rubric = tmp_path / "rubric.toml"   # one task: one grade process, its share the whole budget
    rubric.write_text(rubric_toml(tasks=("w8a8",)))
    results = gradescope.run(tmp_path, HANG_S if hang else 90, seed=1, rubric=rubric)
    assert results["score"] == 0 and ("time limit" in results["output"]) == hang, results["output"]


USERS = {"sandbox": _by_the_sandbox, "batch": _by_the_batch, "gradescope": _by_the_gradescope_runner}
HANG_S = 8   # the deadline of a command that hangs: time for its escape to start on a loaded machine


@pytest.mark.parametrize("how, end", [*((how, "exits") for how in sorted(ESCAPES)),
                                      pytest.param("double-fork", "hangs", marks=pytest.mark.slow)])  # to its deadline
@pytest.mark.parametrize("user", sorted(USERS))
def test_nothing_a_command_starts_survives_it(tmp_path, monkeypatch, marks, token, user, how, end):
    """The command leaves a sleeper behind by ``how`` and waits until it runs; then it exits,
    or hangs until its deadline."""
    USERS[user](tmp_path, monkeypatch, escape_code(how, token, marks, hang=end == "hangs"), end == "hangs", marks)
    assert os.listdir(marks), f"{user}: the escape never started"
    assert _wait_for(lambda: not survivors(token), 10), f"{user}: processes outlived the command"


def test_the_escape_really_escapes_without_a_supervisor(marks, token):
    # The attacks are real: without the supervisor, each leaves a live process behind.
    for how in sorted(ESCAPES):
        (marks / how).mkdir()
        subprocess.run([sys.executable, "-c", escape_code(how, f"{token}{how}", marks / how)], timeout=120)
        assert survivors(f"{token}{how}"), how
    assert len(survivors(token)) == len(ESCAPES)


# ------------------------------------------------------------------------ the supervisor itself


@pytest.mark.slow
def test_deadline_and_caller_death(marks, token):
    p = proc.start([sys.executable, "-c", escape_code("double-fork", token, marks, hang=True)], deadline_s=HANG_S)
    assert p.wait(60) == -signal.SIGKILL and p.timed_out and not p.killed
    assert os.listdir(marks) and survivors(token) == []
    # The caller dies (SIGKILL: no clean-up of its own): its supervisor kills the tree.
    helper = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from grader.harness import proc
        p = proc.start([sys.executable, "-c", {escape_code("setsid", token, marks, hang=True)!r}])
        print("started", flush=True)
        time.sleep(120)
    """)
    h = subprocess.Popen([sys.executable, "-c", helper], stdout=subprocess.PIPE)
    try:
        assert h.stdout.readline() == b"started\n"
        assert _wait_for(lambda: len(survivors(token)) >= 2), "the escape did not start"
    finally:
        h.kill()
        h.wait()
    assert _wait_for(lambda: not survivors(token), 10), "processes outlived their caller"


def test_a_command_that_cannot_start_says_why(tmp_path):
    p = proc.start([str(tmp_path / "no-such-program")])
    assert p.wait(30) == 127 and "no-such-program" in p.error


ISOLATION = """
import subprocess, sys, time
sys.path.insert(0, ROOT)
from grader.harness import sandbox
b = sandbox.backend()
print("BACKEND", b.name, b.switch, b.user, flush=True)
procs, tops = {}, []
for name in ("a", "b"):
    top = sandbox.task_dir("iso-")
    tops.append(top)
    (top / "scratch").mkdir()
    jail = sandbox.Jail(scratch=top / "scratch", env={"PATH": "/usr/bin:/bin"}, writable=[MARKS])
    procs[name] = sandbox.spawn([sys.executable, "-c", CODES[name]], jail, stdout=subprocess.DEVNULL)
print("STARTED", flush=True)
for line in sys.stdin:
    procs[line.strip()].kill()
    print("KILLED", procs[line.strip()].wait(), flush=True)
for top in tops:
    subprocess.run(["rm", "-rf", str(top)])
"""


@pytest.mark.parametrize("switch", ["root", "docker"])
def test_one_clean_up_leaves_the_same_users_other_tree_alone(marks, token, switch):
    """Two workers of the same sandbox user side by side; killing one kills all of its tree and
    nothing of the other's. "docker": a non-root grader reaching the student through sudo."""
    for n in "ab":
        (marks / n).mkdir()
        (marks / n).chmod(0o777)
    codes = {n: escape_code(("double-fork", "setsid"), token + n, marks / n, hang=True) for n in "ab"}
    script = marks / "isolation.py"   # in a file: its command line must not hold the tokens
    script.write_text(f"ROOT = {str(ROOT)!r}\nCODES = {codes!r}\nMARKS = {str(marks)!r}\n" + ISOLATION)
    script.chmod(0o644)
    users = None
    if switch == "docker":
        if why := DockerUsers.unavailable():
            pytest.skip(why)
        users = DockerUsers()
        h = users.popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    else:
        h = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        backend = h.stdout.readline().split()
        assert h.stdout.readline() == "STARTED\n", backend
        if switch == "docker":
            assert backend[2:] == ["sudo", "student"], backend
        # each tree is complete once both its sleepers have started
        assert _wait_for(lambda: all(len(os.listdir(marks / n)) == 2 for n in "ab"))
        b_before = sorted(survivors(token + "b"))
        h.stdin.write("a\n")
        h.stdin.flush()
        assert h.stdout.readline().startswith("KILLED")
        assert survivors(token + "a") == [], "a's tree outlived its clean-up"
        assert sorted(survivors(token + "b")) == b_before, "a's clean-up killed b's processes"
        h.stdin.write("b\n")
        h.stdin.flush()
        assert h.stdout.readline().startswith("KILLED")
        assert _wait_for(lambda: not survivors(token), 10)
        h.stdin.close()   # the helper removes its task folders and ends
        assert h.wait(60) == 0
    finally:
        h.kill()
        h.wait()
        if users:
            users.close()


# ------------------------------------------------------------------------ two students at once

# It defines dds_mm, so that the grader starts a worker for it (a file with no entry
# point is told so without one), and raises in the worker on import.
RAISES_ON_IMPORT = 'raise RuntimeError("this file raises on import")\n\n\ndef dds_mm(x, w):\n    pass\n'


@pytest.mark.slow
@pytest.mark.parametrize("where", ["root", "docker"])
def test_two_students_graded_at_once_under_one_sandbox_user(tmp_path, where):
    """While alice (the reference kernel) is graded, bob's workers end again and again (his file
    raises on import), all under the same sandbox user: alice gets every correctness point.
    "root": the grader is root (setpriv to the student user; CI); "docker": as in the image
    without its security options, a non-root grader reaching the shared student user through sudo
    (tests/docker_users.py)."""
    if why := interpreter_problem():
        pytest.skip(why)
    users = None
    if where != "root":
        if why := DockerUsers.unavailable():
            pytest.skip(why)
        users = DockerUsers()
    try:
        top = users.writable("two") if users else tmp_path
        rubric = top / "rubric.toml"
        rubric.write_text(rubric_toml(tasks=("dds",)))
        for student, files in (("alice", {"dds": (ROOT / "solutions" / "dds.py").read_text()}),
                               ("bob", {"dds": RAISES_ON_IMPORT})):
            (top / student).mkdir()
            for task, text in files.items():
                (top / student / f"{task}.py").write_text(text)
        for p in top.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        if users:
            for p in (top, *top.rglob("*")):
                os.chown(p, users.grader_uid, users.grader_uid)

        def grade(student: str, report: str) -> subprocess.Popen:
            argv = [sys.executable, "-m", "grader", "grade", str(top / student), "--device", "cpu",
                    "--rubric", str(rubric), "--report-dir", str(top / report), "--seed", "5"]
            if users:   # the image's backend without its security options: no namespaces
                return users.popen(argv, {"GRADER_SANDBOX": "none"}, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        alice = grade("alice", "alice-report")
        bobs = 0
        try:
            while alice.poll() is None:      # bob is graded again and again while alice is
                bob = grade("bob", f"bob-report-{bobs}")
                bob.wait(timeout=600)
                bobs += 1
            assert alice.wait(timeout=600) == 0
        finally:
            if alice.poll() is None:
                alice.kill()
                alice.wait()
        bob = json.loads((top / "bob-report-0" / "report.json").read_text())
        assert bob["score"] == 0 and "could not be imported" in bob["tasks"][0]["summary"], bob["tasks"][0]
        report = json.loads((top / "alice-report" / "report.json").read_text())
        if users:
            assert "as student" in json.dumps(report), "the grade did not run as the image does"
        correctness = [t for t in report["tests"] if t["kind"] == "correctness"]
        lost = [(t["name"], t["message"]) for t in correctness if t["score"] != t["max_score"]]
        assert not lost, f"alice lost points while bob was graded {bobs} times beside her: {lost}"
        assert bobs >= 1
    finally:
        if users:
            users.close()
