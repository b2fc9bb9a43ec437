"""Check the CPU run's speed estimate against the grader's own clock, on a GPU.

    python -m tools.validate_estimate OUT [--kernels NAME,...] [--rounds N] [--append] [--measure-only]   (a GPU)
    python -m tools.validate_estimate OUT|FILE... --predict [--cache DIR] [--workers N]  (any machine)

For every kernel set below and every performance test of the rubric, the
estimate is made exactly as a CPU grade makes it (a sandboxed worker in the
Triton interpreter captures what the wrapper launches at the test's GPU
shape and counts sampled programs, the compile check compiles it for sm_90,
grader/estimate.py models it), and the kernel is timed exactly as a GPU grade
times it (grader/harness/measure.py: a CUDA graph of back-to-back calls on
fresh inputs, against fp16 ``torch.matmul`` in the same run, every output
checked). No grade is run. Writes OUT/results.json: the head of a results
file (date, GPU, versions), ``device`` (this GPU's properties),
``bench_quick`` (its copy bandwidth and product peaks) and ``estimate``:

    rows     per kernel set and test: predicted and measured time, the ratios
             (the predicted one against this run's measured baseline, so that
             only the model's error shows), the points each ratio earns, the
             predicted range, what the model says bounds the call
             (``bound_kind``) and the model's version (``model``)
    summary  how many tests are predicted within a factor 1.5 (and 1.25) of
             the measured ratio, the most any test predicted to earn nothing
             earned, how many were measured inside their predicted range, how
             many had a points range narrower than half their points

``--append`` keeps the rows of OUT/results.json for other kernel sets and
sums them up with the new ones (to split a run over two sessions, e.g.
``--kernels reference,naive,from_the_handout``, then the slow ones).

The predictions need Triton's CPU interpreter in the sandboxed workers, which
some GPU machines cannot run (Triton 3.6 under numpy >= 2.4: ``fence.interpreter_problem``,
tried with the PYTHONPATH a worker gets: a numpy pinned on this process's
PYTHONPATH does not reach the workers). There the
GPU run records its measurements only and says so; ``--predict`` then makes
the predictions for OUT/results.json on a machine whose interpreter works (a
laptop, CI; no GPU needed), as a student's CPU grade would, and fills in the
comparison and the summary. Each row keeps what was measured
(``measurement``), so the predictions can be made again at any time.
``--cache DIR`` keeps what each kernel file's CPU run captured (``run.capture``
and ``run.kernels``, pickled) in DIR, one file per kernel set and task, named
by a hash of the kernel file, of the task's performance tests and of the code
that produces them (grader/worker, grader/harness, grader/tasks; see
``capture_key``): with it, predicting every row again after a change of
grader/estimate.py alone takes seconds instead of the interpreter's hour. A
change to that code, the kernel file or the tests makes a new key (old files
are simply no longer read; delete DIR to drop them).
Both clocks are understood: the prediction models the kernels alone, as the
grader times a call (tools.gpu_session.CLOCK, recorded as ``clock``); rows of
a file recorded while each timed call also copied its output have that copy
(grader.estimate.output_copy_ms) taken off both measured times before the
comparison (``copy_us_taken_off``).
Copy OUT/results.json into results/ (one file per GPU and date; merge into an
existing one) and run ``python -m tools.render_results``: the table in
docs/grading.md and grader/targets.toml follow, its ``[uncertainty]`` (the
ranges the estimate shows) fitted by ``fit_bands`` from every results file's
rows of the current model version (grader.estimate.MODEL_VERSION; after
changing the model, bump it and run ``--predict`` on every results file with
rows: ``python -m tools.validate_estimate results/*.json --predict``). The acceptance of the estimate
(docs/grading.md) is ``summary.share >= 0.8`` and ``summary.max_points_when_zero
<= 0.25``. Needs a CUDA GPU; the predictions follow the measurements, on its CPU cores.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.estimate import MODEL_VERSION  # noqa: E402

KERNELS = {"reference": "solutions", "naive": "calibration/naive",
           "from_the_handout": "tests/fixtures/from_the_handout",
           "stub_plan": "calibration/stub_plan", "tuned_student": "tests/fixtures/tuned_student",
           "slow/tiny_tiles": "tests/fixtures/slow/tiny_tiles",
           "slow/weight_per_row": "tests/fixtures/slow/weight_per_row",
           "slow/grid_order": "tests/fixtures/slow/grid_order", "slow/slow_dds": "tests/fixtures/slow/slow_dds",
           "slow/gathered": "tests/fixtures/slow/gathered"}
# Kernel sets written from the student bundle alone, after the model of 2026-12-07 was frozen
# (tests/fixtures/validation/README.md): held out from the ranges' fit until measured.
KERNELS.update({f"validation/{s}/{v}": f"tests/fixtures/validation/{s}/{v}"
                for s in ("tutorial_idioms", "first_triton", "decode_minded") for v in ("draft", "final")})
FACTOR = 1.5        # docs/grading.md's acceptance: the predicted ratio within this factor of the measured
CLOSE = 1.25        # the tighter factor the summary also counts
BAND_LOW, BAND_HIGH = 0.1, 0.9   # the percentiles of measured / predicted time a range spans
SEED = 20261125


def workers_interpreter_problem() -> str:
    """Why the predictions' sandboxed workers could not run Triton's interpreter here, or "":
    tried with the PYTHONPATH such a worker gets, not this process's."""
    from grader import toolchain
    from grader.worker.fence import interpreter_problem

    return interpreter_problem(pythonpath=toolchain.worker_pythonpath())


