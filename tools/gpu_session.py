"""Grade the reference and the tutorial-style kernels on this GPU and record the figures.

    python -m tools.gpu_session OUT_DIR [--pytest EXPR ...]

Writes OUT_DIR/results.json: the device, versions, date, and for each graded
submission its score, wall time and every test's status, points, ratio and
per-call times; plus, for each ``--pytest`` selection, the outcome of every
test it ran. The maintainers keep one such file per GPU and date under
results/ (docs/grading.md's threshold table is made from them by
tools/render_results.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = {"reference": "solutions", "naive": "calibration/naive"}


def _grade(name: str, path: str, out: Path, env: dict | None = None) -> dict:
    report_dir = out / f"grade-{name}"
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", path, "--report-dir", str(report_dir)],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall = time.time() - t0
    (out / f"grade-{name}.log").write_text(proc.stdout[-20000:] + proc.stderr[-20000:])
    report = json.loads((report_dir / "report.json").read_text())
    tests = {t["name"]: {k: t[k] for k in ("kind", "status", "score", "max_score")}
             | {k: t["details"][k] for k in ("ratio", "kernel_ms", "baseline_ms", "calls_per_batch",
                                             "weight_sets", "cuda_graph") if k in t.get("details", {})}
             for t in report["tests"]}
    return {"submission": path, "score": report["score"], "max_score": report["max_score"],
            "sandbox": report.get("versions", {}).get("sandbox"),
            "wall_s": round(wall, 1), "graded_s": report["seconds"], "tests": tests,
            "notes": report.get("notes", [])}


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
    import torch
    import triton

    record = {"date": dt.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "versions": {"torch": torch.__version__, "triton": triton.__version__,
                           "cuda": torch.version.cuda, "python": sys.version.split()[0]},
              "sandbox": subprocess.run([sys.executable, "-c", "from grader.grade import _sandbox_summary;"
                                         "print(_sandbox_summary('cuda'))"], cwd=ROOT,
                                        capture_output=True, text=True).stdout.strip(),
              "grades": {}, "pytest": []}
    if not args.skip_grade:
        for name, path in SUBMISSIONS.items():
            record["grades"][name] = _grade(name, path, out)
            print(name, record["grades"][name]["score"], record["grades"][name]["wall_s"], "s", flush=True)
    if args.sandbox_cost:
        # Alternate the order (none, sandbox, sandbox, none) so that warm-up effects cancel.
        walls = {"none": [], "sandbox": []}
        for i, mode in enumerate(("none", "sandbox", "sandbox", "none")):
            g = _grade(f"reference-{mode}-{i}", SUBMISSIONS["reference"], out,
                       {"GRADER_SANDBOX": "none"} if mode == "none" else {})
            walls[mode].append(g["wall_s"])
            print(mode, g["score"], g["wall_s"], "s", flush=True)
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
