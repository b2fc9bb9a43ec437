"""The speed estimate in the reports: a section of report.md, lines in the terminal,
an informational entry per task in Gradescope's results.json, and the roofline plots.

Everything here is from a CPU run's estimate (grader/estimate.py): it says
plainly that it is one, shows ranges, and names what bounds each launch, so
that a student sees where the time goes before a GPU ever runs the kernel.
Student-derived text (kernel names) is escaped like everything else in the
reports (grader/report.py's helpers).
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

from . import roofline
from .estimate import load_targets

PLOT_NAME = "roofline-{task}.png"
EMBED_MAX_BYTES = 60_000     # a plot embedded in Gradescope's results.json, base64, at most this big
WHAT = ("an estimate from a model, not a measurement and not a score: each range is as wide as the model's "
        "error was on the kernels it was checked against, for calls bound by the same thing, and a kernel "
        "unlike them can be further off. Only the GPU run's measured times give points.")


def _us(x) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.0f} us" if x >= 100 else f"{x:.1f} us"


def _r(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _pts(x) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.2f}".rstrip("0")


def _target(result):
    """The GPU the plots are drawn for: the one graded on, or the first the rubric was calibrated on."""
    targets = load_targets()
    if result.gpu:
        return next((t for t in targets if t.name == result.gpu), None)
    return next((t for t in targets if any(t.name in c for c in result.calibrated_on)), targets[0] if targets else None)


def draw_plots(result, report_dir: Path) -> dict[str, str]:
    """Draw each task's roofline plot into ``report_dir``; {task: file name, or why none}."""
    out = {}
    if not roofline.available():
        return {t.task: "no plot: matplotlib is not installed (pip install matplotlib)" for t in result.tasks}
    target = _target(result)
    for task in result.tasks:
        name = PLOT_NAME.format(task=task.task)
        try:
            drawn = roofline.draw(task, result.tests, target, Path(report_dir) / name)
        except Exception as e:  # noqa: BLE001 - a plot never costs a report
            out[task.task] = f"no plot: {type(e).__name__}: {e}"[:200]
            continue
        out[task.task] = name if drawn else "no plot: no time measured or predicted for this task"
    return out


def _far_below(test: dict, gpu: dict) -> bool:
    rr = gpu.get("ratio_range")
    return bool(rr) and test.get("zero_ratio") is not None and rr[1] <= test["zero_ratio"]