def device_record() -> dict:
    import torch

    p = torch.cuda.get_device_properties(0)
    regs = getattr(p, "regs_per_multiprocessor", None)
    smem = getattr(p, "shared_memory_per_multiprocessor", None)
    threads = getattr(p, "max_threads_per_multi_processor", None)
    clock = getattr(p, "clock_rate", None)   # kHz, where this PyTorch has it
    out = {"sms": p.multi_processor_count, "l2_bytes": getattr(p, "L2_cache_size", None),
           "clock_ghz": round(clock / 1e6, 3) if clock else 1.98, "smem_per_sm": smem, "regs_per_sm": regs,
           "max_warps": threads // 32 if threads else None, "max_blocks": 32,
           "source": "torch.cuda.get_device_properties on this GPU" + ("" if clock else "; clock_ghz assumed")}
    return {k: v for k, v in out.items() if v is not None}


def target_for(gpu: str, device: dict, bench: dict):
    """This GPU as the estimate sees it: its entry of grader/targets.toml where there is one
    (the figures a CPU grade uses), else one made of what this run measured."""
    from grader.estimate import Target, load_targets

    known = next((t for t in load_targets() if t.name == gpu), None)
    if known is not None:
        return known
    fields = {k: device[k] for k in ("sms", "l2_bytes", "clock_ghz", "smem_per_sm", "regs_per_sm", "max_warps",
                                     "max_blocks") if k in device}
    return Target(name=gpu, copy_gbs=bench["copy_gbs"], tflops=bench["peaks"], source="this run", **fields)


# What a CPU run's capture depends on besides the kernel file and the tests: the code that
# captures, counts and compiles (a change there makes every cached capture stale).
CAPTURE_CODE = ("grader/worker", "grader/harness", "grader/tasks")


def capture_key(folder: str, task: str, rubric) -> str:
    """The cache's name for one kernel file's CPU run: a hash of the kernel file, of the task's
    performance tests (names, shapes, options) and of every file under ``CAPTURE_CODE``."""
    import hashlib

    from grader.tasks import get

    h = hashlib.sha256()
    kernel = ROOT / folder / get(task).file
    h.update(task.encode() + b"\0" + (kernel.read_bytes() if kernel.exists() else b"") + b"\0")
    for spec in rubric.tests_for(task, "performance"):
        h.update(repr((spec.name, tuple(spec.shape), sorted((spec.options or {}).items()))).encode())
    for code in CAPTURE_CODE:
        for f in sorted((ROOT / code).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:24]


