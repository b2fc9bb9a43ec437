"""Render the generated parts of the docs and the estimate's data: the tables of
docs/grading.md and docs/performance.md from the results files and
grader/rubric.toml, the rubric's totals where handout.md states them, and
grader/targets.toml from the results files (``make docs``).

    python -m tools.render_results          rewrite them
    python -m tools.render_results --check  exit 1 if one is out of date, naming the command to run
    python -m tools.render_results --tables results/FILE.json   print one file's benchmark tables

Each results/<date>-<gpu>.json holds what was measured on one GPU that day:
``grades`` (tools/gpu_session.py) and ``calibration`` (tools/calibrate.py: its
grades, and the thresholds it placed): docs/grading.md puts the reference's
and the tutorial-style kernels' ratios next to the rubric's thresholds, shows
what the placement rule makes of every recorded run, and each calibration's
table of old and new thresholds; ``bench``, a list of `make bench` runs
(bench/bench.py's --json), which docs/performance.md shows as tables, with
how far later runs stray from the first; and ``eager``, a list of
`python -m bench.eager` runs (the layers in eager mode, host included),
shown there too. docs/performance.md shows the newest file of each GPU and
names the older ones (``--tables FILE`` prints theirs). grader/targets.toml is what the CPU run's speed estimate
(grader/estimate.py) knows of each GPU: the device (``device``), its
measured copy bandwidth and product peaks (the last `make bench`), the
tensor cores' dense peak per type in NVIDIA's figures (``TENSOR_FIGURES``,
with where they come from), and per
performance test the graded time of fp16 ``torch.matmul`` and of the
reference (the median over the grades recorded with the grader's current
clock, tools.gpu_session.CLOCK; where a GPU has none yet, over every grade,
with the copy of each output that the earlier clock also timed taken off:
tools.gpu_session.kernel_only_ms). The estimate's
own check against measured times (``estimate``, tools/validate_estimate.py)
is a table in docs/grading.md.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tools.gpu_session import CLOCK, kernel_only_ms, recorded_grades, recorded_ratios, short_gpu_name

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "grading.md"
BEGIN, END = "<!-- thresholds:begin (tools/render_results.py) -->", "<!-- thresholds:end -->"
CAL_BEGIN, CAL_END = "<!-- calibration:begin (tools/render_results.py) -->", "<!-- calibration:end -->"
PERF_DOC = ROOT / "docs" / "performance.md"
PERF_BEGIN, PERF_END = "<!-- bench:begin (tools/render_results.py) -->", "<!-- bench:end -->"
EAGER_BEGIN, EAGER_END = "<!-- eager:begin (tools/render_results.py) -->", "<!-- eager:end -->"
HANDOUT = ROOT / "handout.md"
# Where the handout states the rubric's totals: a pattern whose group 1 is the number, and which
# number (correctness, performance: the points of the tests that are not bonus).
HANDOUT_NUMBERS = (
    (r"Correctness is (\d+(?:\.\d+)?)\s+points", lambda c, p: c),
    (r"points, performance (\d+(?:\.\d+)?)", lambda c, p: p),
    (r"not exceed (\d+(?:\.\d+)?)\)", lambda c, p: c + p),
    (r"the (\d+(?:\.\d+)?) performance points", lambda c, p: p),
)
EST_BEGIN, EST_END = "<!-- estimate:begin (tools/render_results.py) -->", "<!-- estimate:end -->"
TARGETS = ROOT / "grader" / "targets.toml"
DEVICE_KEYS = ("sms", "l2_bytes", "clock_ghz", "smem_per_sm", "regs_per_sm", "max_warps", "max_blocks")
# The tensor cores' dense peak per operand type (TFLOP/s, TOP/s for int8) in NVIDIA's own figures,
# by the name torch gives the GPU: no benchmark of a library's product gives it (torch._int_mm
# reaches about half of int8's). The estimate scales its measured fp16 peak by them.
_HOPPER_SXM = {"fp16": 989.4, "bf16": 989.4, "tf32": 494.7, "fp8": 1978.9, "int8": 1978.9}
TENSOR_FIGURES = {
    "NVIDIA H100 80GB HBM3": (_HOPPER_SXM, "NVIDIA H100 Tensor Core GPU Architecture whitepaper and H100 datasheet, "
                              "H100 SXM, dense (the datasheet's figures with sparsity halved): FP16 and BF16 989.4 "
                              "TFLOPS, TF32 494.7, FP8 1978.9, INT8 1978.9 TOPS"),
    "NVIDIA H200": (_HOPPER_SXM, "NVIDIA H200 datasheet: the H100 SXM's compute (FP16 and BF16 1979 TFLOPS, FP8 "
                    "and INT8 3958 with sparsity; dense is half), with more and faster memory"),
}


# What makes a results file a run of the kernels (timings, grades, the device's figures); a file that
# records checks alone (an attack on the clock, say) has no row or column in the tables.
TIMED = ("bench", "bench_quick", "eager", "grades_calls_only", "graded_with_the_calibrated_rubric", "calibration",
         "device", "estimate", "grades", "fixture_grades")


def _runs() -> list[tuple[Path, dict]]:
    runs = [(p, json.loads(p.read_text())) for p in sorted((ROOT / "results").glob("*.json"))]
    return [(p, r) for p, r in runs if any(k in r for k in TIMED)]


def table() -> str:
    from grader.rubric import load_rubric

    runs = [r for _, r in _runs()]
    rubric = load_rubric()
    heads = [f"{short_gpu_name(r['gpu'])} {r['date']}" for r in runs]
    lines = ["| test | full | zero | reference " + " / ".join(heads) + " | tutorial-style "
             + " / ".join(heads) + " | stub-plan draft " + " / ".join(heads) + " |", "|---|---|---|---|---|---|"]

    def ratio(run, who, test):
        found = sorted(v for v in recorded_ratios(run, who).get(test, []) if v is not None)
        return "-" if not found else "-".join(dict.fromkeys(f"{v:.2f}" for v in (found[0], found[-1])))

    for t in rubric.tests:
        if t.kind != "performance":
            continue
        lines.append(f"| {t.name} | {t.full_ratio:g} | {t.zero_ratio:g} | "
                     + " / ".join(ratio(r, "reference", t.name) for r in runs) + " | "
                     + " / ".join(ratio(r, "naive", t.name) for r in runs) + " | "
                     + " / ".join(ratio(r, "draft", t.name) for r in runs) + " |")

    def score(run, who):
        """Each grade's score, "of" its maximum where that is not 100 (a rubric with candidate
        tests in, or a grade of some tasks only: ``tasks``)."""
        done = [g for g in recorded_grades(run, who) if "score" in g]
        return "-" if not done else ", ".join(
            f"{g['score']:g}" + ("" if g.get("max_score", 100) == 100 else f" of {g['max_score']:g}")
            + (f" ({', '.join(g['tasks'])} only)" if g.get("tasks") else "") for g in done)

    scores = "; ".join(f"{h}: reference {score(r, 'reference')}, tutorial-style {score(r, 'naive')}, stub-plan "
                       f"draft {score(r, 'draft')}, reference "
                       f"graded in {next(g['wall_s'] for g in recorded_grades(r, 'reference')):g} s"
                       for h, r in zip(heads, runs) if recorded_grades(r, "reference"))
    return "\n".join(lines) + f"\n\nScores when recorded (under the thresholds of that run): {scores}.\n"


def calibration_tables() -> str:
    """What the placement rule makes of every recorded run next to the rubric,
    then the table of each calibration recorded in a results file."""
    from grader.rubric import load_rubric
    from tools.calibrate import LABEL, WHO, rows
    from tools.calibrate import table as calibration_table

    runs = _runs()
    ratios = {who: {} for who in WHO}
    for _, run in runs:
        for who in WHO:
            for test, found in recorded_ratios(run, who).items():
                ratios[who].setdefault(test, []).extend(found)
    files = " ".join(str(p.relative_to(ROOT)) for p, _ in runs)
    out = [f"The rule applied to every recorded run (`make calibrate CALIBRATE_FLAGS=\"--from {files}\"`); "
           "old: grader/rubric.toml.", "", calibration_table(rows(load_rubric(), *(ratios[w] for w in WHO)), "github"),
           ""]
    for p, run in runs:
        cal = run.get("calibration", {})
        if "thresholds" not in cal:
            continue
        n = {who: len(cal["grades"].get(who, [])) for who in WHO}
        out += [f"Calibrated on {cal['calibrated_on']} (`{p.relative_to(ROOT)}`, "
                + ", ".join(f"{n[who]} {LABEL[who]}" for who in WHO)
                + f" runs; rubric written: {cal['rubric_written']['hash']}):", "",
                calibration_table(cal["thresholds"], "github"), ""]
    return "\n".join(out)


def _drift(first: list[dict], later: list[dict]) -> str:
    """How far a later run's kernel times are from the first's, in one sentence."""
    base = {(r["task"], r["M"], r["N"], r["K"], r.get("density")): r["times_ms"]["kernel"] for r in first}
    rel = [abs(r["times_ms"]["kernel"] / base[k] - 1) for r in later
           if (k := (r["task"], r["M"], r["N"], r["K"], r.get("density"))) in base]
    if not rel:
        return "no shape in common with the first run"
    return (f"{sum(x <= 0.03 for x in rel)} of {len(rel)} kernel times within 3 % of the table, "
            f"{sum(x <= 0.10 for x in rel)} within 10 %, largest difference {max(rel):.0%}")


def newest_per_gpu(key: str) -> tuple[list[tuple[Path, dict]], list[tuple[Path, dict]]]:
    """(newest, older): of the results files that hold ``key``, the newest of each GPU
    (file names start with the date), and the rest; each in file order."""
    runs = [(p, run) for p, run in _runs() if run.get(key)]
    newest = {_gpu(run, key): (p, run) for p, run in runs}   # the last file of a GPU wins
    keep = sorted(newest.values(), key=lambda pr: pr[0])
    kept = {p for p, _ in keep}
    return keep, [(p, run) for p, run in runs if p not in kept]


def _gpu(run: dict, key: str) -> str:
    """The GPU of a results file: its head's, else that of its first ``key`` record."""
    return short_gpu_name(run.get("gpu") or run[key][0].get("gpu", ""))


