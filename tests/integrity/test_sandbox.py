"""The OS sandbox that runs the untrusted worker (grader/harness/sandbox.py), attack by attack.

Each test runs against every backend this machine has (bwrap, unshare, none)
and skips, saying why, where a backend or a guarantee is missing. Children
are tiny ``python -c`` programs; one test imports torch and Triton in the jail.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from grader.harness import gpulock, sandbox
from grader.harness.sandbox import Jail, SandboxError, spawn

ROOT = Path(__file__).resolve().parents[2]
ROOT_USER = os.geteuid() == 0


def _backend(name: str, gpu: bool = False) -> sandbox.Backend:
    if not sys.platform.startswith("linux") and name != "none":
        pytest.skip(f"{name} needs Linux")
    try:
        return sandbox.backend(gpu=gpu, name=name)
    except SandboxError as e:
        pytest.skip(f"backend {name} does not work here: {e}")


@pytest.fixture(params=sandbox.BACKENDS)
def b(request) -> sandbox.Backend:
    return _backend(request.param)


def _python(b: sandbox.Backend) -> str:
    """An interpreter the child can run: ours, or the system's when ours is out of its reach."""
    if b.name == "bwrap" or not b.separate_user:
        return sys.executable
    for exe in (sys.executable, "/usr/bin/python3"):
        real = os.path.realpath(exe)
        if os.path.exists(real) and sandbox._unreachable(real, b.uid, b.gid) is None:
            return exe
    pytest.skip(f"no Python reachable by user {b.user} without a private mount table")


@pytest.fixture
def task(tmp_path_factory):
    """A task folder the student user can enter, with an empty scratch folder in it."""
    top = sandbox.task_dir("sandbox-test-")
    (top / "scratch").mkdir()
    yield top
    subprocess.run(["rm", "-rf", str(top)])


def _run(b, task, code: str, *args: str, timeout: float = 30, **jail_kw):
    """Run ``python -c code args`` in the jail; return (returncode, output, Sandboxed)."""
    jail_kw.setdefault("env", {"PATH": "/usr/bin:/bin"})
    jail = Jail(scratch=task / "scratch", **jail_kw)
    p = spawn([_python(b), "-c", textwrap.dedent(code), *args], jail, stdout=subprocess.PIPE,
              stderr=subprocess.STDOUT, backend_=b)
    out = []
    reader = threading.Thread(target=lambda: out.append(p._proc.stdout.read()), daemon=True)
    reader.start()
    rc = p.wait(timeout)
    if rc is None:
        p.kill()
        rc = p.wait()
    reader.join(5)
    return rc, (out[0] if out else b"").decode("utf-8", "replace"), p


