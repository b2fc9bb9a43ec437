"""What the OS says about a running worker: its threads, its libraries, the processes it started.

    watch = Watch(supervisor_pid)     # the sandbox's supervisor (grader/harness/proc.py), outside the jail
    watch.find()                      # once, while the worker waits before importing the kernel file
    before = watch.take()             # a Snapshot
    ...
    changes(before, watch.take())     # ["thread 4242 ('python3') started", "library /x/libm.so.6 loaded"]

The harness reads these facts from /proc, in its own process, about the
worker's host process id: never from the worker's own registries
(``threading``, ``sys.modules``), which the submission can rewrite, and never
from anything the worker reports. A snapshot holds:

- threads: every thread of the worker (``/proc/<pid>/task/*``), with its name
  (``comm``); the rule is by thread id, so a thread named like CUDA's own is
  still a new thread;
- libraries: every file mapped executable into the worker (``/proc/<pid>/maps``),
  by path and inode. That file needs the right to trace the worker (the same
  user, or CAP_SYS_PTRACE: root outside a container has it, the Docker image's
  non-root grader and a container's root without that capability do not). There
  the fallback is the kernel's count of executable memory (``VmLib`` in
  ``/proc/<pid>/status``, readable by anyone): a new library shows as growth,
  without its path, and the snapshot says so (``libraries_how``);
- processes: every process below the sandbox's supervisor other than those
  that stood between the supervisor and the worker when the worker was found
  (sudo, bwrap, unshare): a child the worker forked, or one that left it
  (double fork) and was re-parented to the supervisor or to bwrap's init.

Where /proc cannot be read at all (macOS, ``hidepid``), ``find`` says why and
every snapshot is empty with that reason: the caller reports the facts as not
read, never as unchanged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

WORKER_MODULE = "_grader_worker.main"   # the worker's command line: python -m WORKER_MODULE ...
WORKER_PACKAGE = "_grader_worker."      # ... or another of its package's modules (the CPU's executor)
MAX_NAMED = 5                           # changes of one kind named in a message; the rest counted


@dataclass(frozen=True)
class Snapshot:
    """The worker's threads, libraries and other processes at one moment."""
    threads: dict = field(default_factory=dict)      # tid -> comm
    libraries: dict = field(default_factory=dict)    # (path, inode) -> path   (libraries_how "maps")
    exec_kb: int | None = None                       # VmLib, kB                (libraries_how "VmLib")
    processes: dict = field(default_factory=dict)    # pid -> comm, below the supervisor, not the chain
    libraries_how: str = "maps"                      # "maps" | "VmLib" | "" (not read)
    error: str = ""                                  # why nothing was read ("" when it was)


def _read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def _comm(pid: int | str, tid: int | str | None = None) -> str:
    where = f"/proc/{pid}/task/{tid}/comm" if tid is not None else f"/proc/{pid}/comm"
    try:
        return _read(where).strip()
    except OSError:
        return "?"


def _children(pid: int) -> list[int]:
    """The children of ``pid``: /proc/<pid>/task/*/children where the kernel has it, else a scan."""
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    try:
        for tid in tids:
            kids += [int(k) for k in _read(f"/proc/{pid}/task/{tid}/children").split()]
        return kids
    except FileNotFoundError:
        pass   # no CONFIG_PROC_CHILDREN: scan every process's parent
    except OSError:
        return kids
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if int(_read(f"/proc/{name}/stat").rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


def _is_worker(pid: int) -> bool:
    """Whether ``pid`` runs the worker itself: ``python ... -m _grader_worker.<module>`` as its own
    command, not as the arguments of sudo, bwrap, unshare or compute-sanitizer around it."""
    try:
        argv = _read(f"/proc/{pid}/cmdline").split("\0")
    except OSError:
        return False
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1].startswith(WORKER_PACKAGE):
            return all(a.startswith("-") for a in argv[1:i]) and "python" in os.path.basename(argv[0])
    return False