def _older_line(older: list[tuple[Path, dict]], what: str, key: str) -> list[str]:
    if not older:
        return []
    names = ", ".join(f"`{p.relative_to(ROOT)}` ({_gpu(run, key)}, {run['date']})" for p, run in older)
    return [f"Older {what} stay in the results files: {names} (`python -m tools.render_results --tables FILE` "
            "prints a file's tables).", ""]


def _bench_section(p: Path, run: dict) -> list[str]:
    from bench.bench import table as bench_table

    benches = run["bench"]
    first = benches[0]
    out = [f"### {first['gpu']}, {run['date']}", "",
           f"torch {first['torch']}, triton {first['triton']}; copy {first['copy_gbs']:.0f} GB/s, "
           f"fp16 `torch.matmul` {first['peaks']['fp16']:.0f} TFLOP/s, int8 `torch._int_mm` "
           f"{first['peaks']['int8']:.0f} TOP/s (`{p.relative_to(ROOT)}`, {first.get('label', 'run 1')}).",
           "", "```", bench_table(first["results"]), "```", ""]
    for later in benches[1:]:
        out += [f"{later.get('label', 'A later run')} (same file): {_drift(first['results'], later['results'])}.",
                ""]
    return out


def bench_tables() -> str:
    """The benchmark of the newest results file of each GPU; the older ones named."""
    newest, older = newest_per_gpu("bench")
    out = [line for p, run in newest for line in _bench_section(p, run)]
    return "\n".join(out + _older_line(older, "benchmark runs", "bench"))


