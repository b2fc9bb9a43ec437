"""One supervisor for every process the grader starts (standard library only).

    p = start(argv, stdout=log, deadline_s=600)   # the command, under a supervisor of its own
    rc = p.wait(timeout=1.0)                      # None while it runs
    p.kill()                                      # idempotent; fine in a signal handler or a finally
    p.timed_out, p.killed                         # how it ended

The sandbox (each worker), the classroom's batch (each student's grade
process) and the Gradescope runner (the grade) all start their commands
here. ``start`` runs the command under a small supervisor process: this file,
run as ``python -I -S proc.py --supervise ...``, so that it imports nothing
that a submission or a broken install could touch. The supervisor is a child
subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): every process the command
starts, in any session, double-forked or not, stays below it, and an orphan
becomes its child. It starts the command in a new session with the given
resource limits, then waits for the first of: the command's exit, the
deadline, SIGTERM or SIGHUP, or the end of its lifeline (a pipe whose write
end only the caller holds, closed by ``kill()`` or by the caller's death).
Then it kills and reaps everything below it (:func:`kill_tree`) and reports
the command's status. The command itself dies with the supervisor
(``PR_SET_PDEATHSIG``) should the supervisor be killed first.

:func:`kill_tree` is the project's one definition of killing a process tree
(tests/integrity/test_proc.py holds the tree to it). It signals only the supervisor's
own children, whose process ids cannot be reused before it reaps them, round
after round as their descendants are re-parented to it: whatever else runs
on the machine, under whatever user, is never touched. A child of another
user (the sandbox's student, reached through sudo in the Docker image) is
killed by its process id as that user (``sudo -n -u <owner> -- kill -KILL
<pids>``), never by a signal to all of that user's processes, which would
kill other students' workers too. Outside Linux (a student's laptop) there
is no subreaper: the command's process group is killed.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

KILL_WAIT_S = 10.0      # how long kill() waits for the supervisor to finish its clean-up
UNKILLABLE_S = 30.0     # how long kill_tree keeps trying children it may not signal
_SUDO_RETRY_S = 0.5     # between two sudo kills of the same process
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


class Supervised:
    """A command running under its supervisor. ``pid`` is the supervisor's."""

    def __init__(self, proc: subprocess.Popen, lifeline: int, status: int):
        self._proc, self._lifeline, self._status = proc, lifeline, status
        self.pid = proc.pid
        self.returncode: int | None = None
        self.killed = False                 # kill() ended it
        self.timed_out = False              # the deadline ended it
        self.error: str | None = None       # why the command could not start

    @property
    def stdout(self):
        """The command's output pipe when start(stdout=PIPE) was used."""
        return self._proc.stdout

    def stderr_text(self) -> str:
        """What the supervisor and the command wrote to stderr, when start(stderr=PIPE) was used."""
        s = self._proc.stderr
        return s.read().decode("utf-8", "replace") if s else ""

    def wait(self, timeout: float | None = None) -> int | None:
        """The command's return code (negative: killed by that signal), or None on timeout."""
        if self.returncode is not None:
            return self.returncode
        try:
            sup = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        report = self._read_status()
        rc = report.get("returncode")
        if rc is None:                      # the supervisor itself died (the OOM killer, a signal)
            rc = sup if sup != 0 else -signal.SIGKILL
        self.timed_out = bool(report.get("timed_out"))
        self.error = report.get("error")
        self.returncode = rc
        self._close()
        return rc

    def poll(self) -> int | None:
        """The return code if the command has ended, else None."""
        return self.wait(0)

    def kill(self) -> None:
        """End the command and everything it started; wait (bounded) until they are gone.

        Idempotent, and safe in a signal handler or a finally block: it only
        closes the lifeline (the supervisor then kills and reaps the tree),
        polls /proc and, if the supervisor is stuck, kills it; it never reaps.
        """
        if self.returncode is not None:
            return
        if self._running():
            self.killed = True
        _close_fd(self._lifeline)
        self._lifeline = -1
        deadline = time.monotonic() + KILL_WAIT_S
        while self._running() and time.monotonic() < deadline:
            time.sleep(0.005)
        if self._running():                 # stuck for 10 s: its command dies with it (PDEATHSIG)
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass

    def _running(self) -> bool:
        """True while the supervisor has not exited (a zombie counts as exited)."""
        if self._proc.returncode is not None:
            return False
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
        except FileNotFoundError:
            return False
        except OSError:
            pass
        try:                                # no /proc (macOS): a signal 0 probe (sees zombies as alive)
            os.kill(self.pid, 0)
            return self._proc.poll() is None
        except OSError:
            return False

    def _read_status(self) -> dict:
        report: dict = {}
        if self._status < 0:
            return report
        data = b""
        try:
            os.set_blocking(self._status, False)
            while chunk := os.read(self._status, 65536):
                data += chunk
        except OSError:
            pass
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                report.update(rec)
        return report

    def _close(self) -> None:
        for fd in (self._lifeline, self._status):
            _close_fd(fd)
        self._lifeline = self._status = -1

    def __del__(self):
        # Forgotten without wait(): closing the lifeline makes the supervisor kill the tree.
        if getattr(self, "returncode", 0) is None:
            _close_fd(self._lifeline)