def captured_run(folder: str, task: str, rubric, cache: Path | None = None):
    """(run.capture, run.kernels) of one task of one kernel set, as a CPU grade makes them (a
    sandboxed worker in Triton's interpreter), or (None, why) when there are none. ``cache``: a
    folder that keeps them by ``capture_key`` (a capture that failed is not kept)."""
    import pickle

    from grader.harness import capture
    from grader.harness.session import Session, WorkerGone
    from grader.submission import load_submission
    from grader.tasks import get

    path = None
    if cache is not None:
        path = cache / f"{folder.replace('/', '+')}+{task}+{capture_key(folder, task, rubric)}.pickle"
        if path.exists():
            return pickle.loads(path.read_bytes())
    t = get(task)
    session = Session(load_submission(ROOT / folder), t.file, t.entry, "cpu", time.monotonic() + 600)
    try:
        if not session.hello["ok"]:
            return None, "the kernel file could not be imported"
        got = capture.capture(session, task, rubric.tests_for(task, "performance"), 240)
        reply = session.request({"op": "compile", "budget_s": 240, "gpu_only": True})
        kernels = reply.get("compile", [])
    except WorkerGone as e:
        return None, f"the CPU worker ended: {e}"
    finally:
        session.close()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".tmp").write_bytes(pickle.dumps((got, kernels)))
        path.with_suffix(".tmp").replace(path)
    return got, kernels


def predict(name: str, folder: str, task: str, rubric, targets: list, cache: Path | None = None) -> dict:
    """{GPU name: {test: prediction}} for one task of one kernel set, as a CPU grade makes it
    (one capture, predicted for each of ``targets``); {"error": why} when there is none.
    ``cache``: see ``captured_run``."""
    from grader.estimate import estimate
    from grader.facts import TaskRun

    run = TaskRun(task=task)
    got, kernels = captured_run(folder, task, rubric, cache)
    if got is None:
        return {"error": kernels}
    run.capture, run.kernels = got, kernels
    for r in run.kernels:
        if r.get("status") == "error" or r.get("launchable") is False:
            for test in r.get("tests", []):
                run.gpu_launch_errors.setdefault(test, r.get("error") or r.get("why_not") or "does not launch")
    tests = estimate(run, rubric, targets=targets).get("tests", {})
    return {t.name: {name: _one_gpu(test, t.name) for name, test in tests.items()} for t in targets}


def _one_gpu(test: dict, gpu: str) -> dict:
    """One test's prediction with only ``gpu``'s entry (an error stays as it is)."""
    if "gpus" not in test:
        return test
    return {**test, "gpus": [g for g in test["gpus"] if g["gpu"] == gpu]}


def measure(folder: str, task: str, rubric, rounds: int) -> dict:
    """{test: {"kernel_ms", "baseline_ms"} | {"error"}} with the grader's clock."""
    import torch

    from grader.harness.measure import timed_batches
    from grader.harness.run import case_seed
    from grader.harness.session import Session, WorkerGone
    from grader.submission import load_submission
    from grader.tasks import get

    t = get(task)
    out = {}
    session = Session(load_submission(ROOT / folder), t.file, t.entry, "cuda", time.monotonic() + 900)
    try:
        if not session.hello["ok"]:
            return {s.name: {"error": "import failed"} for s in rubric.tests_for(task, "performance")}
        for i, spec in enumerate(rubric.tests_for(task, "performance")):
            s = rubric.settings
            try:
                timing = timed_batches(session, f"timed{i}", task, spec.shape, spec.options,
                                       case_seed(SEED, spec.name), rounds, s.timed_batch_ms)
            except WorkerGone as e:
                out[spec.name] = {"error": f"while timed: {e}"}
                break
            entry = {"kernel_ms": statistics.median(timing.kernel_ms),
                     "baseline_ms": statistics.median(timing.baseline_ms), "cuda_graph": timing.graph}
            if timing.wrong:
                entry["error"] = f"wrong output: {timing.wrong}"[:300]
            out[spec.name] = entry
            torch.cuda.empty_cache()
    finally:
        session.close()
    return out