def _eager_section(p: Path, run: dict) -> list[str]:
    from bench.eager import table as eager_table

    out = []
    for i, eager in enumerate(run["eager"]):
        out += [f"### {eager['gpu']}, {run['date']}" + (f", run {i + 1}" if i else ""), "",
                f"torch {eager['torch']}, triton {eager['triton']} (`{p.relative_to(ROOT)}`, "
                f"{eager.get('label', 'run 1')}).", "", "```", eager_table(eager["results"]), "```", ""]
    return out


def eager_tables() -> str:
    """The layers in eager mode, from the newest results file of each GPU that has them."""
    newest, older = newest_per_gpu("eager")
    out = [line for p, run in newest for line in _eager_section(p, run)]
    if not out:
        out = ["No run recorded yet (`python -m bench.eager` on a GPU; MAINTAINING.md says where its "
               "output goes).", ""]
    return "\n".join(out + _older_line(older, "eager-mode runs", "eager"))


def file_tables(path: Path) -> str:
    """The benchmark and eager-mode tables of one results file, as docs/performance.md would show them."""
    run = json.loads(path.read_text())
    path = path.resolve()
    out = _bench_section(path, run) if run.get("bench") else []
    out += _eager_section(path, run) if run.get("eager") else []
    return "\n".join(out) if out else f"{path.name} holds no benchmark or eager-mode run\n"


