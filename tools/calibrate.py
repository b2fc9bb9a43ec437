"""Place the performance thresholds on this GPU (make calibrate).

    python -m tools.calibrate [--runs 2] [--out calibrated-rubric.toml | --write] [--results FILE]
    python -m tools.calibrate --from results/A.json [results/B.json ...] [--out FILE | --write]

On a GPU it grades the reference solutions (solutions/), the tutorial-style
kernels (calibration/naive/) and the stub-plan drafts (calibration/stub_plan/:
each stub's plan followed literally, untuned) ``--runs`` times each, alternately, through
tools/gpu_session.py, and records every grade as it finishes in the
``calibration`` entry of a results file (default results/<date>-<gpu>.json).
Run it again (after an interruption, or with ``--write``) and it continues
from the recorded grades while the kernels and the timed cases are the same
(``--fresh`` grades everything again). With ``--from`` it reads recorded runs
instead and needs no GPU.

Then ``place`` sets each performance test's full_ratio and zero_ratio from the
lowest ratios of those runs (docs/grading.md states the rule), a copy of the
rubric is written with only those two keys, ``calibrated_on`` and ``toolchain``
(the torch, Triton and numpy versions the grades ran with, from the results
files: they must agree) changed (comments and layout kept; it must load under
the strict rubric checks), and
a table shows the old and the new thresholds next to what the reference and
the tutorial-style kernels score under each. The same table, rendered from
the results file, goes into docs/grading.md (tools/render_results.py).

Exit status: 0 done; 1 no grade of the reference was timed; 2 bad input (no
GPU and no --from, a missing or unreadable results file, one without ratios,
a bad rubric), with one line on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from tabulate import tabulate

from grader.judge import ratio_fraction
from grader.rubric import (
    CALIBRATION,
    DEFAULT_RUBRIC,
    TOOLCHAIN_KEYS,
    Rubric,
    RubricError,
    load_rubric,
    parse_rubric,
    rubric_hash,
    set_values,
    tomllib,
)
from grader.scoring import round_to_step
from tools import gpu_session

ROOT = Path(__file__).resolve().parent.parent
WHO = ("reference", "naive", "draft")
LABEL = {"reference": "reference", "naive": "tutorial-style", "draft": "stub-plan draft"}
_clock = time.monotonic   # --budget-s's clock (tests replace it)

# ----------------------------------------------------------------------------- the placement rule

MARGIN = 0.85  # full_ratio: at least this share of the reference's lowest ratio ...
BAND = 0.05    # ... and at most MARGIN + BAND of it after rounding up
STEP = 0.05    # thresholds are multiples of STEP (of STEP / 5, / 25, ... where STEP would leave the band)
HALF = 0.5     # zero_ratio at most this share of full_ratio: a real ramp below full credit ...
FLOOR = 0.1    # ... and at least this share: a kernel ten times slower than full credit earns nothing
DRAFT = 0.6    # the stub-plan draft earns at most this share of a test's points (after rounding)
RULE = {"margin": MARGIN, "band": BAND, "step": STEP, "half": HALF, "floor": FLOOR, "draft": DRAFT}


@dataclass(frozen=True)
class Placement:
    full_ratio: float
    zero_ratio: float
    notes: tuple[str, ...] = ()   # what was special about this test, for the table


def _clean(x: float) -> float:
    return float(f"{x:.12g}")


def _nearest(x: float) -> int:
    return math.floor(x + 0.5 + 1e-9)   # halves up, whatever the float noise


def _lowest(ratios) -> float | None:
    valid = [r for r in ratios if isinstance(r, (int, float)) and math.isfinite(r) and r > 0]
    return min(valid) if valid else None


def place(reference, naive, old: tuple[float, float], lesson: float | None = None, draft=(),
          points: float = 1.0, points_step: float = 0.0) -> Placement:
    """The thresholds of one performance test from the ratios (baseline time /
    kernel time) of every run of the reference and of the tutorial-style
    kernels; a ratio that is None (not timed), zero or not finite is left out.

    - full_ratio: MARGIN times the reference's lowest ratio, rounded up to a
      multiple of the step, so that full credit needs at least MARGIN of the
      reference's ratio on every GPU and run. The step is STEP, or STEP / 5,
      STEP / 25, ... where a coarser one would put full_ratio above
      MARGIN + BAND of that ratio (a reference that is slow on this GPU).
    - zero_ratio: the multiple of the step just below the tutorial-style
      kernels' lowest ratio, so that they earn partial credit; at most HALF of
      full_ratio (rounded down), so that a kernel as fast as the reference on
      this test still leaves a ramp; at least FLOOR of full_ratio (rounded):
      a tutorial kernel slower than that earns nothing; always below full_ratio.
    - lesson (the task's ``lesson_ratio``: DDS at 50 % density or less, 1.0, no
      faster than dense): zero_ratio at least 2 * lesson - full_ratio, so that
      a kernel at that ratio earns at most half of the points. This comes
      before the tutorial-style kernels' partial credit, which it can take
      away on that test; if full_ratio is itself at or below the lesson ratio
      (a reference no faster than dense), the test cannot teach it: noted.
    - draft (the stub-plan drafts' ratios: the stubs' plan followed literally,
      untuned): zero_ratio high enough that the fastest of them earns at most
      DRAFT of the test's ``points`` once rounded to ``points_step``. This comes
      last: a first draft must not pass for a tuned kernel, whatever the
      tutorial-style kernels would have earned; a draft within a step of
      full_ratio cannot be held there: noted.
    - No reference ratio (every grade failed or was not timed): ``old``
      (full_ratio, zero_ratio) is kept. No tutorial-style ratio: zero_ratio is
      HALF of full_ratio.
    """
    ref, naive_low = _lowest(reference), _lowest(naive)
    if ref is None:
        return Placement(old[0], old[1], ("kept: the reference was never timed",))
    notes = []
    timed = sum(_lowest([r]) is not None for r in reference)
    if timed < len(reference):
        notes.append(f"reference timed in {timed} of {len(reference)} runs")
    step = STEP
    while True:
        full = _clean(math.ceil(MARGIN * ref / step - 1e-9) * step)
        if full > 0 and full / ref <= MARGIN + BAND + 1e-9:
            break
        step /= 5
    if step < STEP:
        notes.append(f"step {_clean(step):g}: the reference is slow here")
    floor = _clean(_nearest(FLOOR * full / step) * step)
    cap = _clean(math.floor(HALF * full / step + 1e-9) * step)
    if naive_low is None:
        zero = cap
        notes.append("no tutorial-style ratio: zero_ratio at half of full_ratio")
    else:
        below = _clean((math.ceil(naive_low / step - 1e-9) - 1) * step)
        zero = max(floor, min(below, cap))
        if naive_low >= ref:
            notes.append("the tutorial-style kernels are as fast as the reference")
        elif naive_low >= full:
            notes.append("the tutorial-style kernels reach full credit")
        elif naive_low <= zero:
            notes.append(f"the tutorial-style kernels are at or below {FLOOR:.0%} of full_ratio: no credit")
    if lesson is not None:
        if full <= lesson:
            notes.append(f"full credit at or below {lesson:g} (the lesson's ratio): the reference does not "
                         "beat it here")
        else:
            at_half = _clean(math.ceil((2 * lesson - full) / step - 1e-9) * step)
            if at_half > zero:
                zero = at_half
                if naive_low is not None and naive_low <= zero:
                    notes.append(f"zero_ratio {zero:g} so that a kernel at {lesson:g} gets at most half: "
                                 "the tutorial-style kernels get nothing here")
    fastest_draft = max((r for r in draft if _lowest([r]) is not None), default=None)
    if fastest_draft is not None:
        # fraction <= (DRAFT * points - points_step / 2) / points: rounded, still at most DRAFT of the points
        share = max(0.0, DRAFT - points_step / 2 / points)
        need = (fastest_draft - share * full) / (1 - share)
        at_most = _clean(math.ceil(need / step - 1e-9) * step)
        if at_most >= full:
            notes.append(f"the stub-plan draft ({fastest_draft:.2f}) is within a step of full credit: it cannot "
                         f"be held to {DRAFT:.0%}")
        if at_most > zero:
            zero = at_most
            notes.append(f"zero_ratio {min(zero, full - step):g} so that the stub-plan draft gets at most "
                         f"{DRAFT:.0%}")
    zero = _clean(max(0.0, min(zero, full - step)))
    return Placement(full, zero, tuple(notes))


# ----------------------------------------------------------------------------- rows and the table

def _points(spec, ratios, points_step: float, highest: bool = False) -> float | None:
    """What a kernel at its lowest (``highest``: its highest) ratio scores on ``spec``; None without a ratio."""
    valid = [r for r in ratios if _lowest([r]) is not None]
    if not valid:
        return None
    at = max(valid) if highest else min(valid)
    return round_to_step(ratio_fraction(spec, at) * spec.points, points_step)


def rows(rubric: Rubric, reference: dict, naive: dict, draft: dict | None = None) -> list[dict]:
    """One record per performance test of ``rubric``: the ratios ({test: [ratio
    per run]}), old and new thresholds, and the points the reference, the
    tutorial-style kernels and the stub-plan drafts get at their lowest ratio
    under each (the drafts' cap is placed on their highest). The results
    file keeps these; ``table`` shows them."""
    out = []
    step = rubric.settings.points_step
    for spec in rubric.tests:
        if spec.kind != "performance":
            continue
        ratios = {"reference": reference.get(spec.name, []), "naive": naive.get(spec.name, []),
                  "draft": (draft or {}).get(spec.name, [])}
        task = spec.registered_task
        p = place(ratios["reference"], ratios["naive"], (spec.full_ratio, spec.zero_ratio),
                  task.lesson_ratio(task.defaults(spec.options)), ratios["draft"], spec.points, step)
        new = replace(spec, full_ratio=p.full_ratio, zero_ratio=p.zero_ratio)
        out.append({"test": spec.name, "points": spec.points, **ratios,
                    "old": [spec.full_ratio, spec.zero_ratio], "new": [p.full_ratio, p.zero_ratio],
                    **{f"{who}_points": [_points(spec, ratios[who], step, who == "draft"),
                                         _points(new, ratios[who], step, who == "draft")] for who in WHO},
                    "notes": list(p.notes)})
    return out


def table(records: list[dict], fmt: str = "simple") -> str:
    """Old and new thresholds side by side (``fmt``: a tabulate format; "github" for docs)."""
    def ratios(values):
        return " ".join("-" if r is None else f"{r:.2f}" for r in values) or "-"

    def pair(values):
        return " / ".join("-" if v is None else f"{v:g}" for v in values)

    def change(values):
        return "-" if values[0] is None else f"{values[0]:g} -> {values[1]:g}"

    body = [[r["test"], f"{r['points']:g}", *(ratios(r.get(who, [])) for who in WHO), pair(r["old"]),
             pair(r["new"]), *(change(r.get(f"{who}_points", [None])) for who in WHO), "; ".join(r["notes"])]
            for r in records]
    total = ["total", f"{sum(r['points'] for r in records):g}", *([""] * len(WHO)), "", ""]
    for who in WHO:
        got = [r[f"{who}_points"] for r in records if r.get(f"{who}_points", [None])[0] is not None]
        total.append(f"{sum(g[0] for g in got):g} -> {sum(g[1] for g in got):g}" if got else "-")
    body.append(total + [""])
    heads = ["test", "points", *(f"{LABEL[who]} ratios" for who in WHO), "old full / zero", "new full / zero",
             *(f"{LABEL[who]} points old -> new" for who in WHO), "note"]
    return tabulate(body, headers=heads, tablefmt=fmt, disable_numparse=True)


# ----------------------------------------------------------------------------- the rubric

def calibrated_rubric(text: str, rubric: Rubric, records: list[dict], calibrated_on: list[str],
                      toolchain: dict) -> str:
    """``text`` (the rubric ``rubric`` was loaded from) with the new thresholds,
    ``calibrated_on`` and ``toolchain``; every other byte kept. Raises RubricError if the
    result would not load."""
    index = {t.name: i for i, t in enumerate(rubric.tests)}
    values = {(("settings",), "calibrated_on"): calibrated_on, (("settings",), "toolchain"): toolchain}
    for r in records:
        for key, old, new in zip(("full_ratio", "zero_ratio"), r["old"], r["new"]):
            if not math.isclose(old, new):
                values[(("tests", index[r["test"]]), key)] = new
    new_text = set_values(text, values)
    parse_rubric(tomllib.loads(new_text), "the calibrated rubric", new_text)
    return new_text


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` at once: a reader sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _shown_path(path: Path) -> str:
    """``path`` relative to the repository, or its name alone when it lies elsewhere (a device's scratch folder)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return path.name


# ----------------------------------------------------------------------------- inputs

class InputError(Exception):
    """Bad input: one line for stderr, exit status 2."""


def read_results(path: str | Path) -> dict:
    """A results file, checked enough to calibrate from."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such results file") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{path}: not a results file: {e}") from None
    if (not isinstance(data, dict) or not isinstance(data.get("gpu"), str)
            or not CALIBRATION.fullmatch(f"{data['gpu']}, {data.get('date')}")):
        raise InputError(f"{path}: not a results file: it needs \"gpu\" and \"date\" (YYYY-MM-DD)")
    return data


def _timing_key(rubric: Rubric) -> str:
    """What of a rubric bears on a ratio: each performance test's shape and case, and the clock's
    settings; not the thresholds, so that a calibrated rubric still continues from the same grades."""
    data = [[t.name, list(t.shape), sorted(t.options.items())] for t in rubric.tests if t.kind == "performance"]
    data.append([rubric.settings.timed_batch_ms, rubric.settings.timing_rounds])
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:12]


def _sources(folder: Path) -> str:
    """A hash of the kernel files a calibration grades: recorded grades of other code are not reused."""
    digest = hashlib.sha256()
    for p in sorted(folder.glob("*.py")):
        digest.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def toolchain_of(record: dict, path) -> dict:
    """The torch, Triton (and numpy, where recorded) versions a results file's grades ran with."""
    versions = record.get("versions")
    versions = versions if isinstance(versions, dict) else {}
    out = {k: versions[k] for k in TOOLCHAIN_KEYS if isinstance(versions.get(k), str)}
    if not {"torch", "triton"} <= set(out):
        raise InputError(f"{path}: records no torch and triton versions (\"versions\"): the rubric must say "
                         "which toolchain its thresholds were placed with")
    return out


def one_toolchain(toolchains: list[tuple[str, dict]]) -> dict:
    """The one toolchain of several results files (numpy only where every file records it);
    InputError when they ran different ones: thresholds placed from both would fit neither."""
    first_path, first = toolchains[0]
    for path, other in toolchains[1:]:
        for k in ("torch", "triton"):
            if other[k] != first[k]:
                raise InputError(f"{path} ran {k} {other[k]}, {first_path} ran {first[k]}: calibrate from the "
                                 "runs of one toolchain")
    out = dict(first)
    if not all("numpy" in t for _, t in toolchains) or len({t.get("numpy") for _, t in toolchains}) > 1:
        out.pop("numpy", None)
    return out


def from_files(paths: list[str]) -> tuple[dict, list[str], dict]:
    """Ratios ({who: {test: [ratio per run]}}) of the reference, the tutorial-style
    kernels and the stub-plan drafts over every grade the files hold, a
    calibrated_on entry per file, and the toolchain they ran with."""
    ratios = {who: {} for who in WHO}
    places, toolchains = [], []
    for path in paths:
        record = read_results(path)
        found = {who: gpu_session.recorded_ratios(record, who) for who in WHO}
        if _lowest(r for rs in found["reference"].values() for r in rs) is None:
            raise InputError(f"{path}: no reference ratios: neither its grades nor its calibration timed "
                             "the reference")
        for who in WHO:
            for test, rs in found[who].items():
                ratios[who].setdefault(test, []).extend(rs)
        places.append(f"{record['gpu']}, {record['date']}")
        toolchains.append((path, toolchain_of(record, path)))
    return ratios, list(dict.fromkeys(places)), one_toolchain(toolchains)


def grade_here(args, rubric: Rubric, rubric_path: Path, log=print) -> tuple[dict, Path]:
    """Grade the reference and the tutorial-style kernels ``args.runs`` times
    each on this GPU, alternately, writing the results file after each grade.
    Returns the results record and its path."""
    head = gpu_session.session_record()
    short = gpu_session.short_gpu_name(head["gpu"]).lower()
    path = Path(args.results) if args.results else ROOT / "results" / f"{head['date']}-{short}.json"
    record = read_results(path) if path.exists() else head
    if record["gpu"] != head["gpu"]:
        raise InputError(f"{path}: holds runs of {record['gpu']}, not of this GPU ({head['gpu']}); "
                         "pass --results FILE")
    if toolchain_of(record, path) != toolchain_of(head, "this machine"):
        raise InputError(f"{path}: holds runs of torch {record['versions'].get('torch')}, triton "
                         f"{record['versions'].get('triton')}; this machine runs torch {head['versions']['torch']}, "
                         f"triton {head['versions']['triton']}: pass --results FILE")
    fingerprint = {"timing_key": _timing_key(rubric),
                   "sources": {who: _sources(ROOT / gpu_session.SUBMISSIONS[who]) for who in WHO}}
    old = record.get("calibration", {})
    if not args.fresh and all(old.get(k) == v for k, v in fingerprint.items()):
        grades = {who: [g for g in old.get("grades", {}).get(who, []) if "error" not in g] for who in WHO}
        if any(grades.values()):
            log(f"continuing from {path}: " + ", ".join(f"{len(grades[who])} {LABEL[who]}" for who in WHO)
                + " grades recorded (--fresh grades again)")
    else:
        grades = {who: [] for who in WHO}
    calibration = record["calibration"] = {"state": "incomplete", "runs": args.runs, "rubric_hash": rubric.hash,
                                           **fingerprint, "grades": grades}
    _write(path, json.dumps(record, indent=1) + "\n")
    started = _clock()
    with tempfile.TemporaryDirectory(prefix="calibrate-") as work:
        for i in range(args.runs):
            for who in WHO:
                if len(grades[who]) > i:
                    continue
                walls = [g["wall_s"] for g in grades[who]] or [g["wall_s"] for w in WHO for g in grades[w]] or [0]
                if args.budget_s and _clock() - started + max(walls) > args.budget_s:
                    log(f"stopping: another {LABEL[who]} grade (~{max(walls):.0f} s) would pass --budget-s "
                        f"{args.budget_s:g}")
                    return record, path
                log(f"grading the {LABEL[who]} kernels, run {i + 1} of {args.runs} ...")
                g = gpu_session.grade_submission(f"{who}-{i}", gpu_session.SUBMISSIONS[who], Path(work),
                                                 args=("--rubric", str(rubric_path.resolve())))
                grades[who].append(g)
                _write(path, json.dumps(record, indent=1) + "\n")
                log(f"  {g['error']}" if "error" in g else f"  score {g['score']:g} in {g['wall_s']:g} s")
    calibration["state"] = "complete"
    return record, path


# ----------------------------------------------------------------------------- command line

def _why_untimed(record: dict | None, path) -> str:
    graded = (record or {}).get("calibration", {}).get("grades", {}).get("reference", [])
    errors = [g["error"] for g in graded if "error" in g]
    if errors:
        return errors[0]
    if graded:
        scores = ", ".join(f"{g['score']:g}" for g in graded)
        return f"its grades scored {scores}, their notes are in {path}"
    return "no grade of it finished"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.calibrate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="from_files", nargs="+", metavar="RESULTS",
                   help="place the thresholds from recorded results files instead of grading here (no GPU needed)")
    p.add_argument("--runs", type=int, default=2, help="grades of each kernel set on this GPU (default 2, ~85 s each)")
    p.add_argument("--rubric", default=str(DEFAULT_RUBRIC),
                   help="the rubric to start from (default: grader/rubric.toml)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out", default="calibrated-rubric.toml",
                     help="where the calibrated rubric goes (default: calibrated-rubric.toml)")
    out.add_argument("--write", action="store_true", help="replace the --rubric file itself")
    p.add_argument("--results", default=None,
                   help="results file of this GPU's runs (default: results/<date>-<gpu>.json; an existing "
                        "file of the same GPU keeps its other entries)")
    p.add_argument("--fresh", action="store_true", help="grade again even where the results file has grades")
    p.add_argument("--budget-s", type=float, default=None,
                   help="start no grade that would end after this many seconds (the rest: run again)")
    return p


def main(argv=None, log=print) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.runs < 1:
            raise InputError("--runs must be at least 1")
        rubric_path = Path(args.rubric)
        rubric = load_rubric(rubric_path)
        if args.from_files:
            ratios, places, toolchain = from_files(args.from_files)
            record = path = None
            heading = f"placed from {', '.join(args.from_files)}"
        else:
            import torch

            if not torch.cuda.is_available():
                raise InputError("no CUDA GPU here: calibration grades on the GPU it is for (--from "
                                 "RESULTS.json ... places the thresholds from recorded runs)")
            record, path = grade_here(args, rubric, rubric_path, log)
            ratios = {who: gpu_session.recorded_ratios({"calibration": record["calibration"]}, who) for who in WHO}
            places = [f"{record['gpu']}, {record['date']}"]
            toolchain = toolchain_of(record, path)
            n = {who: len(record["calibration"]["grades"][who]) for who in WHO}
            heading = (f"graded on {record['gpu']}: " + ", ".join(f"{n[who]} {LABEL[who]}" for who in WHO)
                       + f" runs of {args.runs} asked")
    except (InputError, RubricError) as e:
        print(f"calibrate: {e}", file=sys.stderr)
        return 2
    if _lowest(r for rs in ratios["reference"].values() for r in rs) is None:
        print(f"calibrate: the reference was never timed ({_why_untimed(record, path)}); no rubric written",
              file=sys.stderr)
        return 1
    records = rows(rubric, *(ratios[who] for who in WHO))
    target = rubric_path if args.write else Path(args.out)
    text = calibrated_rubric(rubric_path.read_text(), rubric, records, places, toolchain)
    _write(target, text)
    changed = sum(not math.isclose(o, n) for r in records for o, n in zip(r["old"], r["new"]))
    log(heading)
    log(table(records))
    log(f"wrote {target}: {changed} of {2 * len(records)} thresholds changed, calibrated_on = {places}, "
        f"toolchain = {toolchain}")
    if record is not None:
        record["calibration"] |= {"calibrated_on": places[0], "toolchain": toolchain, "rule": RULE,
                                  "thresholds": records,
                                  "rubric_written": {"path": _shown_path(target), "hash": rubric_hash(text)}}
        _write(path, json.dumps(record, indent=1) + "\n")
        log(f"recorded in {path} (its calibration entry); python -m tools.render_results shows it in "
            "docs/grading.md")
        if record["calibration"]["state"] != "complete":
            log("not every run was graded: run the same command again to add the rest")
    if not args.write:
        log(f"grade with it: make grade GRADE_FLAGS=\"--rubric {target}\"; the same command with --write "
            f"replaces {rubric_path} instead (recorded grades are reused)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
