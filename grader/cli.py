"""Command line: python -m grader [grade] [SUBMISSION] [options].

The engine grades one submission; a whole class is the classroom's
(``python -m classroom batch|regrade|gradebook|merge``).

Exit status: 0 when a report was written, whatever the submission did (a bad
submission is a score, not an error); 1 when the grader itself failed (a
grader-error report is still written); 2 for a usage error (no such
submission, unknown task, bad rubric, unwritable report folder), with one line
on stderr and no report.
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
    p.add_argument("--tests", choices=["all", "visible"], default="all",
                   help="visible: leave the rubric's hidden tests out; they are never run and the report "
                        "names none of them (their points are counted as hidden, as in the student bundle)")
    p.add_argument("--sanitize", action="store_true",
                   help="GPU: run the correctness cases under compute-sanitizer memcheck (TA option; slow, "
                        "performance is not timed)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="time limit of the whole run, seconds; each task gets a share (Gradescope)")
    p.add_argument("--runs-out", default=None, metavar="FILE",
                   help="TA option: also save what the run brought back (the hidden tests' facts included: "
                        "keep it from students); `pytest grader/tests --runs FILE -k w8a8` judges it again")


CLASSROOM_COMMANDS = ("batch", "regrade", "gradebook", "merge")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in CLASSROOM_COMMANDS:
        print(f"{argv[0]} is a classroom command: python -m classroom {argv[0]} ...", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    _grade_args(sub.add_parser("grade", help="grade one submission (the default command)"))
    if not argv or argv[0] not in ("grade", "-h", "--help"):
        argv.insert(0, "grade")
    args = parser.parse_args(argv)

    from .rubric import DEFAULT_RUBRIC, RubricError, load_rubric, visible_only
    from .submission import escape_name
    if not os.path.exists(args.submission):
        print(f"no such submission: {escape_name(args.submission)}", file=sys.stderr)
        return 2
    # Before anything imports triton: a CPU run gets the grading Triton (grader/toolchain.py).
    import torch

    from . import toolchain
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    toolchain.activate(device)
    try:
        rubric = load_rubric(args.rubric or DEFAULT_RUBRIC)
    except RubricError as e:
        print(f"rubric error: {e}", file=sys.stderr)
        return 2
    if args.tests == "visible":
        rubric = visible_only(rubric)

    from .grade import grade, toolchain_warnings
    from .report import DIR_MODE, one_line, remove_reports, terminal_table, write_reports
    for line in toolchain_warnings(device, rubric):   # the first lines a student reads, as in every report
        print(f"toolchain: {one_line(line, 1000)}", flush=True)
    tasks = args.tasks.split(",") if args.tasks else None
    unknown = set(tasks or []) - set(rubric.tasks)
    if unknown:
        print(f"unknown task(s) {sorted(unknown)}; expected some of {sorted(rubric.tasks)}", file=sys.stderr)
        return 2
    try:
        remove_reports(args.report_dir)  # a stale report must never pass for this run's
        Path(args.report_dir).mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        fd, probe = tempfile.mkstemp(dir=args.report_dir, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        print(f"cannot write reports to {escape_name(args.report_dir)}: {e.strerror}; user id {os.getuid()} "
              "needs write access to it", file=sys.stderr)
        return 2
    try:
        result = grade(args.submission, rubric, seed=args.seed, device=device, tasks=tasks,
                       sanitize=args.sanitize, budget_s=args.budget_s, runs_out=args.runs_out)
    except Exception as e:  # the grader's own failure: still a report, with the reason
        import traceback

        from .report import error_result
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