def targets_toml() -> str:
    """grader/targets.toml: one [[gpu]] per GPU that has a results file with its device,
    a benchmark and graded times (the latest file for each figure)."""
    import statistics

    from grader.estimate import shape_key
    from grader.rubric import load_rubric

    rubric = load_rubric()
    perf = [t for t in rubric.tests if t.kind == "performance"]
    by_gpu: dict[str, list] = {}
    for p, run in _runs():
        by_gpu.setdefault(run["gpu"], []).append((p, run))
    out = ["# What the CPU run's speed estimate knows of each GPU (grader/estimate.py).",
           "# Generated from results/*.json by python -m tools.render_results: do not edit by hand.", ""]
    for gpu, runs in by_gpu.items():
        device = next((r["device"] for _, r in reversed(runs) if "device" in r), None)
        bench = next(((p, b) for p, r in reversed(runs) for b in reversed(r.get("bench") or [r.get("bench_quick")])
                      if b), None)
        if device is None or bench is None:
            continue
        b = bench[1]
        base, ref = {}, {}
        timed = [run for _, run in runs if run.get("clock") == CLOCK] or [run for _, run in runs]
        for run in timed:
            for who in ("reference", "naive"):
                for g in recorded_grades(run, who):
                    for t in perf:
                        found = g.get("tests", {}).get(t.name, {})
                        if found.get("baseline_ms"):
                            base.setdefault(shape_key(t.shape), []).append(
                                kernel_only_ms(found["baseline_ms"], t.shape, run, b["copy_gbs"]))
                        if who == "reference" and found.get("kernel_ms"):
                            ref.setdefault(t.name, []).append(
                                kernel_only_ms(found["kernel_ms"], t.shape, run, b["copy_gbs"]))
        sources = ", ".join(str(p.relative_to(ROOT)) for p, _ in runs)
        out += ["[[gpu]]", f"name = {json.dumps(gpu)}", f"source = {json.dumps(sources)}"]
        out += [f"{k} = {device[k]!r}" for k in DEVICE_KEYS if k in device]
        out += [f"copy_gbs = {b['copy_gbs']:.1f}",
                "tflops = {" + ", ".join(f"{k} = {v:.1f}" for k, v in sorted(b["peaks"].items())) + "}",
                "baseline_ms = {" + ", ".join(f'"{k}" = {statistics.median(v):.5f}' for k, v in sorted(base.items()))
                + "}",
                "reference_ms = {" + ", ".join(f'"{k}" = {statistics.median(v):.5f}' for k, v in sorted(ref.items()))
                + "}"]
        if gpu in TENSOR_FIGURES:
            figures, where = TENSOR_FIGURES[gpu]
            out += ["tensor_tflops = {" + ", ".join(f"{k} = {v:.1f}" for k, v in sorted(figures.items())) + "}",
                    f"tensor_source = {json.dumps(where)}"]
        out.append("")
    return "\n".join(out + uncertainty_toml())


def uncertainty_toml() -> list[str]:
    """targets.toml's ``[uncertainty]``: the ranges the estimate shows, per what bounds a call,
    fitted by tools.validate_estimate.fit_bands from every results file's estimate rows of the
    current model version (none: no section, and the estimate shows its default range)."""
    from grader.estimate import MODEL_VERSION
    from tools.validate_estimate import BAND_HIGH, BAND_LOW, fit_bands

    rows, sources = [], []
    for p, run in _runs():
        mine = [r for r in (run.get("estimate") or {}).get("rows", []) if r.get("model") == MODEL_VERSION]
        if mine:
            rows += mine
            sources.append(str(p.relative_to(ROOT)))
    bands = fit_bands(rows)
    if not bands:
        return []
    out = ["# The estimate's ranges: measured / predicted kernel time on the validation runs",
           f"# (tools/validate_estimate.py), its {BAND_LOW:.0%} to {BAND_HIGH:.0%} percentile per what bounds "
           "the call, widened to hold 1;",
           "# tests: rows it rests on, within: rows inside it. A kind with too few rows takes \"all\".",
           "[uncertainty]", f"# model {MODEL_VERSION}, from {', '.join(sources)}"]
    for kind, b in bands.items():
        out.append(f"{json.dumps(kind)} = {{low = {b['low']:.2f}, high = {b['high']:.2f}, tests = {b['tests']}, "
                   f"within = {b['within']}}}")
    return out + [""]