def threads(pid: int) -> dict[int, str]:
    """{thread id: name} of process ``pid`` (OSError if it cannot be listed)."""
    return {int(t): _comm(pid, t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit()}


def libraries(pid: int) -> dict[tuple[str, int], str]:
    """{(path, inode): path} of the files mapped executable into process ``pid``
    (PermissionError where the caller may not read its maps)."""
    found = {}
    for line in _read(f"/proc/{pid}/maps").splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and "x" in parts[1] and parts[4] != "0" and parts[5].startswith("/"):
            found[(parts[5], int(parts[4]))] = parts[5]
    return found


def exec_kb(pid: int) -> int | None:
    """The kernel's count of the process's executable memory outside its program (VmLib), kB."""
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith("VmLib:"):
            return int(line.split()[1])
    return None


class Watch:
    """The facts of one worker, read from the outside. ``supervisor``: the pid of the sandbox's
    supervisor (grader/harness/proc.py), which runs as the grader, outside the jail."""

    def __init__(self, supervisor: int):
        self.supervisor = supervisor
        self.pid: int | None = None
        self.chain: set[int] = set()    # the supervisor's descendants when the worker was found
        self.error = ""

    def find(self) -> str:
        """Find the worker below the supervisor; "" or why it cannot be watched. Call it while
        the worker waits for its first command (nothing of the submission has run yet)."""
        if not os.path.isdir(f"/proc/{self.supervisor}/task"):
            self.error = "/proc does not show the sandbox's processes here"
            return self.error
        below = _descendants(self.supervisor)
        found = [p for p in below if _is_worker(p)]
        if len(found) != 1:
            self.error = (f"the worker's process was not found below its supervisor ({len(found)} candidates "
                          "among its processes)")
            return self.error
        self.pid, self.chain = found[0], set(below)
        return ""

    def take(self) -> Snapshot:
        """The worker's threads, libraries and other processes now."""
        if self.pid is None:
            return Snapshot(libraries_how="", error=self.error or "the worker was not found")
        try:
            found = threads(self.pid)
            others = {p: _comm(p) for p in _descendants(self.supervisor) if p not in self.chain}
        except OSError as e:
            return Snapshot(libraries_how="", error=f"the worker's /proc entry could not be read ({e.strerror})")
        try:
            return Snapshot(threads=found, libraries=libraries(self.pid), processes=others)
        except PermissionError:
            pass   # maps needs the right to trace the worker: the count of executable memory instead
        except OSError as e:
            return Snapshot(threads=found, processes=others, libraries_how="",
                            error=f"the worker's libraries could not be read ({e.strerror})")
        try:
            kb = exec_kb(self.pid)
        except OSError:
            kb = None
        return Snapshot(threads=found, processes=others, exec_kb=kb, libraries_how="VmLib" if kb is not None else "")


def _named(items: list[str]) -> list[str]:
    return items[:MAX_NAMED] + ([f"{len(items) - MAX_NAMED} more"] if len(items) > MAX_NAMED else [])


def changes(before: Snapshot, after: Snapshot, libraries_too: bool = True, processes_too: bool = True) -> list[str]:
    """What appeared or changed from ``before`` to ``after``, one phrase per kind (the first
    few named): new threads and renamed ones, (``processes_too``) new processes, and
    (``libraries_too``) newly mapped libraries or growth of executable memory. Threads and
    processes that ended are not changes. [] when nothing did, or when either snapshot could
    not be read (``unread``)."""
    if before.error or after.error:
        return []
    found = []
    new = [f"{tid} ({after.threads[tid]!r})" for tid in sorted(after.threads) if tid not in before.threads]
    if new:
        found.append(f"new thread{'s' if len(new) > 1 else ''} {', '.join(_named(new))}")
    renamed = [f"{tid} ({before.threads[tid]!r} -> {after.threads[tid]!r})" for tid in sorted(after.threads)
               if tid in before.threads and after.threads[tid] != before.threads[tid]]
    if renamed:
        found.append(f"renamed thread{'s' if len(renamed) > 1 else ''} {', '.join(_named(renamed))}")
    procs = [f"{pid} ({after.processes[pid]!r})" for pid in sorted(after.processes) if pid not in before.processes]
    if procs and processes_too:
        found.append(f"new process{'es' if len(procs) > 1 else ''} {', '.join(_named(procs))}")
    if libraries_too and before.libraries_how == after.libraries_how == "maps":
        libs = sorted({path for key, path in after.libraries.items() if key not in before.libraries})
        if libs:
            found.append(f"new librar{'ies' if len(libs) > 1 else 'y'} {', '.join(_named(libs))}")
    elif libraries_too and before.libraries_how == after.libraries_how == "VmLib" \
            and after.exec_kb > before.exec_kb:
        found.append(f"{after.exec_kb - before.exec_kb} kB more executable memory (a library loaded; its path "
                     "is unknown: the grader may not read the worker's memory map here)")
    return found


def unread(*snapshots: Snapshot) -> str:
    """Why the facts (or the libraries among them) of these snapshots could not be read, or ""."""
    for s in snapshots:
        if s.error:
            return s.error
    for s in snapshots:
        if not s.libraries_how:
            return "the worker's libraries could not be read"
    return ""
