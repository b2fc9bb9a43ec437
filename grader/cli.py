"""Command line: python -m grader [grade] [SUBMISSION] [options] | python -m grader batch DIR
| python -m grader gradebook CLASS_CSV | python -m grader merge GRADESCOPE_CSV CLASS_CSV.

Exit status of ``grade``: 0 when a report was written, whatever the
submission did (a bad submission is a score, not an error); 1 when the grader
itself failed (a grader-error report is still written); 2 for a usage error
(no such submission, unknown task, bad rubric, unwritable report folder), with
one line on stderr and no report. ``batch``: 0, or 128 + the signal that
stopped it, or 2 for a usage error. ``gradebook`` and ``merge``: 0 when every
graded student is in the upload file, 1 when some were left out (listed), 2
for a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _grade_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("submission", nargs="?", default=str(ROOT / "assignment"),
                   help="folder or .zip holding the kernel files (default: assignment/)")
    p.add_argument("--report-dir", default="grade-report", help="where the reports go (default: grade-report/)")
    p.add_argument("--rubric", default=None, help="rubric TOML (default: grader/rubric.toml)")
    p.add_argument("--seed", type=int, default=None, help="reuse a seed to reproduce a run")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None,
                   help="force a device (default: cuda when available)")
    p.add_argument("--tasks", default=None, help="comma-separated subset of the rubric's tasks")
    p.add_argument("--sanitize", action="store_true",
                   help="GPU: run the correctness cases under compute-sanitizer memcheck (TA option; slow, "
                        "performance is not timed)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="time limit of the whole run, seconds; each task gets a share (Gradescope)")
    p.add_argument("--die-with-parent", type=int, default=None, metavar="PID", help=argparse.SUPPRESS)


def _die_with_parent(ppid: int) -> None:
    """Linux: have the kernel kill this process when its parent (the batch,
    process ``ppid``) dies, even by SIGKILL; exit at once if it already has."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != ppid:
        os._exit(1)


def _gradebook_args(sub) -> None:
    from .lms.gradebook import FORMATS, SCORES
    g = sub.add_parser("gradebook", help="class.csv as a gradebook upload file (TA)")
    g.add_argument("class_csv", help="the class.csv of a batch")
    g.add_argument("--score", choices=SCORES, default="total", help="which score to upload (default: total)")
    m = sub.add_parser("merge", help="Gradescope's correctness scores + a GPU batch's performance, one upload "
                                     "file (TA)")
    m.add_argument("gradescope_csv", help="Gradescope's Download Grades CSV of the assignment")
    m.add_argument("class_csv", help="the class.csv of the GPU batch")
    for p in (g, m):
        p.add_argument("--format", choices=FORMATS, required=True, help="the platform to upload to")
        p.add_argument("--assignment", default="Triton kernels",
                       help="Canvas: the assignment column, as in Canvas's export: 'Title (assignment id)'")
        p.add_argument("--output", "-o", default=None,
                       help="the upload file (default: beside class.csv, gradebook-<format>.csv or "
                            "merged-<format>.csv)")