def _survivors(token: str) -> list[int]:
    """Live processes whose command line holds ``token``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in cmd and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def _wait_no_survivors(token: str, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _survivors(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def token():
    tok = f"sbxmark{uuid.uuid4().hex}"
    yield tok
    for pid in _survivors(tok):        # never leave a failed test's processes behind
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# -- 1. nothing outside scratch (and `writable`) can be written ------------------------------


def test_writes_land_only_in_scratch(b, task):
    if not b.isolated and not b.separate_user:
        pytest.skip(f"{b.name} as the grader's own user: the grader's files are writable")
    tag = uuid.uuid4().hex
    home = Path(os.path.expanduser("~"))
    pth = home / ".local/lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" \
        / "site-packages" / f"evil-{tag}.pth"
    targets = [ROOT / f"conftest-{tag}.py", ROOT / "grader" / f"evil-{tag}.py", pth,
               task / f"beside-scratch-{tag}"]
    created = [p for p in (pth.parent, pth.parent.parent, pth.parent.parent.parent)
               if not p.exists()]
    code = """
        import os, sys
        for t in sys.argv[1:]:
            try:
                os.makedirs(os.path.dirname(t), exist_ok=True)
                with open(t, "w") as f:
                    f.write("import os; os.system('echo pwned')")
                print("WROTE", t)
            except OSError as e:
                print("DENIED", t, type(e).__name__)
        open("in-scratch.txt", "w").write("ok")
    """
    try:
        rc, out, _ = _run(b, task, code, *map(str, targets), scratch_bytes=None)   # the host folder: seen here
        assert rc == 0, out
        leaked = [str(p) for p in targets if p.exists()]
        assert not leaked, f"the child wrote outside scratch: {leaked}\n{out}"
        assert (task / "scratch" / "in-scratch.txt").read_text() == "ok"
    finally:
        for p in targets:
            p.unlink(missing_ok=True)
        for d in created:
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()


def test_writable_paths_are_writable_and_shm_is_private(b, task):
    if b.name != "bwrap":
        pytest.skip(f"{b.name} has no private /dev/shm (notes: host files visible)")
    tag = uuid.uuid4().hex
    shared = Path(f"/dev/shm/sandbox-test-{tag}")
    shared.write_bytes(b"\0" * 8)
    private = Path(f"/dev/shm/sandbox-private-{tag}")
    try:
        rc, out, _ = _run(b, task, """
            import sys
            with open(sys.argv[1], "r+b") as f:
                f.write(b"fromkid!")
            open(sys.argv[2], "w").write("x")
        """, str(shared), str(private), writable=[shared])
        assert rc == 0, out
        assert shared.read_bytes() == b"fromkid!"
        assert not private.exists(), "a /dev/shm file the child made reached the host"
    finally:
        shared.unlink(missing_ok=True)
        private.unlink(missing_ok=True)


def test_repo_and_host_folders_are_invisible(b, task):
    if not b.isolated:
        pytest.skip(f"{b.name} shows the host's files (notes say so)")
    rc, out, _ = _run(b, task, """
        import os, sys
        root = sys.argv[1]
        print("GRADER", os.path.exists(os.path.join(root, "grader")))
        print("ROOTLIST", sorted(os.listdir(root)) if os.path.isdir(root) else [])
        print("PIDS", len([p for p in os.listdir("/proc") if p.isdigit()]))
        print("HOMEDIR", os.path.exists(os.path.expanduser("~root/.bashrc")))
    """, str(ROOT))
    assert rc == 0, out
    assert "GRADER False" in out, out
    listed = out.split("ROOTLIST ")[1].splitlines()[0]
    assert listed in ("[]", "['.venv']"), f"repository files visible: {listed}"
    assert int(out.split("PIDS ")[1].split()[0]) < 10, "the host's processes are visible"
    assert "HOMEDIR False" in out


def test_grader_environment_and_cwd_are_unreachable(b, task):
    if not b.isolated and not b.separate_user:
        pytest.skip(f"{b.name} as the grader's own user: /proc/<parent> is readable")
    rc, out, _ = _run(b, task, """
        import os, sys
        pid = sys.argv[1]
        for what in ("environ", "cwd", "cmdline"):
            try:
                if what == "cwd":
                    print(what, "READ", os.readlink(f"/proc/{pid}/cwd"))
                else:
                    data = open(f"/proc/{pid}/{what}", "rb").read()
                    print(what, "READ" if what == "environ" and data else "EMPTY-OR-ARGS", len(data))
            except OSError as e:
                print(what, "DENIED", type(e).__name__)
    """, str(os.getpid()))
    assert rc == 0, out
    assert "environ READ" not in out and "cwd READ" not in out, out


# -- 2. no process outlives kill() or the grader -----------------------------------------------

_SLEEPER = "import time; time.sleep(900)"
_ESCAPES = {
    "setsid-popen": """
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", SLEEPER, TOKEN], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    """,
    "double-fork": """
        import os, sys
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", SLEEPER, TOKEN])
            os._exit(0)
        os.wait()
    """,
    "daemon-thread": """
        import subprocess, sys, threading
        def go():
            subprocess.Popen([sys.executable, "-c", SLEEPER, TOKEN], start_new_session=True)
        t = threading.Thread(target=go, daemon=True); t.start(); t.join()
    """,
    "execvp": """
        import os, subprocess, sys
        subprocess.Popen([sys.executable, "-c", SLEEPER, TOKEN], start_new_session=True)
        os.execvp(sys.executable, [sys.executable, "-c", SLEEPER, TOKEN])
    """,
}


def _escape_code(how: str, token: str, then: str) -> str:
    body = textwrap.dedent(_ESCAPES[how]).replace("SLEEPER", repr(_SLEEPER)).replace("TOKEN", repr(token))
    return body + "\n" + then