def _points(spec, ratio: float | None) -> float | None:
    if ratio is None:
        return None
    frac = (ratio - spec.zero_ratio) / (spec.full_ratio - spec.zero_ratio)
    return spec.points * min(1.0, max(0.0, frac))


def compare(kernels: str, spec, pred: dict, meas: dict, copy_ms: float = 0.0) -> dict:
    """One row: the prediction next to the measurement (kept whole as ``measurement``).
    ``copy_ms``: what the clock that measured it added to each call on both sides (a
    copy of the output, in files recorded before the clock timed the calls alone),
    taken off both times before they are compared with the prediction, which models
    the kernels alone."""
    row = {"kernels": kernels, "test": spec.name, "measurement": meas}
    gpu = (pred.get("gpus") or [{}])[0]
    us = gpu.get("us")
    if pred.get("error") or not us or not math.isfinite(us):
        row["error"] = pred.get("error") or "no prediction"
    if meas.get("error"):
        row["error"] = (row.get("error", "") + "; " if row.get("error") else "") + meas["error"]
    if us and math.isfinite(us):
        row["predicted_us"] = round(us, 2)
        if gpu.get("us_range"):
            row["predicted_us_range"] = [round(t, 2) for t in gpu["us_range"]]
        row["bound"] = " + ".join(f"{launch['kernel']}: {launch['bound']}" for launch in gpu.get("launches", []))
        row["bound_kind"] = gpu.get("bound", "")
        row["model"] = MODEL_VERSION
    if meas.get("kernel_ms"):
        kernel_ms = max(meas["kernel_ms"] - copy_ms, meas["kernel_ms"] / 2)
        baseline_ms = max(meas["baseline_ms"] - copy_ms, meas["baseline_ms"] / 2)
        row.update(measured_us=round(kernel_ms * 1e3, 2), baseline_us=round(baseline_ms * 1e3, 2),
                   measured_ratio=baseline_ms / kernel_ms)
        if copy_ms:
            row["copy_us_taken_off"] = round(copy_ms * 1e3, 2)
        if "predicted_us" in row:
            row["predicted_ratio"] = baseline_ms * 1e3 / row["predicted_us"]
        if "predicted_us_range" in row:
            row["predicted_points_range"] = [_points(spec, baseline_ms * 1e3 / t)
                                             for t in reversed(row["predicted_us_range"])]
    row["predicted_points"] = _points(spec, row.get("predicted_ratio"))
    row["measured_points"] = _points(spec, row.get("measured_ratio"))
    row["points"] = spec.points
    return row


def predictions(jobs: list[tuple], rubric, targets: list, workers: int = 2, cache: Path | None = None) -> dict:
    """{(kernel set, task): predict()'s answer} for ``jobs``, made on this machine
    (``workers`` kernel files at once: each prediction is a sandboxed CPU worker;
    ``cache``: see ``captured_run``)."""
    out = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {job: pool.submit(predict, job[0], KERNELS[job[0]], job[1], rubric, targets, cache)
                   for job in jobs}
        for job, future in futures.items():
            try:
                out[job] = future.result()
            except Exception as e:  # noqa: BLE001 - one kernel set's failure is a row, not the end
                out[job] = {"error": f"{type(e).__name__}: {e}"}
    return out


