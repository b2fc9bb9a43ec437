"""Grade the reference and the tutorial-style kernels on this GPU and record the figures.

    python -m tools.gpu_session OUT_DIR [--skip-grade] [--bench] [--calibrate [--candidates]]
                                        [--pytest EXPR ...] [--budget-s S]

Writes OUT_DIR/results.json: the device, versions, date, and for each graded
submission its score, wall time and every test's status, points, ratio and
per-call times; plus, for each ``--pytest`` selection, the outcome of every
test it ran. ``--bench`` adds `make bench` (its ``bench`` entry, also
OUT_DIR/bench.json); ``--calibrate`` runs `make calibrate` once per kernel
set (the ``calibration`` entry, OUT_DIR/calibrated-rubric.toml;
``--candidates``: with the rubric's ``# candidate:`` tests in). With a bench
and a graded reference, ``clock_check`` compares the grade's ratio of each
performance test with the bench's ratio for the same case (the two clocks
must agree within 10 %). The stages run in that order (grades, bench,
calibration, pytest); ``--budget-s`` bounds the whole session, each stage
getting what is left less a reserve for the stages after it, and every stage
writes what it has when it is stopped. The maintainers keep one such file per GPU and date under
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
SUBMISSIONS = {"reference": "solutions", "naive": "calibration/naive", "draft": "calibration/stub_plan"}
# What a timed call of grader/harness/measure.py includes, recorded in every results file as
# "clock". A file without it timed each call together with a copy of its output into the
# harness's arena, on both sides (kernel_only_ms takes that copy off its times); one with
# CALLS_ONLY timed the calls alone, but each worker batch with its fixed cost (a command, a
# graph launch, the GPU switching from the harness's process to the worker's: 0.6-0.9 ms a
# batch on an H100), which the clock now measures with the worker's probe and takes off.
CLOCK = "calls only, fixed cost off"
CALLS_ONLY = "calls only"


def short_gpu_name(gpu: str) -> str:
    """The GPU as results files and docs name it: "H100" for "NVIDIA H100 80GB HBM3"."""
    known = next((k for k in ("H100", "H200", "A100", "L40S", "4090") if k in gpu), None)
    return known or re.sub(r"[^A-Za-z0-9]+", "-", gpu.removeprefix("NVIDIA ")).strip("-") or "gpu"


def session_record() -> dict:
    """The head of a results file: date, GPU, versions and sandbox of this machine."""
    import numpy
    import torch
    import triton

    return {"date": dt.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "clock": CLOCK,
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
             | {k: t["details"][k] for k in ("ratio", "kernel_ms", "baseline_ms", "fixed_ms", "calls_per_batch",
                                             "weight_sets", "cuda_graph") if k in t.get("details", {})}
             | ({"message": str(t.get("message", ""))[:1500]} if t["status"] not in ("passed", "skipped") else {})
             for t in report["tests"]}
    return {"submission": path, "score": report["score"], "max_score": report["max_score"],
            "sandbox": report.get("versions", {}).get("sandbox"),
            "wall_s": round(wall, 1), "graded_s": report["seconds"], "tests": tests,
            "notes": report.get("notes", [])}


def kernel_only_ms(ms: float, shape, record: dict, copy_gbs: float) -> float:
    """A time from a results file (``record``) as the grader's clock now measures it: a
    file recorded before the clock timed the calls alone (no ``"clock"``) has the
    modelled copy of the output (grader.estimate.output_copy_ms) taken off; one of
    CALLS_ONLY is kept as it is (its batch's fixed cost was not recorded: at most
    0.9 ms over at least 5 ms of calls)."""
    from grader.estimate import output_copy_ms

    if record.get("clock") in (CLOCK, CALLS_ONLY):
        return ms
    return max(ms - output_copy_ms(shape, copy_gbs), ms / 2)   # the copy was at most a third of any call


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


def _pytest(expr: str, out: Path, timeout: float = 24 * 3600.0) -> dict:
    n = len(list(out.glob("pytest-*.json")))
    report, log = out / f"pytest-{n}.json", out / f"pytest-{n}.log"
    cmd = [sys.executable, "-m", "pytest", *shlex.split(expr), "-q", "-rfE", "-p", "no:cacheprovider",
           "--json-report", f"--json-report-file={report}"]
    rc, seconds = _run(cmd, log, timeout)
    data = json.loads(report.read_text()) if report.exists() else {"tests": []}
    return {"args": expr, "exit_code": rc, "seconds": seconds, "summary": data.get("summary", {}),
            "outcomes": {t["nodeid"]: t["outcome"] for t in data.get("tests", [])},
            "tail": log.read_text()[-3000:]}


# Seconds the stages after a stage keep for themselves (--budget-s): calibrate's two grades, pytest.
RESERVE_S = {"bench": 330, "calibrate": 150, "pytest": 0}


def candidate_rubric(out: Path) -> Path:
    """A copy of grader/rubric.toml with its ``# candidate: `` lines uncommented (the
    tests a TA may adopt), for calibrating them next to the graded ones."""
    text = (ROOT / "grader" / "rubric.toml").read_text()
    path = out / "rubric-candidates.toml"
    path.write_text(re.sub(r"(?m)^# candidate: ", "", text))
    return path


def _run(cmd: list[str], log: Path, timeout: float) -> tuple[int | str, float]:
    """Run ``cmd`` from the repository, output to ``log``; (exit code or "timeout", seconds)."""
    from grader.harness import proc  # the one supervisor: the command and whatever it started end with it

    t0 = time.time()
    with log.open("w") as f:
        p = proc.start(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                       deadline_s=max(1.0, timeout))
    try:
        rc = p.wait()
    finally:
        p.kill()
    return ("timeout" if p.timed_out else rc), round(time.time() - t0, 1)


def run_bench(out: Path, timeout: float) -> dict:
    """`make bench` (python -m bench.bench), cut at ``timeout``; the rows it measured."""
    rc, seconds = _run([sys.executable, "-m", "bench.bench", "--json", str(out / "bench.json")],
                       out / "bench.log", timeout)
    try:
        data = json.loads((out / "bench.json").read_text())
    except (OSError, ValueError):
        data = {"results": []}
    return {"label": "make bench", "command": "python -m bench.bench", "exit_code": rc, "seconds": seconds,
            **data}


def run_calibrate(out: Path, results: Path, budget: float, rubric: Path | None) -> dict:
    """`make calibrate` with one grade of each kernel set, into ``results`` (its calibration
    entry) and OUT/calibrated-rubric.toml."""
    cmd = [sys.executable, "-m", "tools.calibrate", "--runs", "1", "--results", str(results),
           "--out", str(out / "calibrated-rubric.toml"), "--budget-s", str(max(1.0, budget))]
    if rubric is not None:
        cmd += ["--rubric", str(rubric)]
    rc, seconds = _run(cmd, out / "calibrate.log", budget + 60)
    return {"exit_code": rc, "seconds": seconds, "command": " ".join(cmd[1:])}


# Bench cases of the rubric's performance tests: (task, M, N, K, density or None).
def _case(spec) -> tuple:
    return (spec.task, *spec.shape, spec.options.get("density"))


def clock_check(record: dict, rubric_path: Path | None = None) -> dict:
    """For each performance test whose case the bench timed: the bench's ratio (fp16 time /
    kernel time, events around single calls) and the reference grade's ratios (the grader's
    clock), and whether each grade is within 10 % of the bench."""
    from grader.rubric import load_rubric

    rubric = load_rubric(rubric_path) if rubric_path else load_rubric()
    bench = {}
    for entry in record.get("bench", []):
        for r in entry.get("results", []):
            t = r["times_ms"]
            bench[(r["task"], r["M"], r["N"], r["K"], r.get("density"))] = t["fp16"] / t["kernel"]
    grades = recorded_ratios(record, "reference")
    out = {}
    for spec in rubric.tests:
        key = _case(spec)
        if spec.kind != "performance" or key not in bench or not any(grades.get(spec.name, [])):
            continue
        got = [r for r in grades[spec.name] if r]
        out[spec.name] = {"bench_ratio": round(bench[key], 4), "grade_ratios": [round(r, 4) for r in got],
                          "within_10_percent": all(abs(r / bench[key] - 1) <= 0.10 for r in got)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--pytest", action="append", default=[], help="a pytest selection to run and record")
    parser.add_argument("--skip-grade", action="store_true")
    parser.add_argument("--sandbox-cost", action="store_true",
                        help="grade the reference twice with and twice without the sandbox "
                             "(GRADER_SANDBOX=none) and record what the sandbox adds to the wall time")
    parser.add_argument("--bench", action="store_true", help="run make bench and record it")
    parser.add_argument("--calibrate", action="store_true",
                        help="run make calibrate, one grade of each kernel set (with --skip-grade: those "
                             "grades are the session's)")
    parser.add_argument("--candidates", action="store_true",
                        help="calibrate with the rubric's '# candidate:' tests in (OUT/rubric-candidates.toml)")
    parser.add_argument("--budget-s", type=float, default=None, help="the whole session's time (see above)")
    args = parser.parse_args()
    started = time.time()

    def left(stage: str) -> float:
        if args.budget_s is None:
            return 24 * 3600.0
        return args.budget_s - (time.time() - started) - RESERVE_S[stage]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    record = session_record() | {"grades": {}, "pytest": []}

    def save() -> None:
        results.write_text(json.dumps(record, indent=1) + "\n")

    if not args.skip_grade:
        for name, path in SUBMISSIONS.items():
            record["grades"][name] = grade_submission(name, path, out)
            print(name, record["grades"][name].get("score", record["grades"][name].get("error")),
                  record["grades"][name]["wall_s"], "s", flush=True)
            save()
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
    save()
    if args.bench:
        record["bench"] = [run_bench(out, left("bench"))]
        print("bench", record["bench"][0]["exit_code"], len(record["bench"][0]["results"]), "rows",
              record["bench"][0]["seconds"], "s", flush=True)
        save()
    rubric = candidate_rubric(out) if args.candidates else None
    if args.calibrate:
        run = run_calibrate(out, results, left("calibrate"), rubric)
        record = json.loads(results.read_text())   # calibrate added its entry to the same file
        record["calibration_run"] = run
        print("calibrate", run["exit_code"], run["seconds"], "s (calibrate.log)", flush=True)
        save()
    if record.get("bench"):
        record["clock_check"] = clock_check(record, rubric)
        for name, c in record["clock_check"].items():
            print("clock", name, "bench", c["bench_ratio"], "grade", c["grade_ratios"],
                  "ok" if c["within_10_percent"] else "MORE THAN 10 % APART", flush=True)
        save()
    for expr in args.pytest:
        record["pytest"].append(_pytest(expr, out, left("pytest")))
        print("pytest", expr, record["pytest"][-1]["exit_code"], record["pytest"][-1]["seconds"], "s", flush=True)
        save()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
