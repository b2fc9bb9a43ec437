"""python -m classroom runner --data DIR ACTION: the TA's view of the runner and its levers.

    jobs [--student ID] [--failed]   every run, newest first: when, state, score, attempts, what
                                     went wrong, the student's runs left; --failed: grader errors
                                     and runs that were interrupted
    requeue JOB                      grade a job again (its report dropped, first in line)
    grant ID N                       give a student N more runs in the quota's current window
    close [--at TIME]                uploads refused from TIME on (default: now), with one line
    open                             no deadline
    extend ID --until TIME           one student's own deadline (--until none: the course's again)
    export FILE [--which latest|best]  each student's latest and best graded run as a class.csv
                                     that make gradebook and make merge read

TIME is ISO 8601, "2026-12-20 23:59" (this machine's time zone) or with an offset
("2026-12-20T23:59-05:00"). Everything goes through the store (store.py), so the
running server sees each change at once. The runner's settings (the quota) are
read from DIR/serve.json, written by ``serve``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

from ..lms.csvio import CsvError, to_csv, write_atomic
from ..reports import CSV_FIELDS_HEAD, CSV_FIELDS_TAIL, BadReport, _flags, parse_report
from .store import Job, Quota, Store

ACTIONS = ("jobs", "requeue", "grant", "close", "open", "extend", "export")
EXPORT_EXTRA = ["runs", "latest_total", "latest_job", "latest_at", "best_total", "best_job", "best_at"]
VISIBLE_ONLY_FLAG = "visible_only"   # the run left the hidden tests out (gradebook: --allow visible-only)


def admin_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, metavar="DIR", help="the runner's folder (serve --data)")
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("target", nargs="*", metavar="ARG", help="requeue JOB | grant ID N | extend ID | export FILE")
    p.add_argument("--student", default=None, metavar="ID", help="jobs: one student's only")
    p.add_argument("--failed", action="store_true", help="jobs: grader errors and interrupted runs only")
    p.add_argument("--at", default=None, metavar="TIME", help="close: when (default now)")
    p.add_argument("--until", default=None, metavar="TIME", help="extend: the student's own deadline, or none")
    p.add_argument("--which", choices=["latest", "best"], default="latest",
                   help="export: the run whose scores fill class.csv's columns (default latest; both are "
                        "in the extra columns)")


class UsageError(Exception):
    """One line; exit status 2."""


def parse_time(text: str) -> float:
    """Epoch seconds of an ISO 8601 time (local time when it has no offset)."""
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"{text!r}: expected a time such as '2026-12-20 23:59' or "
                         "'2026-12-20T23:59-05:00'") from None
    return when.timestamp()   # a naive time is this machine's local time


def show_time(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(epoch)) if epoch else "-"


def _settings(data: Path) -> dict:
    try:
        return json.loads((data / "serve.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _quota(settings: dict) -> Quota:
    return Quota(int(settings.get("quota", 0) or 0), float(settings.get("quota_window_h", 24.0) or 24.0))


def _score(job: Job) -> str:
    if job.state != "done":
        return ""
    if job.error:
        return "error"
    return f"{job.score:g}/{job.max_score:g}" if job.score is not None and job.max_score is not None else "?"


def _what(job: Job) -> str:
    """What went wrong with a job, in one line: its grader error, each interruption."""
    parts = [job.error] if job.error else []
    parts += [f"retried: {r['why']}" for r in job.retries]
    return "; ".join(parts)


def jobs_table(store: Store, quota: Quota, student: str | None, failed: bool) -> str:
    from tabulate import tabulate
    rows, left = [], {}
    for job in store.all_jobs(student):
        if failed and not (job.error or job.retries):
            continue
        if job.student not in left:
            q = store.quota_state(job.student, quota)
            left[job.student] = "-" if q["left"] is None else str(q["left"])
        rows.append([job.id, job.student, show_time(job.created), job.state, job.attempts, _score(job),
                     left[job.student], _what(job)[:200]])
    if not rows:
        return "no job" + (" of " + student if student else "") + (" that failed" if failed else "")
    return tabulate(rows, headers=["job", "student", "uploaded", "state", "attempts", "score", "runs left",
                                   "what happened"], tablefmt="simple")


# ----------------------------------------------------------------------------- export

def _people(settings: dict) -> dict:
    """{student id: roster member} from the roster serve was started with (names, emails, SIDs)."""
    from ..lms.roster import load_roster
    try:
        roster = load_roster(settings["roster"])
    except (KeyError, CsvError, OSError):
        return {}
    return {m.key or m.person.email or m.person.sid: m for m in roster.members}


def _graded(store: Store) -> dict[str, list[tuple[Job, dict]]]:
    """{student: [(job, its report's fields), ...] oldest first} of every graded run."""
    out: dict[str, list] = {}
    for job in reversed(store.all_jobs()):
        if job.state != "done" or job.error:
            continue
        stored = store.report(job.id)
        try:
            report = parse_report(stored[0]) if stored else None
        except BadReport:
            report = None
        if report is not None and "grader_error" not in report:
            out.setdefault(job.student, []).append((job, report))
    return out


def export_rows(store: Store, settings: dict, tasks: list[str], which: str) -> list[dict]:
    people, graded = _people(settings), _graded(store)
    rows = []
    for row in store.students():
        sid = row["id"]
        m = people.get(sid)
        person = {"id": sid, "name": m.person.name if m else "", "email": m.person.email if m else "",
                  "sid": m.person.sid if m else ""}
        runs = graded.get(sid, [])
        if not runs:
            rows.append(person | {"flags": "not_graded", "runs": 0})
            continue
        latest = runs[-1]
        best = max(reversed(runs), key=lambda r: r[1]["score"])      # ties: the later run
        job, report = latest if which == "latest" else best
        tests = report["tests"]
        out = person | {"total": report["score"], "max": report["max_score"], "runs": len(runs),
                        "bonus": sum(t["score"] for t in tests if t["bonus"]),
                        "partial": report["partial"], "seed": report["seed"], "device": report["gpu"] or "cpu",
                        "graded_at": report["started"], "rubric_hash": report["rubric_hash"] or "",
                        "submitted_at": dt.datetime.fromtimestamp(job.created, dt.timezone.utc).isoformat(
                            timespec="seconds"), "layout": "runner", "lms_id": job.id,
                        "latest_total": latest[1]["score"], "latest_job": latest[0].id,
                        "latest_at": show_time(latest[0].finished), "best_total": best[1]["score"],
                        "best_job": best[0].id, "best_at": show_time(best[0].finished)}
        for kind in ("correctness", "performance"):
            out[kind] = sum(t["score"] for t in tests if t["kind"] == kind and not t["bonus"])
        for task in report["tasks"]:
            if task["task"] in tasks:
                out[task["task"]] = task["score"]
        flags = _flags(report) + ([VISIBLE_ONLY_FLAG] if report["hidden_points"] else [])
        out["flags"] = ";".join(flags)
        rows.append(out)
    return rows


def export(store: Store, data: Path, path: Path, which: str) -> int:
    from grader.rubric import DEFAULT_RUBRIC, load_rubric
    settings = _settings(data)
    tasks = list(load_rubric(settings.get("rubric") or DEFAULT_RUBRIC).tasks)
    rows = export_rows(store, settings, tasks, which)
    fields = [*CSV_FIELDS_HEAD, *tasks, *CSV_FIELDS_TAIL, *EXPORT_EXTRA]
    write_atomic(path, to_csv(fields, [[r.get(f, "") for f in fields] for r in rows]), mode=0o600)
    graded = sum(1 for r in rows if r.get("runs"))
    print(f"{path}: {len(rows)} students, {graded} with a graded run ({which} run's scores); "
          f"make gradebook / make merge read it (BATCH_DIR={path.parent} if it is named class.csv)")
    return 0


# ----------------------------------------------------------------------------- main

def admin_main(args) -> int:
    data = Path(args.data)
    try:
        store = Store(data)
    except (FileNotFoundError, RuntimeError) as e:
        print(e, file=sys.stderr)
        return 2
    try:
        return _act(store, data, args)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    except KeyError as e:
        print(f"no such {'job' if args.action == 'requeue' else 'student'}: {e.args[0]!r} "
              f"(python -m classroom runner --data {data} jobs)", file=sys.stderr)
        return 2
    finally:
        store.close()


def _want(args, n: int, usage: str) -> list[str]:
    if len(args.target) != n:
        raise UsageError(f"usage: python -m classroom runner --data DIR {usage}")
    return args.target


def _act(store: Store, data: Path, args) -> int:
    settings = _settings(data)
    if args.action == "jobs":
        _want(args, 0, "jobs [--student ID] [--failed]")
        print(jobs_table(store, _quota(settings), args.student, args.failed))
        if not args.failed:
            failed = data / "failed"
            if failed.is_dir() and any(failed.iterdir()):
                print(f"\nthe folders (log, files) of grades that failed: {failed}/<job>/<attempt>/")
        return 0
    if args.action == "requeue":
        (job_id,) = _want(args, 1, "requeue JOB")
        try:
            job = store.requeue(job_id)
        except ValueError as e:
            raise UsageError(str(e)) from None
        print(f"job {job.id} ({job.student}) queued again, first in line; its earlier report is dropped")
        return 0
    if args.action == "grant":
        sid, n = _want(args, 2, "grant ID N")
        if not n.lstrip("-").isdigit() or int(n) == 0:
            raise UsageError(f"grant {sid} {n}: N is a whole number of runs (negative takes runs away)")
        store.grant(sid, int(n))
        q = store.quota_state(sid, _quota(settings))
        print(f"{sid}: {int(n):+d} run(s) in the current window; runs left now: "
              f"{'no limit' if q['left'] is None else q['left']}")
        return 0
    if args.action == "close":
        _want(args, 0, "close [--at TIME]")
        when = parse_time(args.at) if args.at else time.time()
        store.set_close_at(when)
        print(f"uploads close at {show_time(when)}" + (" (now)" if not args.at else "")
              + (f"; extensions: {', '.join(f'{s} until {show_time(u)}' for s, u in store.extensions().items())}"
                 if store.extensions() else ""))
        return 0
    if args.action == "open":
        _want(args, 0, "open")
        store.set_close_at(None)
        print("uploads are open: no deadline")
        return 0
    if args.action == "extend":
        (sid,) = _want(args, 1, "extend ID --until TIME|none")
        if not args.until:
            raise UsageError("extend: --until TIME (or --until none)")
        until = None if args.until.strip().lower() == "none" else parse_time(args.until)
        store.extend(sid, until)
        print(f"{sid}: " + (f"uploads open until {show_time(until)}" if until else "the course's deadline again"))
        return 0
    (path,) = _want(args, 1, "export FILE [--which latest|best]")
    return export(store, data, Path(path), args.which)