def markdown(result, plots: dict[str, str] | None, md_inline, md_code) -> list[str]:
    """The "Predicted performance" section, or [] when no task has an estimate
    (``md_inline``/``md_code``: report.py's escaping helpers)."""
    tasks = [t for t in result.tasks if (t.estimate or {}).get("tests") or (t.estimate or {}).get("error")]
    plots = plots or {}
    if not tasks and not any(p.endswith(".png") for p in plots.values()):
        return []
    md = ["", "## Predicted performance (an estimate, not a score)", "",
          "Performance is timed on a GPU only. What follows is " + WHAT + " It comes from what your wrapper "
          "launches at each performance test's GPU shape (the kernels in the compile table marked with that "
          "test), a few of each kernel's programs counted in the interpreter, the code the compiler emitted for "
          "the GPU (how wide its loads are, which ones are asynchronous), and the GPU's measured bandwidth "
          "and its tensor cores' rate for the product's type (the measured fp16 peak, scaled by NVIDIA's "
          "figures); each launch says what bounds it, which is where to look for speed."]
    graded_on = " and ".join(str(c) for c in (result.calibrated_on or [])[:4])
    if graded_on:
        md += ["", f"The rubric grades on {md_inline(graded_on, 300)}: the GPUs its thresholds were placed on "
                   "(its `calibrated_on`), and the ones predicted for here."]
    for task in result.tasks:
        est = task.estimate or {}
        plot = plots.get(task.task, "")
        if not est and not plot.endswith(".png"):
            continue
        md += ["", f"### {md_inline(task.title, 80)}", ""]
        if plot.endswith(".png"):
            md += [f"![roofline of {md_inline(task.task, 20)}]({plot})", ""]
        elif plot:
            md += [f"({md_inline(plot, 200)})", ""]
        if est.get("error"):
            md += [md_inline(est["error"], 400)]
            continue
        rows, notes = [], []
        for name, test in est.get("tests", {}).items():
            if test.get("error"):
                notes.append(f"- {md_code(name, 60)}: {md_inline(test['error'], 400)}")
                continue
            for gpu in test.get("gpus", []):
                pr, rr = gpu.get("points_range"), gpu.get("ratio_range")
                points = (f"{_pts(pr[0])}-{_pts(pr[1])} of {_pts(test['points_max'])}" if pr else "-")
                ratio = f"{_r(gpu.get('ratio'))} ({_r(rr[0])}-{_r(rr[1])})" if rr else "-"
                lo, hi = gpu["us_range"]
                times = f"{_us(lo)}-{_us(hi)}"
                shape = "x".join(str(int(v)) for v in test.get("shape") or []) or "-"
                rows.append(f"| {md_code(name, 60, table=True)} | {shape} | {md_inline(gpu['gpu'], 40)} | {times} | "
                            f"{_us(gpu.get('baseline_us'))} | {ratio} | {points} |")
            first = (test.get("gpus") or [{}])[0]
            if _far_below(test, first):
                notes.append(f"- **{md_code(name, 60)} is predicted far below the thresholds**: ratio "
                             f"{_r(first['ratio_range'][0])}-{_r(first['ratio_range'][1])} "
                             f"on {md_inline(first['gpu'], 40)}, "
                             f"where points start above {test['zero_ratio']:g} (full at {test['full_ratio']:g}).")
            if first.get("at_floor"):
                notes.append(f"- {md_code(name, 60)}: predicted at the memory floor, {_us(first['floor_us'])}: no "
                             "call is faster than moving every input once and writing the output once at the "
                             "GPU's measured bandwidth (the kernels alone were modelled faster: they skip "
                             "bytes a correct call must move, or the model missed work).")
            notes += _launch_lines(name, first, md_inline, md_code)
        if rows:
            md += ["| test | M x N x K | GPU | predicted time | fp16 torch.matmul | predicted ratio (range) | "
                   "points (range) |", "|---|---|---|---|---|---|---|", *rows]
        notes += _band_lines(est.get("tests", {}))
        tuned = _autotune_lines(est.get("tests", {}), md_inline, md_code)
        if tuned:
            md += ["", *tuned]
        if notes:
            md += ["", *notes]
    return md


def _band_lines(tests: dict) -> list[str]:
    """Where the ranges come from: per band the estimate used (grader/estimate.py's Band),
    the bound kinds it served, how many validation tests it rests on and how many fell inside."""
    served: dict[str, tuple[dict, set]] = {}
    for test in tests.values():
        for gpu in test.get("gpus", []):
            band = gpu.get("band")
            if band:
                served.setdefault(band["kind"], (band, set()))[1].add(gpu.get("bound") or "?")
    out = []
    for kind, (band, bounds) in sorted(served.items()):
        times = f"{band['low']:.2f}x to {band['high']:.2f}x the predicted time"
        if kind == "default":
            out.append(f"- Ranges of {times}: no check of the model on a GPU is recorded (a TA's "
                       "`python -m tools.validate_estimate`), so they are a guess, not a measured error.")
        elif kind == "all":
            out.append(f"- Calls bound by {', '.join(sorted(bounds))}: too few checked calls of that kind, so the "
                       f"range of all kinds together: on the {band['tests']} calls checked on a GPU the time "
                       f"measured was {times}, {band['within']} of them inside that range.")
        else:
            out.append(f"- Calls bound by {kind}: on the {band['tests']} such calls checked on a GPU the time "
                       f"measured was {times}, {band['within']} of them inside that range.")
    return out


def _autotune_lines(tests: dict, md_inline, md_code) -> list[str]:
    """One line per autotuned kernel of a task: in each test, the config the GPU's autotuner
    would pick (the fastest predicted, on the first GPU) and how far the other configs are."""
    picks: dict[str, list[str]] = {}
    gpu_name = ""
    for name, test in tests.items():
        first = (test.get("gpus") or [{}])[0]
        for launch in first.get("launches", []):
            if launch.get("autotune"):
                gpu_name = first["gpu"]
                picks.setdefault(launch.get("kernel", "?"), []).append(
                    _pick(name.split("/", 1)[-1], launch["autotune"], md_inline, md_code))
    return [f"- {md_code(kernel, 60)} is autotuned: on {md_inline(gpu_name, 40)} its autotuner would pick the "
            "config predicted fastest, " + "; ".join(found) for kernel, found in picks.items()]


