"""The class view a TA acts on: OUT/summary.md, summary.html beside it, and
the distribution of totals as summary.png (where matplotlib is installed).

Rebuilt from the reports with class.csv (reports.write_class_files). It says
how many submissions were graded; the score statistics; what did not run
here (performance without a GPU: totals are then out of the correctness
points, and the performance column says "not run" instead of averaging
zeros); the distribution of totals; per test, the fraction of the graded
class that did not pass it and the most common likely cause; who was
regraded, with the previous and the current score (history.py); flags,
grader errors and reports made under another rubric.

Test messages can hold a student's text (an exception message): every cell
is cleaned and escaped for its format, as in the reports.
"""

from __future__ import annotations

import html
import statistics
from collections import Counter
from pathlib import Path

from tabulate import tabulate

from grader.report import md_inline, one_line

from .lms.csvio import write_atomic

PLOT = "summary.png"


def _fmt(x) -> str:
    return f"{float(x):g}"


def other_rubric_line(rows: list[dict], current_hash: str) -> str:
    """One line naming the students whose report was made under another rubric ('' if none)."""
    if not current_hash:
        return ""
    old = [r["id"] for r in rows if r.get("rubric_hash") and r["rubric_hash"] != current_hash]
    if not old:
        return ""
    names = ", ".join(old[:20]) + (", ..." if len(old) > 20 else "")
    return (f"{len(old)} report{'s were' if len(old) != 1 else ' was'} made under an older rubric: {names}; "
            "regrade them with --force or make regrade STUDENT=id")


def _graded(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("_graded")]


def not_run(rows: list[dict]) -> list[str]:
    """What did not run for the graded students, kind by kind, and what that does to the totals."""
    graded = _graded(rows)
    lines = []
    for kind in ("correctness", "performance"):
        tests = {t["name"] for r in graded for t in r.get("_tests", ()) if t["kind"] == kind and t["name"]}
        skipped = [r for r in graded if any(t["kind"] == kind and t["status"] == "not_run"
                                            for t in r.get("_tests", ()))]
        if not skipped:
            continue
        why = "needs a CUDA GPU: graded without one" if kind == "performance" else \
            "no CPU shape in the rubric: graded without a GPU"
        lines.append(f"{kind}: some of its {len(tests)} tests did not run for {len(skipped)} of {len(graded)} "
                     f"graded students ({why})")
    partial = [r for r in graded if r.get("partial") is True]
    if partial:
        maxes = sorted({_fmt(r["max"]) for r in partial})
        lines.append(f"{len(partial)} total{'s are' if len(partial) != 1 else ' is'} partial, out of "
                     f"{' or '.join(maxes)}: uploads leave them out unless --allow cpu-partial")
    return lines


def _performance_ran(rows: list[dict]) -> bool:
    return any(t["kind"] == "performance" and t["status"] != "not_run"
               for r in _graded(rows) for t in r.get("_tests", ()))


def stats_table(rows: list[dict], tasks: list[str]) -> list[list]:
    graded = _graded(rows)
    stats = []
    for col in ["total", "correctness", "bonus", "performance", *tasks]:
        vals = [float(r[col]) for r in graded if col in r]
        if col == "performance" and vals and not _performance_ran(rows):
            stats.append([col, "not run (no GPU)", "", "", ""])
        elif vals:
            stats.append([col, f"{statistics.mean(vals):.1f}", f"{statistics.median(vals):.1f}",
                          f"{min(vals):.1f}", f"{max(vals):.1f}"])
    return stats


def histogram(rows: list[dict]) -> list[int]:
    """Graded students per tenth of the maximum (the last bucket holds 100 %)."""
    graded = _graded(rows)
    top = max((float(r["max"]) for r in graded), default=0) or 1
    buckets = [0] * 10
    for r in graded:
        buckets[max(0, min(9, int(10 * float(r["total"]) / top)))] += 1
    return buckets


def test_failures(rows: list[dict]) -> list[list]:
    """Per test that ran for someone: [test, kind, not passed / ran, most common cause (students)],
    the tests failed most first."""
    ran: Counter = Counter()
    failed: Counter = Counter()
    causes: dict[str, Counter] = {}
    kinds = {}
    for r in _graded(rows):
        for t in r.get("_tests", ()):
            if not t["name"] or t["status"] in ("", "not_run"):
                continue
            kinds[t["name"]] = t["kind"] + (" (bonus)" if t["bonus"] else "")
            ran[t["name"]] += 1
            if t["status"] != "passed":
                failed[t["name"]] += 1
                causes.setdefault(t["name"], Counter())[t["cause"] or "(no message)"] += 1
    table = []
    for name in sorted(ran, key=lambda n: (-failed[n] / ran[n], n)):
        cause = ""
        if failed[name]:
            text, n = causes[name].most_common(1)[0]
            cause = f"{text} ({n})"
        table.append([name, kinds[name], f"{failed[name]}/{ran[name]} ({100 * failed[name] / ran[name]:.0f}%)",
                      cause])
    return table


