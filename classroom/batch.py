"""Grade a whole class: one submission per student, each in its own process.

Layout of the output folder:

    OUT/students/<id>/report.md, report.json, results.json   one per student
    OUT/class.csv, OUT/summary.md                            rebuilt from the reports
    OUT/staged/<id>/        kernel files that came loose (Canvas, Moodle), graded from here
    OUT/roster.csv, OUT/batch.json   the roster and a --layout given, reused by later runs

Where the submissions are and whose they are is classroom/lms/ (layouts.py:
plain, Gradescope export, Canvas and Moodle downloads; roster.py).
``<id>`` is a folder-safe id (``student_id``); class.csv keeps the original
name, the submitters' names, emails and SIDs. A student's folder appears
(atomic rename) only once all three reports exist, so an interruption (Ctrl-C,
SIGTERM, power loss) leaves only complete folders and the next run picks up
where it stopped; --force regrades. When grading a student fails (the grade
process crashes, hangs past the limit, writes no or an unusable report), the
batch writes that student's reports itself: score 0, the reason, and
``grader_error`` in report.json. Those students are retried on resume.

A --force run leaves OUT/.force-pending until it has completed: a resumed
run, with or without --force, regrades every student whose report is older
than that marker, so old and new grades never mix. ``--student ID`` regrades
one student and rebuilds the class files. Each report records the hash of
the rubric it was made under (``rubric_hash``); reports made under another
rubric are listed at the end. Entries of the submissions folder that are
not submissions (late_days.txt, .DS_Store) are skipped with a warning.

Each grade process runs under a supervisor of its own (grader/harness/proc.py)
with its output in a file (no pipes for an escaped process to hold): when
a student is done, timed out or interrupted, or when the batch itself dies,
every process left from that student's grading, including ones that started
a new session or double-forked, is killed and reaped, and nothing else is:
with --gpus or --jobs (classroom/gpus.py) one grade process per slot (a GPU,
a CPU job) runs at a time, and one student's clean-up never touches
another's processes. run_grade_process is the one place the batch starts and
ends a process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from grader.harness import proc
from grader.report import REPORT_FILES, error_result, escape_name, one_line, write_reports
from grader.rubric import Rubric, rubric_hash

from .cluster_jobs import shards_in_flight
from .gpus import GpuListError, Stopped, run_parallel, visible_gpus
from .history import keep_previous, previous
from .lms.csvio import DIR_MODE, FILE_MODE, CsvError, to_csv
from .lms.csvio import write_atomic as _write_atomic
from .lms.intake import discover, remember_rubric, select
from .lms.layouts import Entry, LayoutError, find_entries, student_id  # noqa: F401 - find_entries, student_id: API
from .summary import other_rubric_line, summary_table, write_summary  # noqa: F401 - other_rubric_line: API

ROOT = Path(__file__).resolve().parent.parent
REPORT_JSON_BYTES = 8 << 20      # largest report.json the batch reads
MAX_ITEMS = 10_000               # most tests, tasks, flags or notes read from one report
FORCE_MARKER = ".force-pending"  # in OUT while a --force run has not completed
_HASH = re.compile(r"[0-9a-f]{6,64}")
STOP_SIGNALS = tuple(getattr(signal, s) for s in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, s))

_FLAG_KIND = re.compile(r"[a-z][a-z0-9_]{0,39}")
TEST_STATUSES = ("passed", "partial", "failed", "not_run")
# class.csv's columns, in this order, the rubric's tasks between head and tail (README.md documents each).
CSV_FIELDS_HEAD = ["id", "name", "email", "sid", "total", "max", "correctness", "bonus", "performance"]
CSV_FIELDS_TAIL = ["flags", "submitted_at", "graded_at", "rubric_hash", "device", "partial", "seed",
                   "layout", "lms_id", "original_name", "error"]


# ----------------------------------------------------------------------------- processes

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


@dataclass(frozen=True)
class Slot:
    """Where a parallel batch runs a grade process: its name (a GPU, or a CPU
    job's number), the environment it adds (CUDA_VISIBLE_DEVICES, thread
    limits), and the batch's stop event."""
    name: str
    env: tuple
    stop: threading.Event


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