def _pick(test: str, tune: dict, md_inline, md_code) -> str:
    """"in perf_m16 `BLOCK_M=64, ...` at 12.0 us (of 3 configs, the slowest 2.50x that)"."""
    fastest, slowest = tune["us"]
    about = [f"of {tune['configs']} configs"]
    if tune.get("unlaunchable"):
        about.append(f"{tune['unlaunchable']} too big to launch")
    if tune.get("uncounted"):
        about.append(f"{tune['uncounted']} not counted (the capture's time ran out)")
    if 0 < fastest < math.inf:
        about.append(f"the slowest {slowest / fastest:.2f}x that")
    return f"in {md_inline(test, 60)} {md_code(tune['chosen'], 160)} at {_us(fastest)} ({', '.join(about)})"


def _launch_lines(name: str, gpu: dict, md_inline, md_code) -> list[str]:
    """One line per launch of a test's call: what it is and what bounds it."""
    out = []
    for launch in gpu.get("launches", []):
        parts = launch.get("parts") or {}
        if not parts:
            out.append(f"- {md_code(name, 60)}: {md_code(launch.get('kernel', '?'), 60)}: "
                       f"{md_inline(launch.get('bound', ''), 100)}")
            continue
        detail = ", ".join(f"{k} {_us(v)}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]))
        why = ""
        if launch["bound"] == "latency" and launch.get("steps"):
            why = (f": {launch.get('waves', '?')} wave(s) of one program's {launch['steps']:g} loop trips, "
                   f"{_us(launch.get('trip_us'))} each, waiting on {launch.get('trip_bound', '?')}")
            if launch.get("trip_bound") == "its instructions":
                why += _instructions(launch)
            if launch.get("serial"):
                why += f" ({_serial(launch)} a trip, each a long chain)"
            if launch.get("sms") and launch["programs"] < launch["sms"]:
                why += (f"; only {launch['programs']} programs for {launch['sms']} multiprocessors: "
                        "the rest of the GPU waits")
        elif launch["bound"] == "latency":
            why = f": {launch.get('waves', '?')} wave(s) of programs that each wait on memory"
        elif launch["bound"] == "issue":
            why = _instructions(launch)
        elif launch["bound"] == "load/store unit":
            why = _lsu(launch)
        out.append(f"- {md_code(name, 60)}: {md_code(launch.get('kernel', '?'), 60)}, {launch['programs']} programs, "
                   f"{launch.get('occupancy', '?')} per multiprocessor "
                   f"(limited by {md_inline(launch.get('limit', '?'), 30)}): "
                   f"{_us(launch['us'])}, bound by **{md_inline(launch['bound'], 30)}**{md_inline(why, 600)} "
                   f"({md_inline(detail, 300)}; DRAM {launch.get('dram_bytes', 0) / 1e6:.1f} MB, "
                   f"L2 {launch.get('l2_bytes', 0) / 1e6:.1f} MB)")
    return out


def _instructions(launch: dict) -> str:
    """": 263 issue slots a trip per thread, most of them 87 of 64-bit integer arithmetic, ..."."""
    code = launch.get("code") or {}
    top = [t for t in code.get("top") or [] if t[1]]
    total = launch.get("trip_instructions") or code.get("instructions")
    if not top:
        return ""
    named = ", ".join(f"{v:g} {k}" for k, v in top[:3])
    return (f" ({total:g} issue slots a trip per thread, most of them {named})" if total else
            f" (most of them {named})")


def _serial(launch: dict) -> str:
    """"4 integer divisions and 2 integer modulos", from what the compiler emitted."""
    kinds = (launch.get("code") or {}).get("serial_kinds") or {}
    if not kinds:
        return f"{launch['serial']:g} slow divisions or square roots"
    return " and ".join(f"{n:g} {kind}{'' if n == 1 else 's'}" for kind, n in kinds.items())


def _lsu(launch: dict) -> str:
    """Why the load/store unit is busy: the loads' widths and how far apart their lanes are."""
    code = launch.get("code") or {}
    widths = code.get("load_widths") or {}
    scalar = sum(n for w, n in widths.items() if w.isdigit() and int(w) <= 4)
    out = f": {code.get('wavefronts', 0):g} passes a warp per loop trip"
    if scalar and not code.get("async_loads"):
        sizes = "/".join(sorted({w for w, n in widths.items() if w.isdigit() and int(w) <= 4 and n}, key=int))
        out += (f"; {scalar:g} of its loads a thread are single {sizes}-byte loads, not 16-byte vectors, and none "
                "is asynchronous: the compiler could not prove the addresses contiguous and aligned, so every "
                "element is loaded on its own, and lanes that sit in different rows cost a pass each")
        out += _narrow_sources(code)
    return out


def _narrow_sources(code: dict) -> str:
    """" (the tl.load of w8a8.py line 52: 8 of them, line 60: 2)", from the compiled code's
    source lines; "" when the compiler gave none."""
    lines = [(str(k), v) for k, v in (code.get("narrow_loads") or {}).items() if v]
    if not lines:
        return ""
    first_file = lines[0][0].rsplit(":", 1)[0]
    named = ", ".join(f"line {where.rsplit(':', 1)[-1]}: {n:g}" if where.startswith(first_file + ":") else
                      f"{where}: {n:g}" for where, n in lines[:4])
    return f" (the loads of {first_file}, {named})"



def terminal_lines(result, one_line) -> list[str]:
    """A few lines for the terminal: per task, the predicted ratios and points on the first GPU."""
    lines = []
    for task in result.tasks:
        tests = (task.estimate or {}).get("tests") or {}
        shown, lo, hi, most, gpu_name = [], 0.0, 0.0, 0.0, ""
        for name, test in tests.items():
            first = (test.get("gpus") or [{}])[0]
            if test.get("error") or not first.get("ratio_range"):
                continue
            gpu_name = first["gpu"]
            rr, pr = first["ratio_range"], first["points_range"]
            lo, hi, most = lo + pr[0], hi + pr[1], most + test["points_max"]
            flag = " FAR BELOW the thresholds" if _far_below(test, first) else ""
            shown.append(f"{name.split('/', 1)[-1]} ratio {rr[0]:.2f}-{rr[1]:.2f}{flag}")
        if shown:
            lines.append(one_line(f"{task.task}: predicted on {gpu_name} (an estimate, not a score): "
                                  f"{_pts(round(lo, 2))}-{_pts(round(hi, 2))} of {_pts(most)} performance points; "
                                  + "; ".join(shown), 600))
    return lines


def gradescope_entries(result, report_dir: Path | None, one_line) -> list[dict]:
    """Informational results.json entries (0 of 0 points): per task the predicted
    ratios, and its roofline plot embedded where it is small enough."""
    out = []
    for task in result.tasks:
        tests = (task.estimate or {}).get("tests") or {}
        if not tests:
            continue
        items = []
        for name, test in tests.items():
            first = (test.get("gpus") or [{}])[0]
            if test.get("error") or not first.get("ratio_range"):
                error = one_line(test.get("error", "no prediction"), 300)
                items.append(f"<li>{html.escape(one_line(name, 80))}: {html.escape(error)}</li>")
                continue
            rr, pr = first["ratio_range"], first["points_range"]
            far = " <b>predicted far below the thresholds</b>" if _far_below(test, first) else ""
            items.append(f"<li>{html.escape(one_line(name, 80))}: ratio {rr[0]:.2f}-{rr[1]:.2f}, points "
                         f"{_pts(pr[0])}-{_pts(pr[1])} of {_pts(test['points_max'])} on "
                         f"{html.escape(one_line(first['gpu'], 60))}{far}</li>")
        graded_on = " and ".join(str(c) for c in (result.calibrated_on or [])[:4])
        body = (f"<p>Predicted performance: {html.escape(WHAT)} report.md says what bounds each kernel.</p>"
                + (f"<p>The rubric grades on {html.escape(one_line(graded_on, 300))}.</p>" if graded_on else "")
                + f"<ul>{''.join(items)}</ul>")
        plot = Path(report_dir) / PLOT_NAME.format(task=task.task) if report_dir else None
        if plot is not None and plot.is_file() and plot.stat().st_size * 4 / 3 <= EMBED_MAX_BYTES:
            data = base64.b64encode(plot.read_bytes()).decode()
            body += f'<img alt="roofline of {html.escape(task.task)}" src="data:image/png;base64,{data}"/>'
        out.append({"name": one_line(f"{task.task}: speed predicted on the CPU (an estimate, not graded)", 200),
                    "score": 0.0, "max_score": 0.0, "output": body, "output_format": "html",
                    "visibility": "visible"})
    return out