def _gradebook(args) -> int:
    from .lms import gradebook as gb
    from .lms.csvio import CsvError
    class_csv = Path(args.class_csv)
    default = f"{'merged' if args.command == 'merge' else 'gradebook'}-{args.format}.csv"
    out = Path(args.output) if args.output else class_csv.parent / default
    try:
        rows = gb.read_class_csv(class_csv)
        if args.command == "merge":
            upload = gb.merge(gb.read_gradescope_scores(args.gradescope_csv), rows, args.format, args.assignment)
        else:
            upload = gb.gradebook(rows, args.format, args.score, args.assignment)
        gb.write_upload(upload, out)
    except CsvError as e:
        print(e, file=sys.stderr)
        return 2
    except OSError as e:
        print(f"cannot write {out}: {e.strerror}; user id {os.getuid()} needs write access to its folder",
              file=sys.stderr)
        return 2
    for line in gb.report_lines(upload, out):
        print(line)
    return 1 if upload.left_out else 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    _grade_args(sub.add_parser("grade", help="grade one submission (the default command)"))
    b = sub.add_parser("batch", help="grade every submission in a folder (TA)")
    b.add_argument("submissions", help="folder with one folder or .zip per student")
    b.add_argument("--out", default="batch-reports", help="output folder (default: batch-reports/)")
    b.add_argument("--rubric", default=None)
    b.add_argument("--force", action="store_true", help="regrade students that already have a result")
    b.add_argument("--timeout", type=float, default=None, help="wall-clock limit per student, seconds")
    b.add_argument("--student", default=None, metavar="ID",
                   help="regrade only this student (id from class.csv, the submission's file name, an email "
                        "or a SID)")
    from .lms.layouts import LAYOUTS
    b.add_argument("--layout", default=None, choices=["auto", *LAYOUTS],
                   help="how the folder is laid out (default: detected; a layout given is remembered in OUT)")
    b.add_argument("--roster", default=None, metavar="CSV",
                   help="names, emails and SIDs by id (kept in OUT for later runs); see README")
    b.add_argument("--gpus", default=None, metavar="LIST",
                   help="grade on several GPUs at once, one student per GPU: 'all' or e.g. 0,1,2,3")
    _gradebook_args(sub)
    if not argv or argv[0] not in ("grade", "batch", "gradebook", "merge", "-h", "--help"):
        argv.insert(0, "grade")
    args = parser.parse_args(argv)
    if args.command in ("gradebook", "merge"):
        return _gradebook(args)
    if getattr(args, "die_with_parent", None) and sys.platform.startswith("linux"):
        _die_with_parent(args.die_with_parent)

    from .report import escape_name
    from .rubric import DEFAULT_RUBRIC, RubricError, load_rubric
    if args.command != "batch" and not os.path.exists(args.submission):
        print(f"no such submission: {escape_name(args.submission)}", file=sys.stderr)
        return 2
    try:
        rubric = load_rubric(args.rubric or DEFAULT_RUBRIC)
    except RubricError as e:
        print(f"rubric error: {e}", file=sys.stderr)
        return 2
    if args.command == "batch":
        from .batch import run_batch
        return run_batch(args.submissions, args.out, rubric, force=args.force, timeout_s=args.timeout,
                         student=args.student, layout=args.layout, roster=args.roster, gpus=args.gpus)

    from .grade import grade
    from .report import remove_reports, terminal_table, write_reports
    tasks = args.tasks.split(",") if args.tasks else None
    unknown = set(tasks or []) - set(rubric.tasks)
    if unknown:
        print(f"unknown task(s) {sorted(unknown)}; expected some of {sorted(rubric.tasks)}", file=sys.stderr)
        return 2
    try:
        remove_reports(args.report_dir)  # a stale report must never pass for this run's
        Path(args.report_dir).mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=args.report_dir, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        print(f"cannot write reports to {escape_name(args.report_dir)}: {e.strerror}; user id {os.getuid()} "
              "needs write access to it", file=sys.stderr)
        return 2
    try:
        result = grade(args.submission, rubric, seed=args.seed, device=args.device, tasks=tasks,
                       sanitize=args.sanitize, budget_s=args.budget_s)
    except Exception as e:  # the grader's own failure: still a report, with the reason
        import traceback

        from .report import error_result, one_line
        traceback.print_exc()
        reason = one_line(f"{type(e).__name__}: {e}", 500)
        write_reports(error_result(rubric, args.submission, reason, tasks), args.report_dir, error=reason)
        print(f"grader error: {reason}", file=sys.stderr)
        return 1
    out = write_reports(result, args.report_dir)
    print()
    print(terminal_table(result))
    print(f"\nreports: {out}/report.md, report.json, results.json (Gradescope)")
    return 0