# ----------------------------------------------------------------------------- reports

class BadReport(ValueError):
    """A report.json the class files cannot use."""


def _num(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadReport(f"{what} is not a number")
    return value


def _items(value, what: str) -> list:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise BadReport(f"{what} is not a list of at most {MAX_ITEMS}")
    return value


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise BadReport(f"{what} is not text")
    return value[:10_000]


def load_report(path: Path) -> dict:
    """Read a report.json defensively (an earlier, hostile run may have made
    it): size cap, no symlink, JSON depth errors caught, and every field the
    batch uses checked for its type. Returns only those fields."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise BadReport(f"cannot open: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_mode & 0o170000 != 0o100000:
            raise BadReport("not a plain file")
        raw = f.read(REPORT_JSON_BYTES + 1)
    if len(raw) > REPORT_JSON_BYTES:
        raise BadReport(f"larger than {REPORT_JSON_BYTES >> 20} MB")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError, MemoryError) as e:
        raise BadReport(f"not valid JSON ({type(e).__name__})") from None
    if not isinstance(data, dict):
        raise BadReport("not a JSON object")
    if "grader_error" in data:
        try:
            max_score = _num(data.get("max_score_all_tests"), "max_score_all_tests")
        except BadReport:
            max_score = None
        return {"grader_error": one_line(_text(data["grader_error"], "grader_error"), 1000),
                "max_score": max_score, "rubric_hash": _report_hash(data)}
    out = {"score": _num(data.get("score"), "score"), "max_score": _num(data.get("max_score"), "max_score"),
           "partial": data.get("partial"), "seed": data.get("seed"), "gpu": data.get("gpu"),
           "started": _text(data.get("started"), "started"), "rubric_hash": _report_hash(data)}
    if not isinstance(out["partial"], bool):
        raise BadReport("partial is not true or false")
    if out["seed"] is not None and (isinstance(out["seed"], bool) or not isinstance(out["seed"], int)):
        raise BadReport("seed is not an integer")
    if out["gpu"] is not None:
        _text(out["gpu"], "gpu")
    out["tests"] = []
    for i, t in enumerate(_items(data.get("tests"), "tests")):
        if not isinstance(t, dict):
            raise BadReport(f"tests[{i}] is not an object")
        out["tests"].append({"kind": _text(t.get("kind"), f"tests[{i}].kind"),
                             "score": _num(t.get("score"), f"tests[{i}].score"),
                             "bonus": t.get("bonus") is True,
                             # for the class view only: a test without them is left out of its table
                             "name": one_line(t["name"], 100) if isinstance(t.get("name"), str) else "",
                             "status": t["status"] if t.get("status") in TEST_STATUSES else "",
                             "cause": _cause(t.get("message"))})
    out["tasks"] = []
    for i, t in enumerate(_items(data.get("tasks"), "tasks")):
        if not isinstance(t, dict):
            raise BadReport(f"tasks[{i}] is not an object")
        flags = _items(t.get("flags", []), f"tasks[{i}].flags")
        out["tasks"].append({"task": _text(t.get("task"), f"tasks[{i}].task"),
                             "score": _num(t.get("score"), f"tasks[{i}].score"),
                             "status": _text(t.get("status", "ok"), f"tasks[{i}].status"),
                             "flags": [_flag(f, f"tasks[{i}].flags") for f in flags]})
    return out


def _cause(message) -> str:
    """What a test's message says went wrong, in one line: its "likely cause:"
    line (grader/diagnose.py), else its first line."""
    if not isinstance(message, str):
        return ""
    lines = [line.strip() for line in message[:20_000].splitlines() if line.strip()]
    cause = next((line for line in lines if line.startswith("likely cause:")), lines[0] if lines else "")
    return one_line(cause, 200)


def _flag(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise BadReport(f"{what} holds a flag that is not a record")
    return value


def _report_hash(data: dict) -> str | None:
    """The report's ``rubric_hash`` when it has a well-formed one (older reports have none)."""
    value = data.get("rubric_hash")
    return value if isinstance(value, str) and _HASH.fullmatch(value) else None


def _flags(report: dict) -> list[str]:
    """Flag names for the CSV, read from data only: each task's ``status`` kind
    when it is not "ok" (not_implemented, timeout, ...) and the ``kind`` of its
    flag records (library_matmul, ...)."""
    kinds = []
    for task in report["tasks"]:
        kinds.append(task["status"])
        kinds += [f.get("kind") for f in task["flags"]]
    return list(dict.fromkeys(k for k in kinds if isinstance(k, str) and k != "ok" and _FLAG_KIND.fullmatch(k)))


def _people(entry_or_people, field: str) -> str:
    """One class.csv cell for a field of every submitter ("; " between group members)."""
    people = getattr(entry_or_people, "people", entry_or_people)
    return "; ".join(getattr(p, field).replace(";", ",") for p in people) if any(
        getattr(p, field) for p in people) else ""


def _identity(entry: Entry) -> dict:
    """The columns that say whose submission a row is."""
    extra = [f for f, on in (("duplicate", entry.duplicate), ("late", entry.late)) if on]
    return {"id": entry.sid, "name": _people(entry, "name"), "email": _people(entry, "email"),
            "sid": _people(entry, "sid"), "layout": entry.layout, "lms_id": entry.lms_id,
            "original_name": escape_name(entry.original), "submitted_at": entry.submitted_at, "_extra": extra}


def _with_flags(row: dict, flags: list[str]) -> dict:
    row["flags"] = ";".join(dict.fromkeys(flags + row.pop("_extra")))
    return row


def _row(entry: Entry, report: dict, tasks: list[str]) -> dict:
    row = _identity(entry) | {"_graded": True, "total": report["score"], "max": report["max_score"]}
    for kind in ("correctness", "performance"):  # without bonus: bonus has its own column
        row[kind] = sum(t["score"] for t in report["tests"] if t["kind"] == kind and not t["bonus"])
    row["bonus"] = sum(t["score"] for t in report["tests"] if t["bonus"])
    for task in report["tasks"]:
        if task["task"] in tasks:
            row[task["task"]] = task["score"]
    row.update(partial=report["partial"], seed=report["seed"], device=report["gpu"] or "cpu",
               graded_at=report["started"], rubric_hash=report["rubric_hash"], _tests=report["tests"])
    return _with_flags(row, _flags(report))


def _error_row(entry: Entry, error: str, max_score=None) -> dict:
    row = _identity(entry) | {"total": 0, "max": max_score if max_score is not None else "", "error": error}
    return _with_flags(row, ["grader_error"])


def _previous(out: Path, sid: str) -> dict | None:
    """The score of a student's report before the last regrade (OUT/history), or None."""
    path = previous(out, sid)
    if path is None:
        return None
    try:
        report = load_report(path)
    except BadReport:
        return None
    if "grader_error" in report:
        return {"score": None, "graded_at": "", "error": report["grader_error"]}
    return {"score": report["score"], "max": report["max_score"], "graded_at": report["started"]}


def write_class_files(out: Path, entries: list[Entry], tasks: list[str], current_hash: str = "",
                      not_submitted=()) -> list[dict]:
    """Rebuild class.csv and the class view (summary.md, .html, .png) from
    whatever reports exist now. A report that cannot be used becomes that
    student's grader_error row. ``current_hash``: the rubric now in use, to
    list reports made under another. ``not_submitted``: roster members
    (classroom.lms.roster.Member) without a submission, one ``no_submission`` row each."""
    rows = []
    for entry in entries:
        path = out / "students" / entry.sid / "report.json"
        if not (path.exists() or path.is_symlink()):
            rows.append(_with_flags(_identity(entry), ["not_graded"]))
            continue
        try:
            report = load_report(path)
        except BadReport as e:
            rows.append(_error_row(entry, f"report.json unusable: {e}"))
            continue
        if "grader_error" in report:
            row = _error_row(entry, report["grader_error"], report["max_score"]) | {
                "rubric_hash": report["rubric_hash"]}
        else:
            row = _row(entry, report, tasks)
        row["_previous"] = _previous(out, entry.sid)
        rows.append(row)
    for m in not_submitted:
        rows.append({"id": m.key, "name": _people([m.person], "name"), "email": _people([m.person], "email"),
                     "sid": _people([m.person], "sid"), "flags": "no_submission"})
    fields = [*CSV_FIELDS_HEAD, *tasks, *CSV_FIELDS_TAIL]
    _write_atomic(out / "class.csv", to_csv(fields, [[r.get(f, "") for f in fields] for r in rows]))
    write_summary(out, rows, tasks, current_hash)
    return rows


# ----------------------------------------------------------------------------- the batch

def _is_finished(students: Path, sid: str, since_ns: int | None = None) -> bool:
    """A usable report without a grader error, and (``since_ns``: a --force
    run is pending) written after that run started: not graded again on resume."""
    path = students / sid / "report.json"
    try:
        if "grader_error" in load_report(path):
            return False
        return since_ns is None or path.lstat().st_mtime_ns >= since_ns
    except (BadReport, OSError):
        return False


def _start_force(out: Path, digest: str) -> None:
    """Mark a --force run as pending (its rubric hash and start time): until it
    completes, a resumed run regrades every report older than the marker."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    _write_atomic(out / FORCE_MARKER, json.dumps({"rubric_hash": digest, "started": started}) + "\n")


def _force_pending(out: Path) -> tuple[int, str] | None:
    """(the marker's mtime in ns, when the run started) while a --force run is
    pending, else None. The marker's own mtime is the reference: reports and
    marker are dated by the same file system clock."""
    path = out / FORCE_MARKER
    try:
        since = path.lstat().st_mtime_ns
    except OSError:
        return None
    try:
        started = str(json.loads(path.read_text(encoding="utf-8")).get("started", "?"))
    except (OSError, ValueError, AttributeError):
        started = "?"
    return since, one_line(started, 40)


def _warn_if_not_isolated() -> None:
    """One clear line when student code would not run in an isolating sandbox here."""
    try:
        import torch

        from grader.harness.sandbox import backend
        b = backend(gpu=torch.cuda.is_available())
        problem = None if b.isolated else b.summary()
    except Exception as e:  # noqa: BLE001 - no sandbox at all is the same warning
        problem = f"no sandbox: {e}"
    if problem:
        print("WARNING: grades on this machine are not tamper-proof: student code would not run in "
              f"an isolating sandbox ({problem}). Use the Docker image with the options in "
              "docs/integrity.md, or a Linux machine with bwrap, for official grades.", file=sys.stderr)


def _current_hash(rubric: Rubric) -> str:
    if rubric.hash:
        return rubric.hash
    source = Path(rubric.source)
    return rubric_hash(source) if source.is_file() else ""


def _warning(line: str) -> None:
    print(f"warning: {escape_name(line)}", file=sys.stderr)


def _usage_error(line: str) -> int:
    print(escape_name(line), file=sys.stderr)
    return 2


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, and a cgroup's CPU quota where one is set)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:  # cgroup v2: "max 100000" or "<quota> <period>"
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def spare_cores() -> int:
    """The default JOBS: the usable cores that are not busy now (the 1-minute load average), at least 1."""
    cores = usable_cores()
    try:
        busy = int(os.getloadavg()[0] + 0.5)
    except OSError:
        busy = 0
    return max(1, min(cores, cores - busy))


def cpu_slots(jobs: int) -> list[tuple[str, tuple]]:
    """(name, environment) of each of ``jobs`` CPU slots. Each grade process limits
    its thread pools (PyTorch's, OpenMP's, BLAS's) to its share of the cores, so
    that N students at once do not oversubscribe the machine."""
    threads = str(max(1, usable_cores() // max(1, jobs)))
    env = tuple((k, threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"))
    return [(f"job{i}", env) for i in range(jobs)]


def gpu_slots(gpus: list[str]) -> list[tuple[str, tuple]]:
    return [(gpu, (("CUDA_VISIBLE_DEVICES", gpu),)) for gpu in gpus]


@dataclass
class Plan:
    """What a batch run grades, and everything it needs to write the class files."""
    out: Path
    students: Path
    entries: list
    not_submitted: list
    todo: list
    tasks: list
    digest: str
    timeout_s: float
    pending: tuple | None
    busy: list = field(default_factory=list)   # shards of an earlier cluster run still grading (cluster.py)


def plan_batch(submissions: str, out: str, rubric: Rubric, force: bool = False, timeout_s: float | None = None,
               student: str | None = None, layout: str | None = None, roster: str | None = None):
    """Check the folders, read the submissions, decide who to grade: a Plan, or
    the exit status of a usage error (its line printed)."""
    folder, out = Path(submissions), Path(out).absolute()  # grade processes run in ROOT
    if not folder.is_dir():
        hint = "; unzip it first" if folder.is_file() and folder.name.lower().endswith(".zip") else ""
        return _usage_error(f"{folder}: not a folder of submissions{hint}")
    _warn_if_not_isolated()
    students = out / "students"
    try:
        students.mkdir(parents=True, exist_ok=True)
        for d in (out, students):  # ids name students: not for other users of the machine
            with contextlib.suppress(PermissionError):
                os.chmod(d, DIR_MODE)
        probe = tempfile.mkstemp(dir=students, prefix=".probe-")
        os.close(probe[0])
        os.unlink(probe[1])
    except OSError as e:
        return _usage_error(f"cannot write to {students}: {e.strerror}; user id {os.getuid()} needs write "
                            "access to it")
    for stale in students.glob(".*-*"):  # an interrupted run's temporary folders
        shutil.rmtree(stale, ignore_errors=True)
    try:
        entries, not_submitted, lines = discover(folder, out, layout, roster, warn=_warning)
    except (LayoutError, CsvError) as e:
        return _usage_error(str(e))
    for line in lines:
        print(line)
    if not entries:
        return _usage_error(f"{folder}: no submissions found (an empty folder, or nothing in it is a submission "
                            "of the layout above): check the path, or unzip the platform's download there")
    digest = _current_hash(rubric)
    remember_rubric(out, digest)
    timeout_s = timeout_s or grade_timeout(rubric)
    pending = None
    if student is not None:
        todo = select(entries, student)
        if len(todo) != 1:
            found = (f"{len(todo)} submissions match {student!r} ({', '.join(e.sid for e in todo[:10])})"
                     if todo else f"no submission {student!r} in {folder}")
            return _usage_error(f"{found}: give its id (the id column of class.csv), its file name, or its "
                                "email or SID")
        print(f"regrading {todo[0].sid}")
    else:
        if force:
            _start_force(out, digest)
        pending = _force_pending(out)
        since = pending[0] if pending else None
        todo = [e for e in entries if force or not _is_finished(students, e.sid, since)]
        if pending and not force:
            print(f"an interrupted --force run (started {pending[1]}) is resumed: reports older than it "
                  "are regraded")
    busy = shards_in_flight(out / "cluster")   # a cluster run's shards still grading: not a second time here
    taken = {sid for r in busy for sid in r["students"]}
    listed = len(todo)
    if taken:
        todo = [e for e in todo if e.sid not in taken]
        print(f"{len(busy)} shard(s) of an earlier cluster run are still grading {listed - len(todo)} of these "
              f"(jobs {', '.join(r['job_id'] for r in busy)}): not graded here")
    if student is None:
        print(f"{len(entries)} submissions, {len(entries) - listed} already graded, {len(todo)} to grade")
    return Plan(out, students, entries, not_submitted, todo, list(rubric.tasks), digest, timeout_s, pending, busy)


def finish_batch(plan: Plan, stopped_by=None) -> int:
    """Write the class files from the reports there are, print the summary; the exit status."""
    with _signals_deferred(reraise=False):
        rows = write_class_files(plan.out, plan.entries, plan.tasks, plan.digest, plan.not_submitted)
    print(summary_table(rows, plan.tasks, plan.digest))
    print(f"\nclass CSV: {plan.out / 'class.csv'}; summary: {plan.out / 'summary.md'} (and .html); "
          f"per-student reports: {plan.students}/<id>/")
    return 128 + int(stopped_by) if stopped_by else 0


def run_batch(submissions: str, out: str, rubric: Rubric, force: bool = False,
              timeout_s: float | None = None, student: str | None = None, layout: str | None = None,
              roster: str | None = None, gpus: str | None = None, jobs: int = 1, seed: int | None = None) -> int:
    """Grade every submission in ``submissions`` not yet graded (all of them
    with ``force``; only ``student``, by id, file name, email or SID, when
    given) and rebuild the class files. ``layout``: auto (detect), plain,
    gradescope, canvas or moodle; ``roster``: a CSV of names, emails and SIDs;
    ``gpus``: grade on several GPUs at once ("all" or a list), one student per
    GPU; else ``jobs`` students at once on the CPU. ``seed``: each student's
    seed derived from it (the same scores, however the class is split up).
    Returns the exit status."""
    try:
        slots = gpu_slots(visible_gpus(gpus)) if gpus else cpu_slots(jobs) if jobs > 1 else []
    except GpuListError as e:
        return _usage_error(str(e))
    plan = plan_batch(submissions, out, rubric, force, timeout_s, student, layout, roster)
    if isinstance(plan, int):
        return plan
    if slots and len(plan.todo) > 1:
        where = f"on {len(slots)} GPUs ({', '.join(n for n, _ in slots)})" if gpus else \
            f"{len(slots)} at a time, {dict(slots[0][1])['OMP_NUM_THREADS']} thread(s) each"
        print(f"grading {where}")
    stopped_by = None
    try:
        grade_entries(plan.todo, plan.students, rubric, plan.timeout_s, slots, seed=seed)
        if plan.pending:  # every student is now graded after the --force run began
            with contextlib.suppress(FileNotFoundError):
                os.unlink(plan.out / FORCE_MARKER)
    except KeyboardInterrupt as e:
        stopped_by = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
        print("\ninterrupted: finished students are kept; run the same command again to resume")
    return finish_batch(plan, stopped_by)


def grade_entries(todo: list[Entry], students: Path, rubric: Rubric, timeout_s: float, slots=(),
                  seed: int | None = None, command=None) -> None:
    """Grade ``todo`` into ``students``, serially or one grade process per slot
    at a time, with the batch's stop signals and clean-up. A stop signal
    raises KeyboardInterrupt once every grade process is gone (nothing half
    installed). Used by a local batch and by each shard of a cluster batch."""
    main_thread = threading.current_thread() is threading.main_thread()
    handlers = {s: signal.signal(s, _stop) for s in STOP_SIGNALS  # what the caller ignores stays ignored
                if main_thread and signal.getsignal(s) not in (signal.SIG_IGN, None)}
    try:
        if slots and len(todo) > 1:
            _grade_parallel(todo, students, rubric, timeout_s, slots, seed, command)
        else:
            # One student: all the cores are theirs; a GPU slot still names its GPU.
            env = {k: v for k, v in (slots[0][1] if slots else ()) if k == "CUDA_VISIBLE_DEVICES"}
            one = Slot(slots[0][0], tuple(env.items()), threading.Event()) if slots else None
            for entry in tqdm(todo, unit="student", dynamic_ncols=True):
                try:
                    status = _grade_one(entry, students, rubric, timeout_s, one, command, seed)
                except Exception as e:  # the batch's own failure (disk full...): this student only
                    status = f"batch error: {type(e).__name__}: {e}"
                if status != "ok":
                    tqdm.write(f"{entry.sid}: grader error: {one_line(status, 300)}")
    finally:
        with _signals_deferred(reraise=False):
            for s, h in handlers.items():
                signal.signal(s, h)


def _grade_parallel(todo: list[Entry], students: Path, rubric: Rubric, timeout_s: float, slots: list,
                    seed: int | None = None, command=None) -> None:
    """Grade ``todo`` with one grade process per slot (a GPU, a CPU job) at a time."""
    bar = tqdm(total=len(todo), unit="student", dynamic_ncols=True)
    lock = threading.Lock()
    env_of = dict(slots)

    def work(entry: Entry, name: str, stop: threading.Event) -> str:
        return _grade_one(entry, students, rubric, timeout_s, Slot(name, env_of[name], stop), command, seed)

    def done(entry: Entry, status: str) -> None:
        with lock:
            if status != "ok":
                bar.write(f"{entry.sid}: grader error: {one_line(status, 300)}")
            bar.update(1)
    try:
        run_parallel(todo, [name for name, _ in slots], work, done)
    finally:
        bar.close()