def predict_rows(rows: list[dict], rubric, target, jobs: list[tuple], made: dict,
                 record: dict | None = None) -> list[dict]:
    """The rows of ``jobs`` (kernel set, task) again, with the predictions ``made`` (predictions())
    for ``target``. ``record``: the results file's head, whose ``clock`` says what its times include."""
    from grader.estimate import output_copy_ms
    from tools.gpu_session import CALLS_ONLY, CLOCK

    old_clock = (record or {}).get("clock", CLOCK) not in (CLOCK, CALLS_ONLY)
    measured = {(r["kernels"], r["test"]): r.get("measurement", {}) for r in rows}
    out = []
    for name, task in jobs:
        got = made.get((name, task), {"error": "not predicted"})
        pred = got if "error" in got else got.get(target.name, {"error": f"not predicted for {target.name}"})
        for spec in rubric.tests_for(task, "performance"):
            one = pred.get(spec.name) or ({"error": pred["error"]} if "error" in pred else {})
            copy_ms = output_copy_ms(spec.shape, target.copy_gbs) if old_clock else 0.0
            out.append(compare(name, spec, one, measured.get((name, spec.name), {"error": "not measured"}),
                               copy_ms))
            _print_row(out[-1])
    return out


def _print_row(row: dict) -> None:
    print(f"  {row['kernels']:18s} {row['test']:22s} predicted {row.get('predicted_ratio') or 0:6.3f} "
          f"measured {row.get('measured_ratio') or 0:6.3f} {row.get('error', '')}", flush=True)


def summary(rows: list[dict]) -> dict:
    """How well the predictions did. ``share``: within a factor ``FACTOR`` of the measured
    ratio (docs/grading.md's acceptance, with ``max_points_when_zero``); ``close``: within
    ``CLOSE``; ``in_range``: the measured time inside the predicted range; ``narrow``: the
    points range narrower than half the test's points; ``zero_when_half``: tests predicted
    to earn at least half their points that earned nothing."""
    both = [r for r in rows if r.get("predicted_ratio") and r.get("measured_ratio") and not r.get("error")]
    within = [r for r in both if 1 / FACTOR <= r["predicted_ratio"] / r["measured_ratio"] <= FACTOR]
    close = [r for r in both if 1 / CLOSE <= r["predicted_ratio"] / r["measured_ratio"] <= CLOSE]
    ranged = [r for r in both if r.get("predicted_points_range")]
    in_range = [r for r in ranged if r["predicted_us_range"][0] <= r["measured_us"] <= r["predicted_us_range"][1]]
    narrow = [r for r in ranged if r["predicted_points_range"][1] - r["predicted_points_range"][0] < r["points"] / 2]
    zero = [r for r in both if r["predicted_points"] == 0]
    worst = max((r["measured_points"] / r["points"] for r in zero), default=0.0)
    half = [r for r in both if r["predicted_points"] >= r["points"] / 2 and r["measured_points"] == 0]
    share = len(within) / len(both) if both else 0.0
    return {"factor": FACTOR, "tests": len(both), "within": len(within), "share": share,
            "predicted_zero": len(zero), "max_points_when_zero": worst,
            "accepted": bool(both) and share >= 0.8 and worst <= 0.25,
            "close_factor": CLOSE, "close": len(close), "ranged": len(ranged), "in_range": len(in_range),
            "narrow": len(narrow), "zero_when_half": len(half)}


def fit_bands(rows: list[dict]) -> dict[str, dict]:
    """grader/targets.toml's ``[uncertainty]`` from validation rows of this model version:
    per bound kind of the call (and "all" together), measured over predicted time, its
    ``BAND_LOW`` to ``BAND_HIGH`` percentile widened to hold 1 (floored and ceiled to two
    decimals), how many rows it rests on and how many fell inside."""
    errors: dict[str, list[float]] = {}
    for r in rows:
        if r.get("error") or r.get("model") != MODEL_VERSION or not r.get("predicted_us") or not r.get("measured_us"):
            continue
        e = r["measured_us"] / r["predicted_us"]
        for kind in (r.get("bound_kind") or "?", "all"):
            errors.setdefault(kind, []).append(e)
    out = {}
    for kind, es in sorted(errors.items()):
        low = min(1.0, math.floor(round(_percentile(es, BAND_LOW) * 100, 6)) / 100)
        high = max(1.0, math.ceil(round(_percentile(es, BAND_HIGH) * 100, 6)) / 100)
        out[kind] = {"low": low, "high": high, "tests": len(es), "within": sum(low <= e <= high for e in es)}
    return out


