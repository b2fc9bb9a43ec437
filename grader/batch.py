"""Grade a whole class: one folder or .zip per student, each in its own process.

Layout of the output folder:

    OUT/students/<id>/report.md, report.json, results.json   one per finished student
    OUT/students/<id>.error.json                             the grader itself failed: retried on resume
    OUT/class.csv, OUT/summary.md                            rebuilt from the finished reports

A student's folder appears (atomic rename) only once all three reports exist,
so an interruption (Ctrl-C, power loss, a crash) leaves finished students
untouched and the next run picks up where it stopped; --force regrades.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate
from tqdm import tqdm

from .rubric import Rubric

CSV_FLAGS = {  # flag column value -> words that mark it in a report's task summaries and flags
    "not_implemented": "not implemented",
    "import_error": "could not be imported",
    "timeout": "time limit exceeded",
    "crashed": "crashed",
    "exited_early": "exited early",
    "no_triton_kernel": "no Triton kernel",
    "library_matmul": "library matmul",
    "forbidden_code": "forbidden code",
    "inputs_modified": "inputs modified",
    "missing_file": "not found in the submission",
    "unreadable": "submission unreadable",
}


def find_entries(folder: Path) -> list[tuple[str, Path]]:
    """(student id, path) for every student folder or .zip, sorted by id."""
    entries = []
    for p in sorted(folder.iterdir()):
        if p.name.startswith(".") or p.name.startswith("__"):
            continue
        if p.is_dir():
            entries.append((p.name, p))
        elif p.suffix.lower() == ".zip" or p.is_file():
            entries.append((p.stem, p))
    return entries


def _grade_one(sid: str, path: Path, students: Path, rubric: Rubric, timeout_s: float) -> str:
    """Grade one student in a child process; return 'ok' or a one-line error."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{sid}-", dir=students))
    cmd = [sys.executable, "-m", "grader", "grade", str(path), "--report-dir", str(tmp),
           "--rubric", rubric.source]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, start_new_session=True,
                              cwd=Path(__file__).resolve().parent.parent)
        complete = all((tmp / n).is_file() for n in ("report.md", "report.json", "results.json"))
        if proc.returncode == 0 and complete:
            final = students / sid
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            return "ok"
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        return f"grader exited with code {proc.returncode}: {err[-1] if err else ''}"
    except subprocess.TimeoutExpired:
        return f"grading took longer than {timeout_s:.0f} s"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _flags(report: dict) -> list[str]:
    text = " ".join([t["summary"] for t in report["tasks"]] + [f for t in report["tasks"] for f in t["flags"]]
                    + report.get("notes", []))
    return [flag for flag, words in CSV_FLAGS.items() if words in text]


def _row(sid: str, report: dict) -> dict:
    row = {"student": sid, "total": report["score"], "max": report["max_score"]}
    for kind in ("correctness", "performance"):
        row[kind] = sum(t["score"] for t in report["tests"] if t["kind"] == kind)
    for task in report["tasks"]:
        row[task["task"]] = task["score"]
    row.update(flags=";".join(_flags(report)), partial=report["partial"], seed=report["seed"],
               device=report["gpu"] or "cpu", graded_at=report["started"])
    return row


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_class_files(out: Path, entries: list[tuple[str, Path]], tasks: list[str]) -> list[dict]:
    """Rebuild class.csv and summary.md from whatever reports exist now."""
    rows = []
    for sid, _ in entries:
        report_path = out / "students" / sid / "report.json"
        error_path = out / "students" / f"{sid}.error.json"
        if report_path.is_file():
            rows.append(_row(sid, json.loads(report_path.read_text())))
        elif error_path.is_file():
            err = json.loads(error_path.read_text())
            rows.append({"student": sid, "total": 0, "flags": "grader_error", "error": err["error"]})
        else:
            rows.append({"student": sid, "flags": "not_graded"})
    fields = ["student", "total", "max", "correctness", "performance", *tasks, "flags", "partial",
              "seed", "device", "graded_at", "error"]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    _write_atomic(out / "class.csv", buf.getvalue())
    _write_atomic(out / "summary.md", summary_table(rows, tasks) + "\n")
    return rows


def summary_table(rows: list[dict], tasks: list[str]) -> str:
    graded = [r for r in rows if "max" in r]
    lines = [f"{len(graded)} of {len(rows)} submissions graded", ""]
    stats = []
    for col in ["total", "correctness", "performance", *tasks]:
        vals = [float(r[col]) for r in graded if col in r]
        if vals:
            stats.append([col, statistics.mean(vals), statistics.median(vals), min(vals), max(vals)])
    lines.append(tabulate(stats, headers=["", "mean", "median", "min", "max"], floatfmt=".1f"))
    if graded:
        top = max(float(r["max"]) for r in graded) or 1
        buckets = [0] * 10
        for r in graded:
            buckets[min(9, int(10 * float(r["total"]) / top))] += 1
        lines += ["", "distribution of totals (% of max):"]
        lines += [f"  {10 * i:3d}-{10 * i + 10:3d}%  {'#' * n} {n}" for i, n in enumerate(buckets)]
    flagged = [(r["student"], r["flags"]) for r in rows if r.get("flags")]
    if flagged:
        lines += ["", "flags:"] + [f"  {sid}: {f}" for sid, f in flagged]
    return "\n".join(lines)


def run_batch(submissions: str, out: str, rubric: Rubric, force: bool = False,
              timeout_s: float | None = None) -> int:
    folder, out = Path(submissions), Path(out)
    if not folder.is_dir():
        print(f"{folder}: not a folder of submissions", file=sys.stderr)
        return 2
    students = out / "students"
    students.mkdir(parents=True, exist_ok=True)
    for stale in students.glob(".*-*"):  # an interrupted run's half-written reports
        shutil.rmtree(stale, ignore_errors=True)
    entries = find_entries(folder)
    tasks = list(rubric.tasks)
    timeout_s = timeout_s or 3 * max(rubric.settings.task_timeout_s, rubric.settings.cpu_task_timeout_s) + 300
    todo = [(sid, p) for sid, p in entries if force or not (students / sid / "report.json").is_file()]
    print(f"{len(entries)} submissions, {len(entries) - len(todo)} already graded, {len(todo)} to grade")
    interrupted = False
    try:
        for sid, path in tqdm(todo, unit="student", dynamic_ncols=True):
            (students / f"{sid}.error.json").unlink(missing_ok=True)
            status = _grade_one(sid, path, students, rubric, timeout_s)
            if status != "ok":
                _write_atomic(students / f"{sid}.error.json",
                              json.dumps({"error": status, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}))
                tqdm.write(f"{sid}: {status}")
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: finished students are kept; run the same command again to resume")
    finally:
        rows = write_class_files(out, entries, tasks)
    print(summary_table(rows, tasks))
    print(f"\nclass CSV: {out / 'class.csv'}; per-student reports: {students}/<id>/")
    return 130 if interrupted else 0
