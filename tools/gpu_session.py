"""Grade the reference and the tutorial-style kernels on this GPU and record the figures.

    python -m tools.gpu_session OUT_DIR [--pytest EXPR ...]

Writes OUT_DIR/results.json: the device, versions, date, and for each graded
submission its score, wall time and every test's status, points, ratio and
per-call times; plus, for each ``--pytest`` selection, the outcome of every
test it ran. The maintainers keep one such file per GPU and date under
results/ (docs/grading.md's threshold table is made from them by
tools/render_results.py). tools/calibrate.py grades through the same
functions and adds a ``calibration`` entry to such a file; ``recorded_grades``
and ``recorded_ratios`` read both kinds of entry.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = {"reference": "solutions", "naive": "calibration/naive"}


def short_gpu_name(gpu: str) -> str:
    """The GPU as results files and docs name it: "H100" for "NVIDIA H100 80GB HBM3"."""
    known = next((k for k in ("H100", "H200", "A100", "L40S", "4090") if k in gpu), None)
    return known or re.sub(r"[^A-Za-z0-9]+", "-", gpu.removeprefix("NVIDIA ")).strip("-") or "gpu"


def session_record() -> dict:
    """The head of a results file: date, GPU, versions and sandbox of this machine."""
    import numpy
    import torch
    import triton

    return {"date": dt.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
            "versions": {"torch": torch.__version__, "triton": triton.__version__, "numpy": numpy.__version__,
                         "cuda": torch.version.cuda, "python": sys.version.split()[0]},
            "sandbox": subprocess.run([sys.executable, "-c", "from grader.grade import _sandbox_summary;"
                                       "print(_sandbox_summary('cuda'))"], cwd=ROOT,
                                      capture_output=True, text=True).stdout.strip()}


def grade_submission(name: str, path: str, out: Path, env: dict | None = None, args: tuple = ()) -> dict:
    """Grade ``path`` with ``python -m grader grade`` (report in OUT/grade-NAME, log in
    OUT/grade-NAME.log) and return what a results file records of it. A grade that
    wrote no report is recorded with ``error`` (the grader's last output) and no tests."""
    report_dir = out / f"grade-{name}"
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", path, "--report-dir", str(report_dir), *args],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall = time.time() - t0
    (out / f"grade-{name}.log").write_text(proc.stdout[-20000:] + proc.stderr[-20000:])
    try:
        report = json.loads((report_dir / "report.json").read_text())
    except (OSError, ValueError):
        last = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
        return {"submission": path, "error": f"grader exited {proc.returncode}: {last}",
                "wall_s": round(wall, 1), "tests": {}}
    tests = {t["name"]: {k: t[k] for k in ("kind", "status", "score", "max_score")}
             | {k: t["details"][k] for k in ("ratio", "kernel_ms", "baseline_ms", "calls_per_batch",
                                             "weight_sets", "cuda_graph") if k in t.get("details", {})}
             for t in report["tests"]}
    return {"submission": path, "score": report["score"], "max_score": report["max_score"],
            "sandbox": report.get("versions", {}).get("sandbox"),
            "wall_s": round(wall, 1), "graded_s": report["seconds"], "tests": tests,
            "notes": report.get("notes", [])}


def recorded_grades(record: dict, who: str) -> list[dict]:
    """Every grade of ``who`` ("reference" or "naive") that a results file holds:
    the session's (``grades``), then the calibration's runs, in order."""
    session = record.get("grades", {}).get(who)
    return ([session] if session else []) + list(record.get("calibration", {}).get("grades", {}).get(who, []))


def recorded_ratios(record: dict, who: str) -> dict[str, list]:
    """{performance test: [ratio of each of ``who``'s grades, None where it was not timed]}."""
    grades = recorded_grades(record, who)
    names = dict.fromkeys(n for g in grades for n, t in g.get("tests", {}).items() if t.get("kind") == "performance")
    return {n: [g.get("tests", {}).get(n, {}).get("ratio") for g in grades] for n in names}


def _pytest(expr: str, out: Path) -> dict:
    report = out / f"pytest-{len(list(out.glob('pytest-*.json')))}.json"
    cmd = [sys.executable, "-m", "pytest", *shlex.split(expr), "-q", "-p", "no:cacheprovider",
           "--json-report", f"--json-report-file={report}"]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    data = json.loads(report.read_text()) if report.exists() else {"tests": []}
    return {"args": expr, "exit_code": proc.returncode, "seconds": round(time.time() - t0, 1),
            "outcomes": {t["nodeid"]: t["outcome"] for t in data.get("tests", [])},
            "tail": proc.stdout[-3000:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--pytest", action="append", default=[], help="a pytest selection to run and record")
    parser.add_argument("--skip-grade", action="store_true")
    parser.add_argument("--sandbox-cost", action="store_true",
                        help="grade the reference twice with and twice without the sandbox "
                             "(GRADER_SANDBOX=none) and record what the sandbox adds to the wall time")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = session_record() | {"grades": {}, "pytest": []}
    if not args.skip_grade:
        for name, path in SUBMISSIONS.items():
            record["grades"][name] = grade_submission(name, path, out)
            print(name, record["grades"][name].get("score", record["grades"][name].get("error")),
                  record["grades"][name]["wall_s"], "s", flush=True)
    if args.sandbox_cost:
        # Alternate the order (none, sandbox, sandbox, none) so that warm-up effects cancel.
        walls = {"none": [], "sandbox": []}
        for i, mode in enumerate(("none", "sandbox", "sandbox", "none")):
            g = grade_submission(f"reference-{mode}-{i}", SUBMISSIONS["reference"], out,
                                 {"GRADER_SANDBOX": "none"} if mode == "none" else {})
            walls[mode].append(g["wall_s"])
            print(mode, g.get("score", g.get("error")), g["wall_s"], "s", flush=True)
        record["sandbox_cost"] = {"sandboxed_s": walls["sandbox"], "no_sandbox_s": walls["none"],
                                  "extra_percent": round(100 * (sum(walls["sandbox"]) / sum(walls["none"]) - 1), 1)}
        print("sandbox cost", record["sandbox_cost"], flush=True)
    for expr in args.pytest:
        record["pytest"].append(_pytest(expr, out))
        print("pytest", expr, record["pytest"][-1]["exit_code"], flush=True)
    (out / "results.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