@pytest.mark.parametrize("how", sorted(_ESCAPES))
def test_nothing_survives_kill_after_timeout(b, task, token, how):
    jail = Jail(scratch=task / "scratch", env={"PATH": "/usr/bin:/bin"})
    code = _escape_code(how, token, "import time; time.sleep(900)")
    p = spawn([_python(b), "-c", code, token], jail, stdout=subprocess.DEVNULL, backend_=b)
    # Python's start-up, twice, on a machine as busy as it may be (2 cores, -n 2, a batch beside):
    # a wait for the escape, not a measure of speed; the processes live until the kill below.
    deadline = time.monotonic() + 600
    while len(_survivors(token)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(_survivors(token)) >= 2, "the escape did not start"
    assert p.wait(timeout=0.2) is None          # the timeout path: wait returns, nothing killed
    p.kill()
    p.kill()                                    # idempotent
    assert _survivors(token) == [], "processes outlived kill()"
    assert p.wait() == -signal.SIGKILL or b.name == "bwrap" and p.wait() < 0
    assert p.reason() == "killed"


@pytest.mark.parametrize("how", ["setsid-popen", "double-fork"])
def test_nothing_survives_a_child_that_exits(b, task, token, how):
    rc, out, p = _run(b, task, _escape_code(how, token, "print('bye')"), token)
    assert "bye" in out, out
    assert rc == 0 and p.reason() is None
    assert _survivors(token) == [], "orphans outlived the task"


def test_nothing_survives_the_grader_killed(b, task, token):
    """SIGKILL of the process that called spawn: the supervisor sees its lifeline close."""
    helper = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from grader.harness import sandbox
        b = sandbox.backend(name={b.name!r})
        jail = sandbox.Jail(scratch=Path({str(task / 'scratch')!r}), env={{"PATH": "/usr/bin:/bin"}})
        code = {_escape_code("double-fork", token, "import time; time.sleep(120)")!r}
        p = sandbox.spawn([{_python(b)!r}, "-c", code, {token!r}], jail, backend_=b)
        print("spawned", flush=True)
        time.sleep(120)
    """)
    h = subprocess.Popen([sys.executable, "-c", helper], stdout=subprocess.PIPE)
    try:
        assert h.stdout.readline() == b"spawned\n"
        deadline = time.monotonic() + 10
        while len(_survivors(token)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(_survivors(token)) >= 2, "the escape did not start"
    finally:
        h.kill()
        h.wait()
    assert _wait_no_survivors(token) == [], "processes outlived the grader"


def test_kill_from_a_signal_handler(b, task):
    jail = Jail(scratch=task / "scratch", env={})
    p = spawn([_python(b), "-c", "import time; time.sleep(60)"], jail, backend_=b)
    old = signal.signal(signal.SIGALRM, lambda *_: p.kill())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        t0 = time.monotonic()
        rc = p.wait()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert rc is not None and rc < 0 and time.monotonic() - t0 < 10
    assert p.reason() == "killed"


def test_bwrap_writable_places_are_bounded_tmpfs(b, task):
    """With bwrap, scratch and the temporary folders are memory-backed and sized:
    many files (each under the file size limit) cannot fill the host's disk,
    and the host's scratch folder never sees them."""
    if b.name != "bwrap" or not sandbox._bwrap_sizes(b.tool):
        pytest.skip(f"{b.name}: scratch is the host folder (bounded per file only)")
    rc, out, _ = _run(b, task, """
        import os
        for where in (".", "/tmp", "/dev/shm"):
            written = 0
            try:
                for i in range(400):
                    with open(os.path.join(where, f"f{i}"), "wb") as f:
                        f.write(b"x" * (1 << 20))
                    written += 1
            except OSError as e:
                print("FULL", where, written, e.errno)
    """, scratch_bytes=4 << 20)
    assert rc == 0, out
    full = {line.split()[1]: int(line.split()[2]) for line in out.splitlines() if line.startswith("FULL")}
    assert full.keys() == {".", "/tmp", "/dev/shm"}, out     # each fills up
    assert full["."] <= 4 and full["/tmp"] <= 256 and full["/dev/shm"] <= 256, out
    assert not any((task / "scratch").iterdir())            # nothing reached the host folder


# -- 3. a separate, unprivileged user ----------------------------------------------------------


def test_child_runs_as_an_unprivileged_user(b, task):
    if not ROOT_USER:
        pytest.skip("the grader is not root: it cannot switch users (sudo rule: Docker image)")
    assert b.separate_user and b.uid not in (None, 0)
    secret = task / "rubric.toml"
    secret.write_text("hidden = 1\n")
    secret.chmod(0o600)
    rc, out, _ = _run(b, task, """
        import os, sys
        print("IDS", os.getuid(), os.geteuid(), os.getgid(), os.getgroups())
        status = open("/proc/self/status").read()
        print("NNP", status.split("NoNewPrivs:")[1].split()[0])
        print("CAPEFF", status.split("CapEff:")[1].split()[0])
        import getpass   # torch's caches name their folder after the user: /etc/passwd must be readable
        print("USER", getpass.getuser(), os.access("/etc/ld.so.cache", os.R_OK))
        open("mine.txt", "w").write("x")
        try:
            print("SECRET", open(sys.argv[1]).read())
        except OSError as e:
            print("SECRET DENIED", type(e).__name__)
        try:
            os.setuid(0)
            print("SETUID OK")
        except OSError:
            print("SETUID DENIED")
    """, str(secret), readonly=[secret], scratch_bytes=None)
    assert rc == 0, out
    assert f"IDS {b.uid} {b.uid} {b.gid} " in out, out
    groups = out.split("IDS ")[1].splitlines()[0].split(" ", 3)[3]
    assert groups in ("[]", f"[{b.gid}]"), f"supplementary groups kept: {groups}"
    assert "NNP 1" in out and "CAPEFF 0000000000000000" in out, out
    assert f"USER {b.user} True" in out, out
    assert "SECRET DENIED" in out and "hidden" not in out, out
    assert "SETUID DENIED" in out
    assert (task / "scratch" / "mine.txt").stat().st_uid == b.uid


_SUDO_CHILD = """
import os, subprocess, sys
print("UID", os.getuid(), flush=True)
try:
    print(open(sys.argv[1]).read(), flush=True)
except OSError:
    print("SECRET DENIED", flush=True)
os.write(int(sys.argv[3]), b"FD OPEN")   # a pipe the grader passed (the worker's are passed so)
os.makedirs("a/b"); open("a/b/f", "w").write("x")
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[2]], start_new_session=True)
print("READY", flush=True)
import time; time.sleep(60)
"""


@pytest.mark.parametrize("name", ["none", "bwrap"])
def test_sudo_switch_of_the_docker_image(token, name):
    """As the Docker image's non-root `grader`, student code runs as `student` through sudo, with
    the descriptors the grader passes it (sudo closes them without -C), and dies whole with kill()."""
    from tests.docker_users import DockerUsers
    if why := DockerUsers.unavailable():
        pytest.skip(why)
    helper = textwrap.dedent(f"""
        import os, subprocess, sys
        sys.path.insert(0, {str(ROOT)!r})
        from grader.harness import sandbox
        b = sandbox.backend(name={name!r})
        print("SWITCH", b.switch, b.user, flush=True)
        top = sandbox.task_dir("sudo-test-")
        secret = top / "rubric.toml"
        secret.write_text("hidden"); secret.chmod(0o600)
        (top / "scratch").mkdir()
        r, w = os.pipe()
        p = sandbox.spawn([sys.executable, "-c", {_SUDO_CHILD!r}, str(secret), {token!r}, str(w)],
                          sandbox.Jail(scratch=top / "scratch", env={{"PATH": "/usr/bin:/bin"}}, pass_fds=(w,)),
                          stdout=subprocess.PIPE, backend_=b)
        os.close(w)
        for line in p.stdout:
            print(line.decode().strip(), flush=True)
            if line.startswith(b"READY"):
                break
        print("PIPE", os.read(r, 100).decode(), flush=True)
        p.kill()
        print("RC", p.wait(), p.reason(), flush=True)
        subprocess.run(["rm", "-rf", str(top)])
        print("REMOVED", not top.exists(), flush=True)
    """)
    users = DockerUsers()
    try:
        out = users.run([sys.executable, "-c", helper], timeout=120)
        student = users.student_uid
    finally:
        users.close()
    text = out.stdout + out.stderr
    assert "SWITCH sudo student" in text, text
    assert f"UID {student}" in text and "SECRET DENIED" in text, text
    assert "PIPE FD OPEN" in text, text
    assert "killed" in text.split("RC ")[1] and "REMOVED True" in text, text
    assert _survivors(token) == [], "a student process outlived kill()"


def test_none_backend_refuses_unreachable_paths(task):
    b = _backend("none")
    if not b.separate_user:
        pytest.skip("no separate user here")
    hidden = Path(tempfile.mkdtemp(prefix="sandbox-test-hidden-"))   # 0700, root's
    try:
        (hidden / "s").mkdir()
        with pytest.raises(SandboxError, match="not reachable"):
            spawn(["/usr/bin/true"], Jail(scratch=hidden / "s"), backend_=b)
    finally:
        subprocess.run(["rm", "-rf", str(hidden)])


# -- 4. no network -----------------------------------------------------------------------------


def test_no_network(b, task):
    if not b.network_isolated:
        pytest.skip(f"{b.name}: network not isolated (notes say so)")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        rc, out, _ = _run(b, task, """
            import socket, sys
            try:
                socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
                print("CONNECTED")
            except OSError as e:
                print("REFUSED", type(e).__name__)
        """, str(port))
    finally:
        srv.close()
    assert rc == 0, out
    assert "REFUSED" in out and "CONNECTED" not in out, out


def test_gpu_jail_cuts_the_network_and_binds_the_gpu():
    # CUDA works inside bwrap's network namespace (measured on an H100 and an H200).
    b = _backend("bwrap", gpu=True)
    assert b.network_isolated
    args = sandbox.build_command(["x"], Jail(scratch=Path("/tmp"), gpu=True), b)
    assert "--unshare-net" in args and ["--ro-bind", "/sys", "/sys"] == \
        args[args.index("/sys") - 1:args.index("/sys") + 2]
    kept = sandbox.build_command(["x"], Jail(scratch=Path("/tmp"), gpu=True, network=True), b)
    assert "--unshare-net" not in kept
    assert "RLIMIT_AS" not in sandbox._limits(Jail(scratch=Path("/tmp"), gpu=True), b)
    assert any("memory is not limited" in n for n in b.notes)


# -- 5. bounded memory and file size -----------------------------------------------------------


def test_memory_hog_dies_alone_with_a_reason(b, task):
    rc, out, p = _run(b, task, """
        buf = bytearray(4 << 30)      # 4 GiB, never touched: fine without a limit
        print("ALLOCATED")
    """, memory_bytes=1 << 30)
    assert rc == 1 and "ALLOCATED" not in out, out
    assert p.reason(out) == "memory limit (1 GiB)"


def test_file_size_limit(b, task):
    rc, out, p = _run(b, task, """
        with open("big.bin", "wb") as f:
            f.write(b"x" * (3 << 20))
        print("WROTE")
    """, file_bytes=1 << 20, scratch_bytes=None)
    assert rc == 1 and "WROTE" not in out, out
    assert p.reason(out) == "file size limit (1 MiB)"
    assert (task / "scratch" / "big.bin").stat().st_size <= 1 << 20
    # a program that does not ignore SIGXFSZ (Python does) dies of it, unless it is a PID
    # namespace's init (unshare), which the kernel spares: then the write fails as above
    jail = Jail(scratch=task / "scratch", env={"PATH": "/usr/bin:/bin"}, file_bytes=1 << 20, scratch_bytes=None)
    q = spawn(["/bin/sh", "-c", "exec head -c 3000000 /dev/zero > big2.bin"], jail, backend_=b,
              stderr=subprocess.PIPE)
    log = q._proc.stderr.read().decode()
    rc = q.wait(30)
    assert rc == -signal.SIGXFSZ or b.name == "unshare" and rc == 1, (rc, log)
    assert q.reason(log) == "file size limit (1 MiB)"


# -- the jail runs the real worker's interpreter -----------------------------------------------


def test_python_m_imports_torch_and_triton_in_the_jail(b, task):
    if b.name != "bwrap" and _python(b) != sys.executable:
        pytest.skip(f"{b.name}: our interpreter is out of the student user's reach")
    stage = task / "stage"
    (stage / "workerpkg").mkdir(parents=True)
    (stage / "workerpkg" / "__init__.py").write_text("")
    (stage / "workerpkg" / "__main__.py").write_text(textwrap.dedent("""
        import torch, triton, triton.language as tl
        @triton.jit
        def add_one(x_ptr, n, BLOCK: tl.constexpr):
            i = tl.arange(0, BLOCK)
            tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)
        x = torch.zeros(8)
        add_one[(1,)](x, 8, BLOCK=8)
        print("SUM", int(x.sum()))
        try:
            torch.empty(50 * 10**9, dtype=torch.uint8).fill_(1)
        except RuntimeError as e:
            print("BIG", "can't allocate memory" in str(e))
    """))
    for p in [stage, *stage.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(stage), "TRITON_INTERPRET": "1",
           "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "TRITON_CACHE_DIR": str(task / "scratch" / "triton-cache")}
    jail = Jail(scratch=task / "scratch", readonly=[stage], env=env)
    p = spawn([sys.executable, "-m", "workerpkg"], jail, stdout=subprocess.PIPE,
              stderr=subprocess.STDOUT, backend_=b)
    out = p._proc.stdout.read().decode()
    assert p.wait(120) == 0, out
    assert "SUM 8" in out and "BIG True" in out, out


def test_env_is_exactly_the_jails_and_pass_fds_stay_open(b, task):
    r, w = os.pipe()
    try:
        rc, out, _ = _run(b, task, """
            import os, sys, json
            os.write(int(sys.argv[1]), b"over the control pipe")
            print("ENV", json.dumps(dict(os.environ), sort_keys=True))
            print("CWD", os.getcwd())
        """, str(w), env={"PATH": "/usr/bin:/bin", "ONLY_THIS": "1"}, pass_fds=(w,))
        os.close(w)
        w = -1
        assert rc == 0, out
        assert os.read(r, 100) == b"over the control pipe"
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    import json
    env = json.loads(out.split("ENV ")[1].splitlines()[0])
    scratch = str(task / "scratch")
    env.pop("LC_CTYPE", None)            # Python may set it for itself (PEP 538)
    if env.get("PWD") == scratch:        # bwrap --chdir sets it
        del env["PWD"]
    assert env == {"PATH": "/usr/bin:/bin", "ONLY_THIS": "1", "HOME": scratch, "TMPDIR": scratch}
    assert f"CWD {scratch}" in out


def test_backend_describes_itself():
    b = sandbox.backend()
    assert b.name in sandbox.BACKENDS and isinstance(b.notes, list)
    assert b.summary().startswith(f"sandbox {b.name}")
    try:
        sandbox.backend(name="bwrap")
    except SandboxError:
        pass
    else:
        assert b.name == "bwrap", b.summary()      # the strongest backend that works wins
    with pytest.raises(SandboxError, match="unknown"):
        sandbox.backend(name="chroot")


# -- 7. one GPU, one grader --------------------------------------------------------------------


def test_gpu_lock_refuses_or_waits(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADER_GPU_LOCK_DIR", str(tmp_path))
    key = f"fake-{uuid.uuid4().hex}"
    holder = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from grader.harness.gpulock import gpu_lock
        with gpu_lock(0, wait=False, timeout_s=0, key={key!r}, check_memory=False):
            print("held", flush=True)
            time.sleep(float(sys.argv[1]))
    """)
    env = {**os.environ, "GRADER_GPU_LOCK_DIR": str(tmp_path)}
    h = subprocess.Popen([sys.executable, "-c", holder, "30"], stdout=subprocess.PIPE, env=env)
    try:
        assert h.stdout.readline() == b"held\n"
        with pytest.raises(gpulock.GpuBusy, match=f"another grader holds {key}: pid {h.pid}"):
            with gpulock.gpu_lock(0, wait=False, timeout_s=0, key=key, check_memory=False):
                pass
        t0 = time.monotonic()
        with pytest.raises(gpulock.GpuBusy, match="still busy after 1 s"):
            with gpulock.gpu_lock(0, wait=True, timeout_s=1, key=key, check_memory=False):
                pass
        assert time.monotonic() - t0 >= 1
    finally:
        h.kill()
        h.wait()
    # the holder died: the kernel dropped its lock, a waiting grader gets the GPU
    with gpulock.gpu_lock(0, wait=True, timeout_s=5, key=key, check_memory=False) as path:
        assert str(os.getpid()) in path.read_text()


def test_gpu_lock_counts_memory_held_by_others(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADER_GPU_LOCK_DIR", str(tmp_path))
    monkeypatch.setattr(gpulock, "memory_held_by_others", lambda i: (60 << 30, 80 << 30))
    with pytest.raises(gpulock.GpuBusy, match="other processes hold 60.0 of 80.0 GiB"):
        with gpulock.gpu_lock(0, wait=False, timeout_s=0, key="fake-busy"):
            pass
    monkeypatch.setattr(gpulock, "memory_held_by_others", lambda i: (1 << 30, 80 << 30))
    with gpulock.gpu_lock(0, wait=False, timeout_s=0, key="fake-busy"):
        pass
