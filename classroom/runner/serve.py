"""python -m classroom serve | tokens: start the runner; revoke or reissue a student's token.

    python -m classroom serve --roster ROSTER.csv --data DIR --port PORT [--device cuda|cpu]
        [--gpus all|0,1] [--quota N] [--quota-window H] [--tests visible|all] [--rubric R]
    python -m classroom tokens --data DIR list | revoke ID | reissue ID
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from pathlib import Path

from ..lms.csvio import CsvError, to_csv, write_atomic

TOKENS_FILE = "tokens.csv"
DEFAULT_QUOTA = 4
DEFAULT_LEASE_S = 60.0


def serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--roster", required=True, metavar="CSV",
                   help="the class: one token per student (the roster's id column, else email, else SID)")
    p.add_argument("--data", required=True, metavar="DIR", help="where everything lives: jobs, reports, quotas, "
                   "hashed tokens (runner.sqlite), tokens.csv for the TA; a restart loses nothing")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: behind the TA's HTTPS reverse proxy; "
                        "0.0.0.0 on a campus VPN): docs/runner.md")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cuda (default): one worker per GPU; cpu: grade in Triton's interpreter (tests, dry runs)")
    p.add_argument("--gpus", default="all", metavar="LIST", help="GPUs to grade on, one worker each: all or 0,1")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="--device cpu: jobs graded at once")
    p.add_argument("--quota", type=int, default=DEFAULT_QUOTA, metavar="N",
                   help=f"runs per student per window (default {DEFAULT_QUOTA}; 0: no limit)")
    p.add_argument("--quota-window", type=float, default=24.0, metavar="H",
                   help="the quota's rolling window, hours (default 24)")
    p.add_argument("--tests", choices=["visible", "all"], default="visible",
                   help="visible (default): the hidden tests are never run for a student")
    p.add_argument("--rubric", default=None, help="rubric TOML (default: grader/rubric.toml)")
    p.add_argument("--max-upload-kb", type=int, default=1024, metavar="KB", help="largest upload (default 1024)")
    from ..cluster import EXECUTORS
    p.add_argument("--executor", default=None, choices=EXECUTORS,
                   help="grade each job as a cluster job through submitit (slurm; local: the same path here)")
    p.add_argument("--cluster-jobs", type=int, default=4, metavar="N",
                   help="--executor: cluster jobs running at once (default 4)")
    p.add_argument("--slurm-partition", default=None, metavar="NAME")
    p.add_argument("--gpus-per-task", type=int, default=1, metavar="N", help="--executor: GPUs per job (default 1)")
    p.add_argument("--slurm-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an sbatch option for each job (repeatable)")
    p.add_argument("--close-at", default=None, metavar="TIME",
                   help="the deadline: uploads refused from TIME on ('2026-12-20 23:59', local time; "
                        "python -m classroom runner close/open/extend change it later)")
    p.add_argument("--lease-s", type=float, default=DEFAULT_LEASE_S, help=argparse.SUPPRESS)


def tokens_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, metavar="DIR", help="the runner's folder")
    p.add_argument("action", choices=["list", "revoke", "reissue"])
    p.add_argument("student", nargs="?", metavar="ID", help="the student (tokens.csv's id)")


# ----------------------------------------------------------------------------- tokens.csv

def read_tokens(data_dir: Path) -> list[list[str]]:
    path = data_dir / TOKENS_FILE
    if not path.is_file():
        return []
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
    return [r[:2] for r in rows[1:] if len(r) >= 2]


def write_tokens(data_dir: Path, rows: list[list[str]]) -> None:
    """DIR/tokens.csv (id, token), readable by the TA alone: the only copy of the tokens in clear."""
    write_atomic(data_dir / TOKENS_FILE, to_csv(["id", "token"], rows), mode=0o600)


def _ids(roster_path: str) -> list[str]:
    from ..lms.roster import load_roster
    roster = load_roster(roster_path)
    ids = [m.key or m.person.email or m.person.sid for m in roster.members]
    if not ids:
        raise CsvError(f"roster {roster_path}: no student in it")
    return list(dict.fromkeys(ids))


def tokens_main(args) -> int:
    from .store import Store
    data = Path(args.data)
    try:
        store = Store(data)
    except (FileNotFoundError, RuntimeError) as e:
        print(e, file=sys.stderr)
        return 2
    if args.action == "list":
        for row in store.students():
            print(f"{row['id']}\t{'revoked' if row['revoked'] else 'active'}")
        return 0
    if not args.student:
        print(f"tokens {args.action}: which student? (an id of {data / TOKENS_FILE})", file=sys.stderr)
        return 2
    rows = read_tokens(data)
    try:
        if args.action == "revoke":
            store.revoke(args.student)
            token = ""
        else:
            token = store.reissue(args.student)
    except KeyError:
        print(f"no student {args.student!r} in {data}: python -m classroom tokens --data {data} list",
              file=sys.stderr)
        return 2
    rows = [r for r in rows if r[0] != args.student] + [[args.student, token]]
    write_tokens(data, rows)
    if token:
        print(f"{args.student}: new token {token} (also in {data / TOKENS_FILE}); the old one no longer works")
    else:
        print(f"{args.student}: token revoked (reissue gives a new one)")
    return 0


# ----------------------------------------------------------------------------- serve

def _slots(args) -> list[tuple[str, dict]]:
    from ..gpus import visible_gpus
    from ..slots import cpu_slots, gpu_slots
    if args.executor:
        return [(f"cluster{i}", {}) for i in range(args.cluster_jobs)]
    if args.device == "cpu":
        return [(name, dict(env)) for name, env in cpu_slots(args.workers)]
    return [(f"gpu{name}", dict(env)) for name, env in gpu_slots(visible_gpus(args.gpus))]


def serve_main(args) -> int:
    from grader.rubric import DEFAULT_RUBRIC, RubricError, load_rubric, visible_only
    from grader.submission import kernel_files

    from ..gpus import GpuListError
    from ..grade_process import grade_timeout
    from . import app as app_module
    from .dispatch import Dispatcher
    from .store import Quota, Store

    problems = [m for bad, m in ((args.quota < 0, "--quota must be >= 0"),
                                 (args.quota_window <= 0, "--quota-window must be > 0 hours"),
                                 (args.workers < 1, "--workers must be >= 1"),
                                 (args.cluster_jobs < 1, "--cluster-jobs must be >= 1"),
                                 (args.max_upload_kb < 1, "--max-upload-kb must be >= 1"),
                                 (not 0 < args.port < 65536, "--port must be 1..65535")) if bad]
    if args.executor:
        from ..cluster import check_executor, parse_options
        problems += [p for p in [check_executor(args.executor)] if p]
        try:
            slurm_options = parse_options(args.slurm_option)
        except ValueError as e:
            problems.append(str(e))
    else:
        slurm_options = {}
    if args.device == "cuda" and not args.executor:
        import torch
        if not torch.cuda.is_available():
            problems.append("--device cuda (the default): no CUDA GPU here (--device cpu grades in Triton's "
                            "interpreter)")
    close_at = None
    if args.close_at:
        from .admin import UsageError, parse_time
        try:
            close_at = parse_time(args.close_at)
        except UsageError as e:
            problems.append(f"--close-at {e}")
    try:
        rubric_path = str(Path(args.rubric).absolute()) if args.rubric else str(DEFAULT_RUBRIC)
        rubric = load_rubric(rubric_path)
        slots = _slots(args) if not problems else []
        ids = _ids(args.roster)
    except (RubricError, GpuListError, CsvError) as e:
        problems.append(str(e))
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        return 2
    data = Path(args.data).absolute()
    try:
        data.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(data, 0o700)   # tokens, reports: the TA's alone
        store = Store(data, create=True)
    except OSError as e:
        print(f"cannot use {data}: {e.strerror}; user id {os.getuid()} needs write access to it", file=sys.stderr)
        return 2
    if close_at is not None:
        store.set_close_at(close_at)
    fresh = store.add_students(ids)
    if fresh:
        write_tokens(data, read_tokens(data) + [[sid, t] for sid, t in fresh.items()])
    shown = visible_only(rubric) if args.tests == "visible" else rubric
    settings = {"device": args.device, "tests": args.tests, "rubric": rubric_path, "lease_s": args.lease_s,
                "quota": args.quota, "quota_window_h": args.quota_window, "roster": str(Path(args.roster).absolute()),
                "timeout_s": grade_timeout(rubric), "executor": args.executor,
                "slurm_partition": args.slurm_partition, "gpus_per_task": args.gpus_per_task,
                "slurm_options": slurm_options}
    write_atomic(data / "serve.json", json.dumps(settings, indent=2) + "\n", mode=0o600)
    quota = Quota(args.quota, args.quota_window)
    app = app_module.create_app(app_module.Settings(
        data_dir=str(data), device=args.device, workers=len(slots), quota=quota, kernel_files=kernel_files(),
        max_upload=args.max_upload_kb * 1024, tests=args.tests, tasks=tuple(shown.tasks),
        performance_tests=tuple(t.name for t in shown.tests if t.kind == "performance")))
    if args.tests == "all":
        print("runner: WARNING: --tests all: the hidden tests run for students, and their reports show them",
              file=sys.stderr)
    print(f"runner: {len(store.students())} students ({len(fresh)} new: their tokens are in "
          f"{data / TOKENS_FILE}); {len(slots)} worker(s) ({', '.join(n for n, _ in slots)}); quota "
          f"{args.quota or 'none'} per {args.quota_window:g} h; tests: {args.tests}", flush=True)
    store.close()

    import signal

    import uvicorn
    dispatcher = Dispatcher(data, slots)
    # uvicorn stops serving on SIGINT/SIGTERM, then raises the signal again to the handler it found:
    # this one, so that the workers are stopped and their jobs given back before the process ends.
    signal.signal(signal.SIGTERM, _stopped)
    dispatcher.start()
    stopped_by = 0
    try:
        server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="info",
                                               proxy_headers=True, server_header=False))
        server.run()
    except (KeyboardInterrupt, _Stopped) as e:
        stopped_by = int(e.args[0]) if e.args else int(signal.SIGINT)
    finally:
        dispatcher.stop()
        print("runner: stopped; running jobs are queued again for the next start", flush=True)
    return 128 + stopped_by if stopped_by else 0


class _Stopped(Exception):
    """SIGTERM (systemctl stop)."""


def _stopped(signum, frame):
    raise _Stopped(signum)
