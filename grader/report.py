"""Write a GradeResult as Markdown, JSON and Gradescope results.json; print a table."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

from tabulate import tabulate

from .scoring import GradeResult

REPORT_FILES = ("report.md", "report.json", "results.json")


def _fmt(x: float) -> str:
    return f"{x:g}"


def _first_line(msg: str, width: int = 90) -> str:
    line = msg.strip().splitlines()[0] if msg.strip() else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def terminal_table(result: GradeResult) -> str:
    rows = [(t.name, t.kind, f"{_fmt(t.score)}/{_fmt(t.max_score)}" + (" (bonus)" if t.bonus else ""),
             t.status, _first_line(t.message)) for t in result.tests]
    table = tabulate(rows, headers=["test", "kind", "points", "status", "detail"], tablefmt="simple")
    lines = [table, ""]
    for task in result.tasks:
        lines.append(f"{task.task:6s} {_fmt(task.score):>6}/{_fmt(task.max_score):<4} {task.summary}")
    lines.append("")
    lines.append(f"TOTAL {_fmt(result.score)}/{_fmt(result.max_score)}"
                 + (f"  (partial: out of {_fmt(result.max_score_all_tests)} with performance)"
                    if result.partial else ""))
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def markdown(result: GradeResult) -> str:
    md = [f"# Grade report: {_fmt(result.score)} / {_fmt(result.max_score)}", ""]
    if result.partial:
        md += [f"> **Partial score.** Only tests that could run here were scored; the full "
               f"assignment is out of {_fmt(result.max_score_all_tests)}.", ""]
    md += [f"- Submission: `{result.submission}`",
           f"- Device: {result.gpu or 'CPU (Triton interpreter)'}; "
           + ", ".join(f"{k} {v}" for k, v in result.versions.items() if v),
           f"- Graded: {result.started} in {result.seconds:g} s",
           f"- Seed: `{result.seed}` (reproduce: `make grade SEED={result.seed}`)", ""]
    md += [f"- {n}" for n in result.notes] + ([""] if result.notes else [])
    md += ["## Tasks", "", "| task | points | summary |", "|---|---|---|"]
    md += [f"| {t.title} | {_fmt(t.score)} / {_fmt(t.max_score)} | {t.summary} |" for t in result.tasks]
    md += ["", "## Tests", "", "| test | points | status | detail |", "|---|---|---|---|"]
    for t in result.tests:
        detail = t.message.replace("|", "\\|").replace("\n", "<br>")
        md.append(f"| `{t.name}`{' (bonus)' if t.bonus else ''} | {_fmt(t.score)} / {_fmt(t.max_score)} "
                  f"| {t.status} | {detail} |")
    for task in result.tasks:
        if task.flags or (task.log_tail.strip() and task.score < task.max_score):
            md += ["", f"### {task.title}", ""]
            md += [f"- **{f}**" for f in task.flags]
            if task.log_tail.strip():
                md += ["", "Last lines your code printed:", "", "```", task.log_tail.strip()[-2000:], "```"]
    return "\n".join(md) + "\n"


def gradescope(result: GradeResult) -> dict:
    """https://gradescope-autograders.readthedocs.io/en/latest/specs/"""
    tests = [{"name": t.name, "score": t.score, "max_score": t.max_score,
              "status": "passed" if t.status == "passed" else "failed",
              "output": (t.message if t.status != "not_run" else f"{t.message} (not scored here)"),
              "visibility": t.visibility} for t in result.tests]
    output = "; ".join(f"{t.task}: {t.summary}" for t in result.tasks)
    if result.partial:
        output = "Partial score: " + " ".join(result.notes) + " " + output
    return {"score": result.score, "max_score": result.max_score_all_tests,
            "output": output, "visibility": "visible", "stdout_visibility": "hidden", "tests": tests}


def write_reports(result: GradeResult, report_dir: str | Path) -> Path:
    """Write the three files atomically: a reader never sees a half-written report."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    contents = {"report.md": markdown(result),
                "report.json": json.dumps(dataclasses.asdict(result), indent=2),
                "results.json": json.dumps(gradescope(result), indent=2)}
    for name, text in contents.items():
        fd, tmp = tempfile.mkstemp(dir=report_dir, prefix=f".{name}.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, report_dir / name)
    return report_dir


def remove_reports(report_dir: str | Path) -> None:
    for name in REPORT_FILES:
        p = Path(report_dir) / name
        if p.is_file() or p.is_symlink():
            p.unlink()
    shutil.rmtree(Path(report_dir) / "tmp", ignore_errors=True)
