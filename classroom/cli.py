"""Command line: python -m classroom batch DIR | regrade DIR ID | gradebook CLASS_CSV
| merge GRADESCOPE_CSV CLASS_CSV | serve --roster CSV --data DIR | tokens --data DIR ACTION [ID]
| runner --data DIR ACTION (the TA's side of the runner: classroom/runner/admin.py).

One submission is graded by the engine, ``python -m grader grade``.

Exit status of ``batch`` and ``regrade``: 0, or 128 + the signal that stopped
it, or 2 for a usage error (an empty submissions folder included). ``gradebook``
and ``merge``: 0 when every graded student is in the upload file, 1 when some
were left out (listed, with the reason: a score that is not final), 2 for a
usage error. ``serve`` runs until stopped (the course GPU runner, classroom/runner/);
``tokens`` and ``runner``: 0, or 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _batch_args(p: argparse.ArgumentParser, regrade: bool) -> None:
    from .lms.layouts import LAYOUTS
    p.add_argument("submissions", help="folder with one folder or .zip per student")
    if regrade:
        p.add_argument("student", metavar="ID",
                       help="the student to regrade: id from class.csv, the submission's file name, an email "
                            "or a SID")
    p.add_argument("--out", default="batch-reports", help="output folder (default: batch-reports/)")
    p.add_argument("--rubric", default=None)
    p.add_argument("--force", action="store_true",
                   help=argparse.SUPPRESS if regrade else "regrade students that already have a result")
    if not regrade:
        p.add_argument("--student", default=None, metavar="ID",
                       help="regrade only this student (id from class.csv, the submission's file name, an "
                            "email or a SID); the same as the regrade command")
    p.add_argument("--timeout", type=float, default=None, help="wall-clock limit per student, seconds")
    p.add_argument("--layout", default=None, choices=["auto", *LAYOUTS],
                   help="how the folder is laid out (default: detected; a layout given is remembered in OUT)")
    p.add_argument("--roster", default=None, metavar="CSV",
                   help="names, emails and SIDs by id (kept in OUT for later runs); see docs/classroom.md")
    p.add_argument("--gpus", default=None, metavar="LIST",
                   help="grade on several GPUs at once, one student per GPU: 'all' or e.g. 0,1,2,3")
    p.add_argument("--jobs", default="auto", metavar="N",
                   help="students graded at once on the CPU, each in its own grade process and sandbox, "
                        "its threads limited to its share of the cores (default 'auto': the cores this "
                        "machine can spare now)")
    p.add_argument("--seed", type=int, default=None,
                   help="derive each student's seed from this one: the same scores however the class is "
                        "split (serial, --jobs, a cluster)")
    if not regrade:
        from .cluster import EXECUTORS
        p.add_argument("--executor", default=None, choices=EXECUTORS,
                       help="grade on a cluster: the class sharded into a job array through submitit "
                            "(slurm; local: the same path on this machine); see docs/classroom.md")
        p.add_argument("--slurm-partition", default=None, metavar="NAME", help="the partition of the job array")
        p.add_argument("--gpus-per-task", type=int, default=1, metavar="N",
                       help="GPUs of each array task (default 1; 0 for a CPU cluster)")
        p.add_argument("--shards", type=int, default=None, metavar="N",
                       help="array tasks (default: one per 10 students)")
        p.add_argument("--slurm-option", action="append", default=[], metavar="KEY=VALUE",
                       help="an sbatch option for each task, e.g. account=cs101 or qos=normal (repeatable)")


def _gradebook_args(sub) -> None:
    from .lms.gradebook import ALLOWABLE, FORMATS, SCORES
    g = sub.add_parser("gradebook", help="class.csv as a gradebook upload file")
    g.add_argument("class_csv", help="the class.csv of a batch")
    g.add_argument("--score", choices=SCORES, default="total", help="which score to upload (default: total)")
    m = sub.add_parser("merge", help="Gradescope's correctness scores + a GPU batch's performance, one upload "
                                     "file")
    m.add_argument("gradescope_csv", help="Gradescope's Download Grades CSV of the assignment")
    m.add_argument("class_csv", help="the class.csv of the GPU batch")
    for p in (g, m):
        p.add_argument("--format", choices=FORMATS, required=True, help="the platform to upload to")
        p.add_argument("--allow", action="append", default=[], metavar="KIND[,KIND]",
                       help="upload rows whose score is not final, of these kinds: " + ", ".join(
                           f"{k} ({w})" for k, w in ALLOWABLE.items()) + "; they are listed in "
                           "<upload>.accepted.txt")
        p.add_argument("--rubric", default=None,
                       help="the rubric scores must have been made under (default: the batch's, from "
                            "batch.json beside class.csv)")
        p.add_argument("--assignment", default="Triton kernels",
                       help="Canvas: the assignment column, as in Canvas's export: 'Title (assignment id)'")
        p.add_argument("--output", "-o", default=None,
                       help="the upload file (default: beside class.csv, gradebook-<format>.csv or "
                            "merged-<format>.csv)")


def _gradebook(args) -> int:
    from grader.rubric import rubric_hash

    from .lms import gradebook as gb
    from .lms.csvio import CsvError
    if args.rubric and not Path(args.rubric).is_file():
        print(f"--rubric {args.rubric}: no such file", file=sys.stderr)
        return 2
    class_csv = Path(args.class_csv)
    default = f"{'merged' if args.command == 'merge' else 'gradebook'}-{args.format}.csv"
    out = Path(args.output) if args.output else class_csv.parent / default
    try:
        allow = gb.parse_allow(args.allow)
        current = rubric_hash(Path(args.rubric)) if args.rubric else gb.batch_rubric_hash(class_csv)
        rows = gb.read_class_csv(class_csv)
        if args.command == "merge":
            upload = gb.merge(gb.read_gradescope_scores(args.gradescope_csv), rows, args.format, args.assignment,
                              allow, current)
        else:
            upload = gb.gradebook(rows, args.format, args.score, args.assignment, allow, current)
        gb.write_upload(upload, out)
    except (CsvError, gb.AllowError) as e:
        print(e, file=sys.stderr)
        return 2
    except OSError as e:
        print(f"cannot write {out}: {e.strerror}; user id {os.getuid()} needs write access to its folder",
              file=sys.stderr)
        return 2
    for line in gb.report_lines(upload, out):
        print(line)
    return 1 if upload.left_out else 0


def _batch(args) -> int:
    from grader.rubric import DEFAULT_RUBRIC, RubricError, load_rubric

    from .batch import plan_batch, run_batch
    from .slots import spare_cores
    try:
        rubric = load_rubric(args.rubric or DEFAULT_RUBRIC)
    except RubricError as e:
        print(f"rubric error: {e}", file=sys.stderr)
        return 2
    if args.jobs == "auto":
        jobs = spare_cores()
    elif args.jobs.isdigit() and int(args.jobs) >= 1:
        jobs = int(args.jobs)
    else:
        print(f"--jobs {args.jobs}: expected a number >= 1 or auto", file=sys.stderr)
        return 2
    if getattr(args, "executor", None):
        return _cluster(args, rubric, plan_batch)
    return run_batch(args.submissions, args.out, rubric, force=args.force,
                     timeout_s=args.timeout, student=args.student, layout=args.layout, roster=args.roster,
                     gpus=args.gpus, jobs=jobs, seed=args.seed)


def _cluster(args, rubric, plan_batch) -> int:
    from . import cluster
    problem = cluster.check_executor(args.executor)
    if problem is None and args.gpus:
        problem = "--gpus is for one machine; with --executor give --gpus-per-task"
    if problem is None and (args.gpus_per_task < 0 or (args.shards is not None and args.shards < 1)):
        problem = "--gpus-per-task must be >= 0 and --shards >= 1"
    try:
        options = cluster.parse_options(args.slurm_option)
    except ValueError as e:
        problem = problem or str(e)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    plan = plan_batch(args.submissions, args.out, rubric, args.force, args.timeout, args.student, args.layout,
                      args.roster)
    if isinstance(plan, int):
        return plan
    return cluster.run_cluster(plan, rubric, args.executor, args.slurm_partition, args.gpus_per_task,
                               args.shards, int(args.jobs) if args.jobs.isdigit() else 1, args.seed, options)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m classroom", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _batch_args(sub.add_parser("batch", help="grade every submission in a folder, resumable"), regrade=False)
    _batch_args(sub.add_parser("regrade", help="regrade one student of a batch and rebuild the class files"),
                regrade=True)
    _gradebook_args(sub)
    from .runner import serve
    serve.serve_args(sub.add_parser("serve", help="the course GPU runner: students submit, the GPUs grade "
                                                  "(docs/runner.md)"))
    serve.tokens_args(sub.add_parser("tokens", help="list, revoke or reissue a student's runner token"))
    from .runner import admin
    admin.admin_args(sub.add_parser("runner", help="the runner for the TA: jobs, requeue, grant, close, open, "
                                                   "extend, export"))
    args = parser.parse_args(argv)
    if args.command in ("gradebook", "merge"):
        return _gradebook(args)
    if args.command == "serve":
        return serve.serve_main(args)
    if args.command == "tokens":
        return serve.tokens_main(args)
    if args.command == "runner":
        return admin.admin_main(args)
    return _batch(args)
