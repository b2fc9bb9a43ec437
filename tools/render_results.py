"""Render the tables of docs/grading.md and docs/performance.md from the results files.

    python -m tools.render_results          rewrite the tables
    python -m tools.render_results --check  exit 1 if a table is out of date

Each results/<date>-<gpu>.json holds what was measured on one GPU that day:
``grades`` (tools/gpu_session.py: the reference's and the tutorial-style
kernels' ratio per performance test), which docs/grading.md puts next to the
rubric's thresholds; and ``bench``, a list of `make bench` runs
(bench/bench.py's --json), which docs/performance.md shows as tables, with
how far later runs stray from the first.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "grading.md"
BEGIN, END = "<!-- thresholds:begin (tools/render_results.py) -->", "<!-- thresholds:end -->"
PERF_DOC = ROOT / "docs" / "performance.md"
PERF_BEGIN, PERF_END = "<!-- bench:begin (tools/render_results.py) -->", "<!-- bench:end -->"


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


def _drift(first: list[dict], later: list[dict]) -> str:
    """How far a later run's kernel times are from the first's, in one sentence."""
    base = {(r["task"], r["M"], r["N"], r["K"], r.get("density")): r["times_ms"]["kernel"] for r in first}
    rel = [abs(r["times_ms"]["kernel"] / base[k] - 1) for r in later
           if (k := (r["task"], r["M"], r["N"], r["K"], r.get("density"))) in base]
    if not rel:
        return "no shape in common with the first run"
    return (f"{sum(x <= 0.03 for x in rel)} of {len(rel)} kernel times within 3 % of the table, "
            f"{sum(x <= 0.10 for x in rel)} within 10 %, largest difference {max(rel):.0%}")


def bench_tables() -> str:
    from bench.bench import table as bench_table

    out = []
    for p in sorted((ROOT / "results").glob("*.json")):
        run = json.loads(p.read_text())
        benches = run.get("bench") or []
        if not benches:
            continue
        first = benches[0]
        out += [f"### {first['gpu']}, {run['date']}", "",
                f"torch {first['torch']}, triton {first['triton']}; copy {first['copy_gbs']:.0f} GB/s, "
                f"fp16 `torch.matmul` {first['peaks']['fp16']:.0f} TFLOP/s, int8 `torch._int_mm` "
                f"{first['peaks']['int8']:.0f} TOP/s (`{p.relative_to(ROOT)}`, {first.get('label', 'run 1')}).",
                "", "```", bench_table(first["results"]), "```", ""]
        for later in benches[1:]:
            out += [f"{later.get('label', 'A later run')} (same file): {_drift(first['results'], later['results'])}.",
                    ""]
    return "\n".join(out)


def _between(text: str, begin: str, end: str, body: str) -> str:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


def render(text: str) -> str:
    return _between(text, BEGIN, END, table())


def render_performance(text: str) -> str:
    return _between(text, PERF_BEGIN, PERF_END, bench_tables())


if __name__ == "__main__":
    stale = []
    for doc, fn in ((DOC, render), (PERF_DOC, render_performance)):
        current = doc.read_text()
        new = fn(current)
        if new != current:
            stale.append(doc)
            if "--check" not in sys.argv:
                doc.write_text(new)
    if "--check" in sys.argv and stale:
        print("out of date:", ", ".join(str(d.relative_to(ROOT)) for d in stale))
        sys.exit(1)
