"""One grade process per student: its command, its supervisor, its reports
installed by renames, and the stop signals held back while it is cleaned up.

Each grade process runs under a supervisor of its own (grader/harness/proc.py)
with its output in a file (no pipes for an escaped process to hold): when a
student is done, timed out or interrupted, or when the batch itself dies,
every process left from that student's grading, including ones that started a
new session or double-forked, is killed and reaped, and nothing else is: with
--gpus or --jobs one grade process per slot (slots.py) runs at a time, and one
student's clean-up never touches another's processes. run_grade_process is the
one place the batch starts and ends a process. A failed grade (a crash, a
hang past the limit, no or an unusable report) becomes that student's
grader_error reports, written here.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from grader.harness import proc
from grader.report import REPORT_FILES, error_result, one_line, write_reports
from grader.rubric import Rubric

from .gpus import Stopped
from .history import keep_previous
from .lms.csvio import DIR_MODE, FILE_MODE
from .lms.layouts import Entry
from .reports import BadReport, load_report
from .slots import Slot

ROOT = Path(__file__).resolve().parent.parent
STOP_SIGNALS = tuple(getattr(signal, s) for s in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, s))

_STOPPED = "stopped"      # run_grade_process: the batch stopped before the grade process ended
_deferring = 0            # > 0 inside clean-up that a stop signal must not cut short
_pending: list[int] = []  # stop signals that arrived meanwhile


def _stop(signum, frame):
    """Ctrl-C, SIGTERM and SIGHUP stop the batch the same way: KeyboardInterrupt,
    held back until the clean-up in progress (killing a tree, installing a
    folder) is done. (A signal mask would not do: another thread, such as
    tqdm's monitor, would take the signal instead.)"""
    if _deferring:
        _pending.append(signum)
        return
    raise KeyboardInterrupt(signum)


@contextlib.contextmanager
def _signals_deferred(reraise: bool = True):
    """Run the block to its end whatever stop signal arrives, then act on it.
    (Only the main thread is ever interrupted: elsewhere this does nothing.)"""
    global _deferring
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _pending:
            signum = _pending[0]
            _pending.clear()
            if reraise:
                raise KeyboardInterrupt(signum)


def grade_command(path: Path, report_dir: Path, rubric: Rubric) -> list[str]:
    """The command that grades one submission into ``report_dir``."""
    source = Path(rubric.source)
    return [sys.executable, "-m", "grader", "grade", str(path), "--report-dir", str(report_dir),
            "--rubric", str(source.absolute() if source.is_file() else source)]


def grade_timeout(rubric: Rubric) -> float:
    """The wall-clock limit of one student's grade process: three tasks' limits and start-up."""
    return 3 * max(rubric.settings.task_timeout_s, rubric.settings.cpu_task_timeout_s) + 300


def student_seed(seed: int, sid: str) -> int:
    """A student's seed in a batch given ``--seed``: the same for the same student
    whichever machine, slot or shard grades them, different between students."""
    digest = hashlib.blake2b(f"{seed}:{sid}".encode(), digest_size=7).digest()
    return int.from_bytes(digest, "little")


def _tail(path: Path, chars: int = 4000) -> str:
    """The end of a log file, read without loading the whole file."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - chars))
            return f.read(chars).decode("utf-8", "replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return one_line(lines[-1], 300) if lines else ""


def run_grade_process(cmd: list[str], log: Path, timeout_s: float, slot: Slot | None = None):
    """Run one grade process with its output in ``log`` and a deadline; when it
    ends, times out or the batch stops, kill and reap its whole tree. Returns
    its exit status, None on timeout, or _STOPPED (``slot``'s stop was set first).

    The one place the batch starts and ends processes. Each grade process runs
    under a supervisor of its own (grader/harness/proc.py), which kills and
    reaps everything the grade left, however it escaped, and nothing else: a
    student's clean-up never touches another slot's processes."""
    env = dict(os.environ, **dict(slot.env)) if slot is not None else None
    p = None
    try:
        with open(log, "wb") as out:
            p = proc.start(cmd, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out,
                           stderr=subprocess.STDOUT, deadline_s=timeout_s)
        while (rc := p.wait(0.05)) is None:
            if slot is not None and slot.stop.is_set():
                return _STOPPED
        return None if p.timed_out else rc
    finally:
        if p is not None:
            with _signals_deferred():
                p.kill()   # its supervisor kills and reaps what the grade left; waits until it has


def _grade_one(entry: Entry, students: Path, rubric: Rubric, timeout_s: float, slot: Slot | None = None,
               command=None, seed: int | None = None) -> str:
    """Grade one student in a child process and install their report folder;
    return 'ok' or the reason for the grader error written in its place.
    With a ``slot`` (a parallel batch) the child gets the slot's environment, and
    Stopped is raised, with nothing installed, if the batch stops meanwhile.
    ``command``: what makes the grade command (default: grade_command);
    ``seed``: the batch's --seed (each student's own is derived from it)."""
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.sid}-", dir=students))
    reports, log = work / "reports", work / "grade.log"
    cmd = (command or grade_command)(entry.path, reports, rubric)
    if seed is not None:
        cmd = [*cmd, "--seed", str(student_seed(seed, entry.sid))]
    try:
        rc = run_grade_process(cmd, log, timeout_s, slot)
        if rc == _STOPPED:
            raise Stopped(entry.sid)
        if rc is None:
            reason = f"grading took longer than {timeout_s:g} s; it was stopped"
        elif rc != 0:
            reason = f"the grader exited with code {rc}: {_last_line(_tail(log))}"
        else:
            reason = _check_reports(reports)
        with _signals_deferred():
            if reason:
                shutil.rmtree(reports, ignore_errors=True)
                write_reports(error_result(rubric, entry.path, reason), reports, error=reason)
            _install(reports, students / entry.sid, work)
        return reason or "ok"
    finally:
        with _signals_deferred():
            shutil.rmtree(work, ignore_errors=True)


def _check_reports(reports: Path) -> str:
    """'' when the three reports are plain files and report.json is usable, else why not."""
    missing = [n for n in REPORT_FILES if not _plain_file(reports / n)]
    if missing:
        return f"the grader wrote no {', '.join(missing)}"
    try:
        report = load_report(reports / "report.json")
    except BadReport as e:
        return f"report.json unusable: {e}"
    return f"the grader reported an error: {report['grader_error']}" if "grader_error" in report else ""


def _plain_file(path: Path) -> bool:
    try:
        return path.lstat().st_mode & 0o170000 == 0o100000
    except OSError:
        return False


def _install(reports: Path, final: Path, work: Path) -> None:
    """Put the three reports at ``final`` (nothing else the run left there) by
    renames only: at every moment ``final`` is the old complete folder, absent,
    or the new complete folder. Readable by the owner's group (course staff).
    A folder it replaces is kept in OUT/history/<id>/ (history.py)."""
    staged = work / "final"
    staged.mkdir(mode=DIR_MODE)
    for name in REPORT_FILES:
        os.replace(reports / name, staged / name)
        os.chmod(staged / name, FILE_MODE)
    os.chmod(staged, DIR_MODE)
    if final.exists() or final.is_symlink():
        os.replace(final, work / "old")
    os.replace(staged, final)
    keep_previous(work / "old", final.parent.parent, final.name)