def estimate_table() -> str:
    """Each recorded check of the estimate (results files' ``estimate``, written by
    tools/validate_estimate.py): per kernel set and test, predicted and measured ratio."""
    out = []
    for p, run in _runs():
        est = run.get("estimate")
        if not est:
            continue
        rows = est.get("rows", [])
        s = est.get("summary", {})
        out += [f"{run['gpu']}, {run['date']} (`{p.relative_to(ROOT)}`): predicted within a factor "
                f"{s.get('factor', 1.5):g} of the measured ratio for {s.get('within', 0)} of {s.get('tests', 0)} "
                f"tests ({s.get('share', 0):.0%}); tests predicted to earn nothing earned at most "
                f"{s.get('max_points_when_zero', 0):.0%} of their points.", "",
                "| kernels | test | predicted ratio | measured ratio | predicted / measured | points predicted | "
                "points measured |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            pred, meas = r.get("predicted_ratio"), r.get("measured_ratio")
            q = f"{pred / meas:.2f}" if pred and meas else "-"
            out.append(f"| {r['kernels']} | {r['test']} | {_fmt(pred)} | {_fmt(meas)} | {q} | "
                       f"{_fmt(r.get('predicted_points'))} | {_fmt(r.get('measured_points'))} |")
        out.append("")
    if not out:
        out = ["No check recorded yet: `python -m tools.validate_estimate OUT` on a GPU writes one.", ""]
    return "\n".join(out)


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _between(text: str, begin: str, end: str, body: str) -> str:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


def render(text: str) -> str:
    text = _between(_between(text, BEGIN, END, table()), CAL_BEGIN, CAL_END, calibration_tables())
    return _between(text, EST_BEGIN, EST_END, estimate_table()) if EST_BEGIN in text else text


def render_performance(text: str) -> str:
    return _between(_between(text, PERF_BEGIN, PERF_END, bench_tables()), EAGER_BEGIN, EAGER_END, eager_tables())


def render_handout(text: str) -> str:
    """The handout with the rubric's totals written where it states them."""
    from grader.rubric import load_rubric

    rubric = load_rubric()
    c, p = (sum(t.points for t in rubric.tests if t.kind == kind and not t.bonus)
            for kind in ("correctness", "performance"))
    for pattern, value in HANDOUT_NUMBERS:
        found = list(re.finditer(pattern, text))
        if not found:
            raise SystemExit(f"handout.md no longer matches {pattern!r}: update HANDOUT_NUMBERS in "
                             "tools/render_results.py")
        for m in reversed(found):
            text = text[:m.start(1)] + f"{value(c, p):g}" + text[m.end(1):]
    return text


DOCS = ((DOC, render), (PERF_DOC, render_performance), (HANDOUT, render_handout))


if __name__ == "__main__":
    if "--tables" in sys.argv:
        files = sys.argv[sys.argv.index("--tables") + 1:]
        if not files:
            sys.exit("usage: python -m tools.render_results --tables results/FILE.json ...")
        for name in files:
            print(file_tables(Path(name)))
        sys.exit(0)
    stale = []
    targets = targets_toml()
    if not TARGETS.exists() or TARGETS.read_text() != targets:
        stale.append(TARGETS)
        if "--check" not in sys.argv:
            TARGETS.write_text(targets)
    for doc, fn in DOCS:
        current = doc.read_text()
        new = fn(current)
        if new != current:
            stale.append(doc)
            if "--check" not in sys.argv:
                doc.write_text(new)
    if "--check" in sys.argv and stale:
        print(f"out of date: {', '.join(str(d.relative_to(ROOT)) for d in stale)}; run make docs "
              "(python -m tools.render_results)")
        sys.exit(1)
