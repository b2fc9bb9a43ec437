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

The pieces: this module is the class loop (what to grade, the --force marker,
the run, the class files at the end); reports.py reads report.json and writes
class.csv; grade_process.py runs one student's grade under a supervisor of its
own, kills and reaps whatever it left, and installs its reports; slots.py says
where parallel grade processes run (--gpus, --jobs).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from grader.report import one_line
from grader.rubric import Rubric, rubric_hash
from grader.submission import escape_name

from .cluster_jobs import shards_in_flight
from .gpus import GpuListError, run_parallel, visible_gpus
from .grade_process import STOP_SIGNALS, _grade_one, _signals_deferred, _stop, grade_command, grade_timeout
from .lms.csvio import DIR_MODE, CsvError
from .lms.csvio import write_atomic as _write_atomic
from .lms.intake import discover, remember_rubric, select
from .lms.layouts import Entry, LayoutError, find_entries, student_id  # noqa: F401 - find_entries, student_id: API
from .reports import BadReport, load_report, write_class_files
from .slots import Slot, cpu_slots, gpu_slots
from .summary import other_rubric_line, summary_table  # noqa: F401 - other_rubric_line: API

FORCE_MARKER = ".force-pending"  # in OUT while a --force run has not completed


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
    installed). Used by a local batch and by each shard of a cluster batch.
    ``command`` makes each student's grade command: the caller's (a cluster
    shard's), else this module's ``grade_command`` as it is when the batch runs."""
    command = command or grade_command
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
