"""Render the threshold table of docs/grading.md from the results files.

    python -m tools.render_results          rewrite the table in docs/grading.md
    python -m tools.render_results --check  exit 1 if the table is out of date

Each results/<date>-<gpu>.json is what tools/gpu_session.py recorded on one
GPU: the reference's and the tutorial-style kernels' ratio per performance
test. The table puts them next to the rubric's thresholds, so a reader sees
the margin each threshold leaves.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "grading.md"
BEGIN, END = "<!-- thresholds:begin (tools/render_results.py) -->", "<!-- thresholds:end -->"


def _short(gpu: str) -> str:
    return next((k for k in ("H100", "H200", "A100", "L40S", "4090") if k in gpu), gpu)


def table() -> str:
    from grader.rubric import load_rubric

    runs = [json.loads(p.read_text()) for p in sorted((ROOT / "results").glob("*.json"))]
    rubric = load_rubric()
    heads = [f"{_short(r['gpu'])} {r['date']}" for r in runs]
    lines = ["| test | full | zero | reference " + " / ".join(heads) + " | tutorial-style "
             + " / ".join(heads) + " |", "|---|---|---|---|---|"]
    for t in rubric.tests:
        if t.kind != "performance":
            continue

        def ratio(run, who):
            v = run.get("grades", {}).get(who, {}).get("tests", {}).get(t.name, {}).get("ratio")
            return "-" if v is None else f"{v:.2f}"

        lines.append(f"| {t.name} | {t.full_ratio:g} | {t.zero_ratio:g} | "
                     + " / ".join(ratio(r, "reference") for r in runs) + " | "
                     + " / ".join(ratio(r, "naive") for r in runs) + " |")
    scores = "; ".join(f"{h}: reference {r['grades']['reference']['score']:g}, tutorial-style "
                       f"{r['grades']['naive']['score']:g}, reference graded in {r['grades']['reference']['wall_s']:g} s"
                       for h, r in zip(heads, runs) if "reference" in r.get("grades", {}))
    return "\n".join(lines) + f"\n\nScores when recorded (under the thresholds of that run): {scores}.\n"


def render(text: str) -> str:
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}{END}{tail}"


if __name__ == "__main__":
    current = DOC.read_text()
    new = render(current)
    if "--check" in sys.argv:
        sys.exit(0 if new == current else 1)
    DOC.write_text(new)