def _percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear between the nearest ranks)."""
    v = sorted(values)
    at = q * (len(v) - 1)
    i = int(at)
    return v[i] if i + 1 >= len(v) else v[i] + (v[i + 1] - v[i]) * (at - i)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="+", help="the folder for OUT/results.json (with --predict: any "
                                                      "number of such folders or results files)")
    ap.add_argument("--kernels", default=",".join(KERNELS), help="kernel sets, comma-separated: " + ", ".join(KERNELS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--append", action="store_true", help="keep OUT/results.json's rows of other kernel sets")
    ap.add_argument("--measure-only", action="store_true",
                    help="time the kernels and leave the predictions to --predict on another machine "
                         "(saves device time: the predictions run in Triton's interpreter, on the CPU)")
    ap.add_argument("--predict", action="store_true",
                    help="make the predictions for OUT/results.json's measurements on this machine (no GPU needed)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="with --predict: a folder keeping each kernel file's CPU capture (see capture_key), "
                         "so that a change of the model alone is predicted again in seconds")
    ap.add_argument("--workers", type=int, default=2, help="with --predict: kernel files captured at once")
    args = ap.parse_args(argv)
    from grader.rubric import load_rubric

    rubric = load_rubric()
    if args.predict:
        files = [p if p.suffix == ".json" else p / "results.json" for p in args.out]
        return _predict_recorded(files, rubric, workers_interpreter_problem(), args.cache, args.workers)
    if len(args.out) != 1:
        ap.error("a GPU run writes one folder")
    args.out = args.out[0]
    results = args.out / "results.json"
    import torch

    if not torch.cuda.is_available():
        print("tools.validate_estimate needs a CUDA GPU (it times the kernels); --predict does not", file=sys.stderr)
        return 2
    from bench.bench import _matmul_peaks
    from grader.harness.timing import copy_bandwidth_gbs
    from grader.tasks import get
    from tools.gpu_session import session_record

    args.out.mkdir(parents=True, exist_ok=True)
    record = session_record()
    record["device"] = device_record()
    record["bench_quick"] = {"gpu": record["gpu"], "copy_gbs": copy_bandwidth_gbs(), "peaks": _matmul_peaks(),
                             "command": "python -m tools.validate_estimate", "results": []}
    target = target_for(record["gpu"], record["device"], record["bench_quick"])
    chosen = [k for k in args.kernels.split(",") if k]
    jobs = [(k, task) for k in chosen for task in rubric.tasks if (ROOT / KERNELS[k] / get(task).file).exists()]
    no_predictions = ("asked for (--measure-only)" if args.measure_only else workers_interpreter_problem())
    if no_predictions:
        print(f"measuring only: {no_predictions}", flush=True)
    started = time.time()
    rows = []
    kept = []   # --append: the rows of other kernel sets already in the file, read before it is rewritten
    if args.append and results.exists():
        kept = [r for r in json.loads(results.read_text()).get("estimate", {}).get("rows", [])
                if r["kernels"] not in chosen]
    for name, task in jobs:   # measured first, then predicted (predict_rows), as --predict does
        print(f"timing {name} {task} ...", flush=True)
        try:
            meas = measure(KERNELS[name], task, rubric, args.rounds)
        except Exception as e:  # noqa: BLE001 - one kernel set's failure is a row, not the end
            meas = {s.name: {"error": f"{type(e).__name__}: {e}"} for s in rubric.tests_for(task, "performance")}
            traceback.print_exc()
        for spec in rubric.tests_for(task, "performance"):
            rows.append(compare(name, spec, {"error": "not predicted yet"}, meas.get(spec.name, {})))
            _print_row(rows[-1])
        # Written after every kernel set and task: a run stopped by its time limit keeps what it measured.
        record["estimate"] = {"command": "python -m tools.validate_estimate", "target": target.name,
                              "rows": kept + rows, "summary": {"pending": "measuring (partial file)"}}
        results.write_text(json.dumps(record, indent=1) + "\n")
    if not no_predictions:
        rows = predict_rows(rows, rubric, target, jobs, predictions(jobs, rubric, [target], workers=6), record=record)
    rows = kept + rows
    record["estimate"] = {"command": "python -m tools.validate_estimate", "target": target.name,
                          "seconds": round(time.time() - started), "rows": rows, "summary": summary(rows),
                          "predicted_on": None if no_predictions else _this_machine()}
    if no_predictions:
        record["estimate"]["summary"] = {"pending": f"no predictions on this machine: {no_predictions}"}
    results.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {results}")
    if no_predictions:
        print(f"now, on a machine whose Triton interpreter works: python -m tools.validate_estimate {args.out} "
              "--predict")
        return 0
    return _said(record["estimate"]["summary"])


def _predict_recorded(files: list[Path], rubric, problem: str, cache: Path | None = None,
                      workers: int = 2) -> int:
    """--predict: the predictions for results files' measurements, made here; each kernel
    file is captured once (or read from ``cache``) and predicted for every file's GPU."""
    if problem:
        print(f"tools.validate_estimate --predict: {problem}", file=sys.stderr)
        return 2
    records = {}
    for results in files:
        try:
            record = json.loads(results.read_text())
            record["estimate"]["rows"][0]
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            print(f"tools.validate_estimate --predict: {results} holds no measured estimate rows "
                  f"({type(e).__name__}: {e}): left as it is", file=sys.stderr)
            continue
        records[results] = record
    if not records:
        return 2
    task_of = {t.name: t.task for t in rubric.tests}
    targets = {p: target_for(r.get("gpu", ""), r.get("device", {}), r.get("bench_quick", {}))
               for p, r in records.items()}
    jobs = {p: list(dict.fromkeys((row["kernels"], task_of[row["test"]]) for row in r["estimate"]["rows"]
                                  if row["test"] in task_of and row["kernels"] in KERNELS))
            for p, r in records.items()}
    every_job = list(dict.fromkeys(job for js in jobs.values() for job in js))
    gpus = list({t.name: t for t in targets.values()}.values())
    print(f"predicting {len(every_job)} kernel files for {', '.join(t.name for t in gpus)} ...", flush=True)
    made = predictions(every_job, rubric, gpus, workers=workers, cache=cache)
    worst = 0
    for results, record in records.items():
        est = record["estimate"]
        est["rows"] = predict_rows(est["rows"], rubric, targets[results], jobs[results], made, record=record)
        est["summary"] = summary(est["rows"])
        est["predicted_on"] = _this_machine()
        results.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {results}")
        worst = max(worst, _said(est["summary"]))
    return worst


def _this_machine() -> dict:
    import platform

    import numpy
    import torch
    import triton

    return {"machine": platform.machine(), "python": platform.python_version(), "torch": torch.__version__,
            "triton": triton.__version__, "numpy": numpy.__version__, "interpreter": "TRITON_INTERPRET=1"}


def _said(s: dict) -> int:
    print(f"within a factor {FACTOR}: {s['within']} of {s['tests']} ({s['share']:.0%}); predicted to earn nothing: "
          f"{s['predicted_zero']}, the most one of them earned: {s['max_points_when_zero']:.0%} of its points; "
          f"accepted: {s['accepted']}")
    if s.get("ranged"):
        print(f"within a factor {s['close_factor']}: {s['close']} of {s['tests']}; measured inside the predicted "
              f"range: {s['in_range']} of {s['ranged']}; points range under half the test's points: {s['narrow']} "
              f"of {s['ranged']}; predicted to earn half or more but earned nothing: {s['zero_when_half']}")
    return 0 if s["accepted"] else 1


if __name__ == "__main__":
    sys.exit(main())