def regraded(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        prev = r.get("_previous")
        if not prev:
            continue
        old = "grader error" if prev.get("score") is None else f"{_fmt(prev['score'])}/{_fmt(prev['max'])}"
        new = "grader error" if r.get("error") else f"{_fmt(r['total'])}/{_fmt(r['max'] or 0)}"
        when = f" (previous report of {prev['graded_at']})" if prev.get("graded_at") else ""
        out.append(f"{r['id']}: {old} -> {new}{when}")
    return out


def summary_table(rows: list[dict], tasks: list[str], current_hash: str = "", plot: str | None = None) -> str:
    """summary.md's text (also printed at the end of a batch)."""
    graded = _graded(rows)
    submissions = [r for r in rows if "no_submission" not in r.get("flags", "")]
    lines = [f"{len(graded)} of {len(submissions)} submissions graded", ""]
    lines.append(tabulate(stats_table(rows, tasks), headers=["", "mean", "median", "min", "max"]))
    skipped = not_run(rows)
    if skipped:
        lines += ["", "not run:"] + [f"  {line}" for line in skipped]
    if graded:
        top = max(float(r["max"]) for r in graded)
        lines += ["", f"distribution of totals (% of the maximum, {_fmt(top)}):"]
        lines += [f"  {10 * i:3d}-{10 * i + 10:3d}%  {'#' * n} {n}" for i, n in enumerate(histogram(rows))]
        if plot:
            lines.append(f"  (plot: {plot})")
    failures = test_failures(rows)
    if failures:
        lines += ["", "tests, the most failed first (not passed / ran; most common likely cause, students):", ""]
        lines.append(tabulate([[md_inline(c, 220) for c in row] for row in failures],
                              headers=["test", "kind", "not passed", "most common cause"], tablefmt="github"))
    again = regraded(rows)
    if again:
        lines += ["", "regraded (previous -> current; earlier reports in history/<id>/):"]
        lines += [f"  {line}" for line in again]
    flagged = [(r["id"] or r["email"] or r["sid"], r["flags"]) for r in rows if r.get("flags")]
    if flagged:
        lines += ["", "flags:"] + [f"  {sid}: {f}" for sid, f in flagged]
    errors = [(r["id"], r["error"]) for r in rows if r.get("error")]
    if errors:
        lines += ["", "grader errors (retried on the next run):"]
        lines += [f"  {sid}: {one_line(e, 200)}" for sid, e in errors]
    stale = other_rubric_line(rows, current_hash)
    if stale:
        lines += ["", stale]
    return "\n".join(lines)


def plot_distribution(rows: list[dict], path: Path) -> bool:
    """The histogram of totals as a PNG; False (nothing written) without matplotlib or graded students."""
    graded = _graded(rows)
    if not graded:
        return False
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return False
    top = max(float(r["max"]) for r in graded) or 1
    fig = Figure(figsize=(6, 3.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.bar([10 * i + 5 for i in range(10)], histogram(rows), width=9, color="#4c72b0")
    ax.set_xlim(0, 100)
    ax.set_xticks(range(0, 101, 10))
    ax.set_xlabel(f"total, % of the maximum ({_fmt(top)} points)")
    ax.set_ylabel("students")
    partial = " (partial: performance not run)" if any(r.get("partial") is True for r in graded) else ""
    ax.set_title(f"{len(graded)} graded submissions{partial}", fontsize=10)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    tmp.chmod(0o640)
    tmp.replace(path)
    return True


def html_page(rows: list[dict], tasks: list[str], current_hash: str, plot: str | None) -> str:
    """summary.html: the same content as summary.md, as a page (tables, the plot)."""
    graded = _graded(rows)
    submissions = [r for r in rows if "no_submission" not in r.get("flags", "")]
    esc = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8"><title>Class summary</title>',
             "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:"
             "collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}</style></head><body>",
             f"<h1>Class summary</h1><p>{len(graded)} of {len(submissions)} submissions graded</p>"]
    parts.append(tabulate(stats_table(rows, tasks), headers=["", "mean", "median", "min", "max"], tablefmt="html"))
    skipped = not_run(rows)
    if skipped:
        parts.append("<h2>Not run</h2><ul>" + "".join(f"<li>{esc(s)}</li>" for s in skipped) + "</ul>")
    if plot:
        parts.append(f'<h2>Distribution of totals</h2><img src="{esc(plot)}" alt="histogram of totals">')
    failures = test_failures(rows)
    if failures:
        parts.append("<h2>Tests, the most failed first</h2>")
        parts.append(tabulate([[one_line(c, 220) for c in row] for row in failures],
                              headers=["test", "kind", "not passed", "most common cause (students)"],
                              tablefmt="html"))
    for title, items in (("Regraded (previous -> current)", regraded(rows)),
                         ("Flags", [f"{r['id'] or r['email'] or r['sid']}: {r['flags']}" for r in rows
                                    if r.get("flags")]),
                         ("Grader errors (retried on the next run)",
                          [f"{r['id']}: {one_line(r['error'], 200)}" for r in rows if r.get("error")])):
        if items:
            parts.append(f"<h2>{esc(title)}</h2><ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>")
    stale = other_rubric_line(rows, current_hash)
    if stale:
        parts.append(f"<p>{esc(stale)}</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_summary(out: Path, rows: list[dict], tasks: list[str], current_hash: str = "") -> None:
    plot = PLOT if plot_distribution(rows, out / PLOT) else None
    if plot is None and (out / PLOT).exists():
        (out / PLOT).unlink()
    write_atomic(out / "summary.md", summary_table(rows, tasks, current_hash, plot) + "\n")
    write_atomic(out / "summary.html", html_page(rows, tasks, current_hash, plot))