def _close_fd(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def start(argv: list[str], *, env: dict | None = None, cwd: str | os.PathLike | None = None,
          stdin=None, stdout=None, stderr=None, pass_fds: tuple[int, ...] = (),
          limits: dict[str, int] | None = None, deadline_s: float | None = None,
          supervisor_class=Supervised, **extra) -> Supervised:
    """Start ``argv`` under a supervisor of its own.

    ``env``: the command's whole environment (default: this process's).
    ``cwd``: its folder (default: this process's). ``stdin``, ``stdout``,
    ``stderr``: as for subprocess.Popen (the command inherits the
    supervisor's). ``pass_fds``: descriptors that stay open in the command.
    ``limits``: resource limits by name (``{"RLIMIT_AS": bytes}``), set on the
    command. ``deadline_s``: the command and its tree are killed that many
    seconds after the start (``timed_out`` is then true).
    ``supervisor_class(popen, lifeline, status, **extra)`` wraps the result.
    """
    cfg = {"argv": [os.fspath(a) for a in argv], "env": dict(os.environ if env is None else env),
           "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()), "pass_fds": list(pass_fds),
           "limits": dict(limits or {}), "deadline_s": deadline_s}
    cfg_r, cfg_w = os.pipe()
    life_r, life_w = os.pipe()
    stat_r, stat_w = os.pipe()
    fds = (cfg_r, life_r, stat_w)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), "--supervise", ",".join(map(str, fds))],
            stdin=stdin, stdout=stdout, stderr=stderr, env={"LC_ALL": "C.UTF-8"},
            pass_fds=(*fds, *pass_fds), start_new_session=True, cwd="/")
    except BaseException:
        for fd in (cfg_w, life_w, stat_r):
            os.close(fd)
        raise
    finally:
        for fd in fds:
            os.close(fd)
    try:
        with os.fdopen(cfg_w, "wb") as f:   # the supervisor reads it whole before it starts anything
            f.write(json.dumps(cfg).encode())
    except OSError:
        pass
    return supervisor_class(proc, life_w, stat_r, **extra)


# ---------------------------------------------------------------------------------------------
# Inside the supervisor


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children(me: int) -> list[int]:
    """Pids whose parent is ``me`` (a scan of /proc)."""
    kids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                if int(fields[1]) == me:
                    kids.append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def _owner(pid: int) -> int | None:
    """The real user id of process ``pid`` (the one that kill(2) checks)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _kill_as_owner(pids: list[int]) -> None:
    """SIGKILL ``pids`` (children of this process: their ids stay theirs until reaped here)
    as the user who owns them, through sudo: each user's own processes by id, nothing else."""
    kill = next((p for p in ("/bin/kill", "/usr/bin/kill") if os.access(p, os.X_OK)), None)
    sudo = next((p for p in ("/usr/bin/sudo", "/bin/sudo") if os.access(p, os.X_OK)), None)
    if kill is None or sudo is None:
        return
    by_owner: dict[int, list[int]] = {}
    for pid in pids:
        uid = _owner(pid)
        if uid is not None:
            by_owner.setdefault(uid, []).append(pid)
    for uid, owned in by_owner.items():
        try:
            import pwd
            user = pwd.getpwuid(uid).pw_name
        except (ImportError, KeyError):
            user = f"#{uid}"
        try:
            subprocess.run([sudo, "-n", "-u", user, "--", kill, "-KILL", "--", *map(str, owned)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=30)
        except (OSError, subprocess.SubprocessError):
            pass


def kill_tree(command: int, give_up_s: float = UNKILLABLE_S) -> tuple[int | None, list[int]]:
    """Kill and reap every process below this one: the command (``command``, a child not
    yet reaped) and everything it started. Run by the supervisor, the subreaper of that tree.

    Returns (the command's status, negative for a signal, or None if it was
    reaped elsewhere; processes that could not be killed within ``give_up_s``).
    """
    try:   # the command is not reaped yet, so its (new) session's group id is still its own
        os.killpg(command, signal.SIGKILL)
    except OSError:
        pass
    has_proc = os.path.isdir("/proc/self")
    me, status, asked = os.getpid(), None, {}
    denied_since = None
    while True:
        kids = _children(me) if has_proc else [command]
        denied = []
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except PermissionError:
                denied.append(pid)
            except OSError:
                pass
        now = time.monotonic()
        retry = [pid for pid in denied if now - asked.get(pid, -1e9) >= _SUDO_RETRY_S]
        if retry:
            _kill_as_owner(retry)
            asked.update((pid, now) for pid in retry)
        reaped = False
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return status, []
            except InterruptedError:
                continue
            if pid == 0:
                break
            reaped = True
            asked.pop(pid, None)
            if pid == command:
                status = os.waitstatus_to_exitcode(st)
        if denied and not reaped:
            denied_since = denied_since or now
            if now - denied_since > give_up_s:
                return status, sorted(denied)
        else:
            denied_since = None
        if not reaped:
            time.sleep(0.005)


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it (its group id stays its own)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _supervise(fds: str) -> None:
    cfg_fd, life_fd, stat_fd = map(int, fds.split(","))
    for s in (signal.SIGINT, signal.SIGTSTP, signal.SIGTTOU, signal.SIGTTIN):
        signal.signal(s, signal.SIG_IGN)
    stop = []
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda *_: stop.append(1))
    with os.fdopen(cfg_fd, "rb") as f:
        cfg = json.loads(f.read())
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    me, limits = os.getpid(), cfg["limits"]

    def prepare():   # in the forked command, before exec; the supervisor is single-threaded
        import resource
        for name, value in limits.items():
            if hasattr(resource, name):
                try:
                    resource.setrlimit(getattr(resource, name), (value, value))
                except (ValueError, OSError):
                    pass
        for s in (signal.SIGINT, signal.SIGTSTP, signal.SIGTTOU, signal.SIGTTIN, signal.SIGTERM,
                  signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        if _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL)) and os.getppid() != me:
            os._exit(1)  # the supervisor died before the signal was armed

    def report(**rec):
        try:
            os.write(stat_fd, (json.dumps(rec) + "\n").encode())
        except OSError:
            pass

    try:
        child = subprocess.Popen(cfg["argv"], env=cfg["env"], cwd=cfg["cwd"], pass_fds=cfg["pass_fds"],
                                 preexec_fn=prepare, start_new_session=True)
    except OSError as e:
        report(returncode=127, error=f"cannot start {cfg['argv'][0]}: {type(e).__name__}: {e}")
        sys.stderr.write(f"supervisor: cannot start {cfg['argv'][0]}: {e}\n")
        return
    for fd in cfg["pass_fds"]:
        os.close(fd)
    deadline = time.monotonic() + cfg["deadline_s"] if cfg.get("deadline_s") is not None else None
    pidfd = os.pidfd_open(child.pid) if hasattr(os, "pidfd_open") else None
    watch = [life_fd] + ([pidfd] if pidfd is not None else [])
    killed = timed_out = False
    while not stop:
        wait = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
        try:
            ready, _, _ = select.select(watch, [], [], wait)
        except InterruptedError:
            continue
        if life_fd in ready:          # the caller closed it (kill) or died
            killed = True
            break
        if _exited(child.pid):
            break
        if deadline is not None and time.monotonic() >= deadline:
            timed_out = True
            break
    status, survivors = kill_tree(child.pid)
    if survivors:   # another user's, with no sudo rule to kill them: say so where the log is read
        sys.stderr.write(f"supervisor: could not kill processes {survivors} of another user\n")
    if status is None:
        status = child.returncode if child.returncode is not None else -signal.SIGKILL
    report(returncode=status, killed=killed or bool(stop), timed_out=timed_out)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--supervise":
    _supervise(sys.argv[2])
