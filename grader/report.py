"""Write a GradeResult as Markdown, JSON and Gradescope results.json; print a table.

Much of the text in a result comes from the student's code: exception messages,
printed output, names in a zip, a file name. Wherever it is shown it is first
cleaned (no ANSI escapes or control characters, bounded length) and then
escaped for its format, so it reads as literal text: in report.md it cannot
close a code fence or render a heading, HTML or a link; in results.json tests
say ``output_format: "text"``; in the terminal it cannot move the cursor or
recolor the table.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import shlex
import tempfile
from pathlib import Path

from tabulate import tabulate

from . import estimate_report
from .estimate import load_targets, occupancy
from .rubric import Rubric
from .scoring import SCHEMA_VERSION, GradeResult, TaskResult, TestResult, points_lines

REPORT_FILES = ("report.md", "report.json", "results.json")
FILE_MODE, DIR_MODE = 0o640, 0o750   # reports: the owner and their group (course staff), not other users
REPORT_PLOTS = "roofline-*.png"   # beside them (grader/roofline.py)
MESSAGE_CHARS = 4000   # one test message, in report.md and results.json
LOG_CHARS = 2000       # the printed-output tail shown in report.md
INLINE_CHARS = 300     # one table cell or list item

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), and two-character escapes.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# C0/C1 controls except tab and newline, and the bidirectional overrides that reorder text.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Characters with a meaning in Markdown or HTML anywhere in a line.
_MD_INLINE = re.compile(r"([\\`*_\[\]<>&|~$#])")


def clean_text(text, limit: int = MESSAGE_CHARS, keep: str = "head") -> str:
    """``text`` as printable text: ANSI escapes and control characters removed
    (newlines and tabs kept), lone surrogates from undecodable file names
    written as ``\\udcXX``, at most ``limit`` characters (``keep`` the head or
    the tail; a cut is marked)."""
    text = text if isinstance(text, str) else str(text)
    text = text[: 4 * limit] if keep == "head" else text[-4 * limit:]  # bound the work first
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u2028", "\n").replace("\u2029", "\n")
    text = _CONTROL.sub("", _ANSI.sub("", text))
    if len(text) > limit:
        text = text[:limit] + " [... truncated]" if keep == "head" else "[truncated ...] " + text[-limit:]
    return text


def one_line(text, limit: int = INLINE_CHARS) -> str:
    """Cleaned text on one line (whitespace runs become one space)."""
    return " ".join(clean_text(text, 2 * limit).split())[:limit]


def md_inline(text, limit: int = INLINE_CHARS) -> str:
    """Text for a Markdown table cell or list item: one line, every character
    with a Markdown/HTML meaning backslash-escaped (so no emphasis, code, link,
    HTML tag, entity or table cell break), and a leading character that could
    start a block (``-``, ``+``, ``=``, ``>``, ``1.``) escaped too."""
    text = _MD_INLINE.sub(r"\\\1", one_line(text, limit))
    text = re.sub(r"^([-+=>])", r"\\\1", text)
    return re.sub(r"^(\d+)([.)])", r"\1\\\2", text)


def md_code(text, limit: int = INLINE_CHARS, table: bool = False) -> str:
    """Text as a Markdown code span, delimited by more backticks than any run
    inside; in a table cell, ``|`` is escaped too (GFM splits cells first)."""
    text = one_line(text, limit)
    text = text.replace("|", "\\|") if table else text
    ticks = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks} {text} {ticks}"


def md_block(text, limit: int = MESSAGE_CHARS, keep: str = "head") -> list[str]:
    """Text as a fenced code block whose fence is longer than any backtick run
    inside, so nothing in it can close the block."""
    text = clean_text(text, limit, keep).strip("\n")
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return [fence + "text", *text.split("\n"), fence]


def _fmt(x: float) -> str:
    return f"{x:g}"


def _bonus(task: TaskResult) -> str:
    return f"+{_fmt(task.bonus)} bonus" if task.bonus else ""


def _flag_text(flag) -> str:
    """A flag is a sentence, or a record ``{"kind": ..., "detail": ...}``."""
    if isinstance(flag, dict):
        return str(flag.get("detail") or flag.get("kind") or "")
    return str(flag)


def _first_line(msg: str, width: int = 90) -> str:
    lines = clean_text(msg, 4 * width).strip().splitlines()
    line = " ".join(lines[0].split()) if lines else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def toolchain_lines(result: GradeResult) -> list[str]:
    """The toolchain warnings as the terminal's first lines (grader/toolchain.py), or none."""
    return [f"toolchain: {one_line(w, 1000)}" for w in result.toolchain_warnings[:5]] + \
        ([""] if result.toolchain_warnings else [])


def terminal_table(result: GradeResult) -> str:
    """The terminal's summary, the toolchain warnings first (toolchain_lines)."""
    rows = [(one_line(t.name, 60), t.kind, f"{_fmt(t.score)}/{_fmt(t.max_score)}" + (" (bonus)" if t.bonus else ""),
             t.status, _first_line(t.message)) for t in result.tests]
    table = tabulate(rows, headers=["test", "kind", "points", "status", "detail"], tablefmt="simple")
    lines = [*toolchain_lines(result), table, ""]
    causes = [(t.name, line) for t in result.tests if t.status in ("failed", "partial")
              for line in clean_text(t.message).splitlines() if line.startswith("likely cause:")]
    for name, line in causes:   # the line that names the bug, whole (the table cuts the detail)
        lines.append(f"{one_line(name, 60)}: {one_line(line, 400)}")
    if causes:
        lines.append("")
    for task in result.tasks:
        lines.append(f"{one_line(task.task, 20):6s} {_fmt(task.score):>6}/{_fmt(task.max_score):<4} "
                     f"{_bonus(task):9s} {one_line(task.summary, 200)}")
        lines += [f"       check {one_line(c, 400)}" for c in task.checks_off]
    lines.append("")
    lines.append(f"TOTAL {_fmt(result.score)}/{_fmt(result.max_score)}: " + "; ".join(points_lines(result)))
    predicted = estimate_report.terminal_lines(result, one_line)
    if predicted:
        lines += ["", *predicted,
                  "(report.md, \"Predicted performance\": what bounds each kernel, and a roofline plot)"]
    lines += [f"note: {one_line(n, 500)}" for n in result.notes]
    return "\n".join(lines)


def result_from_json(data: dict) -> GradeResult:
    """The GradeResult a report.json holds (``write_reports`` wrote it with
    dataclasses.asdict), for printing it again: ``terminal_table(result_from_json(
    json.loads(text)))`` is the table the grade printed. Fields this version does
    not know are left out; ValueError when it is not a report."""
    def build(cls, value, what):
        if not isinstance(value, dict):
            raise ValueError(f"{what} is not an object")
        known = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in value.items() if k in known})
        except TypeError as e:   # a required field is missing
            raise ValueError(f"{what}: {e}") from None

    if not isinstance(data, dict) or not isinstance(data.get("tests"), list) \
            or not isinstance(data.get("tasks"), list):
        raise ValueError("not a report: no tests and tasks")
    fields = dict(data, tests=[build(TestResult, t, f"tests[{i}]") for i, t in enumerate(data["tests"])],
                  tasks=[build(TaskResult, t, f"tasks[{i}]") for i, t in enumerate(data["tasks"])])
    return build(GradeResult, fields, "report")


def markdown(result: GradeResult, error: str | None = None, plots: dict | None = None) -> str:
    """The human report. ``error``: the grader itself failed on this submission;
    ``plots``: each task's roofline plot file beside the report, or why there is none."""
    md = [f"# Grade report: {_fmt(result.score)} / {_fmt(result.max_score)}", ""]
    md += [f"> **Toolchain.** {md_inline(w, 1000)}" for w in result.toolchain_warnings[:5]]
    md += [""] if result.toolchain_warnings else []
    if error:
        md += [f"> **Grader error.** This submission could not be graded: {md_inline(error, 1000)}. "
               "The score is 0 until a TA regrades it.", ""]
    if result.partial:
        md += [f"> **Partial score.** Only tests that could run here were scored; the full "
               f"assignment is out of {_fmt(result.max_score_all_tests)}.", ""]
    md += [f"- Points: {'; '.join(points_lines(result))}"]
    md.append(f"- Submission: {md_code(result.submission)}")
    if not error:
        versions = ", ".join(f"{md_inline(k, 40)} {md_inline(v, 80)}" for k, v in result.versions.items() if v)
        reproduce = f"make grade SUBMISSION={shlex.quote(one_line(result.submission))} SEED={result.seed}"
        md += [f"- Device: {md_inline(result.gpu or 'CPU (Triton interpreter)', 100)}; {versions}"]
        if result.gpu and result.calibrated_on:
            md.append("- Performance thresholds calibrated on: "
                      + "; ".join(md_inline(c, 100) for c in result.calibrated_on[:10]))
        md += [
               f"- Graded: {md_inline(result.started, 40)} in {result.seconds:g} s",
               f"- Seed: `{result.seed}` (reproduce: {md_code(reproduce, 2 * INLINE_CHARS)})"]
    md.append("")
    md += [f"- {md_inline(n, 1000)}" for n in result.notes] + ([""] if result.notes else [])
    md += ["## Tasks", "", "| task | points | summary |", "|---|---|---|"]
    md += [f"| {md_inline(t.title, 80)} | {_fmt(t.score)} / {_fmt(t.max_score)} {_bonus(t)} | "
           f"{md_inline(t.summary)} |" for t in result.tasks]
    md += ["", "## Tests", "", "| test | points | status | detail |", "|---|---|---|---|"]
    details = []
    for t in result.tests:
        first = _first_line(t.message, 200)
        md.append(f"| {md_code(t.name, 100, table=True)}{' (bonus)' if t.bonus else ''} | {_fmt(t.score)} / "
                  f"{_fmt(t.max_score)} | {md_inline(t.status, 20)} | {md_inline(first, 220)} |")
        if " ".join(clean_text(t.message).split()) != first:  # more than the table shows
            details += ["", f"#### {md_code(t.name, 100)}", "", *md_block(t.message)]
    for task in result.tasks:
        if task.flags or task.checks_off or (task.log_tail.strip() and task.score < task.max_score):
            md += ["", f"### {md_inline(task.title, 80)}", ""]
            md += [f"- **{md_inline(_flag_text(f), 1000)}**" for f in task.flags]
            md += [f"- Check {md_inline(c, 1000)}" for c in task.checks_off]
            if task.log_tail.strip():
                md += ["", "Last lines your code printed:", "", *md_block(task.log_tail, LOG_CHARS, keep="tail")]
    md += compile_markdown(result)
    md += estimate_report.markdown(result, plots, md_inline, md_code)
    md += movement_markdown(result.tasks)
    if details:
        md += ["", "## Test details", *details]
    return "\n".join(md) + "\n"


def _occupancy(k: dict, target) -> str:
    if target is None or not k.get("ok") or k.get("registers") is None:
        return ""
    n, why = occupancy(k, target)
    hint = {"registers": f", {k['registers']} a thread: a smaller tile or more warps lowers it",
            "shared memory": ": fewer stages or a smaller BLOCK_K lowers it"}.get(why, "") if n <= 2 else ""
    return f"{n}/SM ({why}{hint})" if n else f"none ({why}{hint})"


def compile_markdown(result: GradeResult) -> list[str]:
    """The compile check's table: each kernel variant, the tests whose GPU shape
    launches it, its configuration and resources, and what would fail."""
    kernels = [(task, k) for task in result.tasks for k in task.kernels]
    if not kernels:
        return []
    targets = load_targets()
    target = next((t for t in targets if t.name == result.gpu), None) or next(
        (t for t in targets if any(t.name in c for c in result.calibrated_on)), None)
    md = ["", "## Kernels compiled for the GPU", "",
          "Every kernel variant your code launched, compiled for the course's GPU (on a CPU run: by Triton's "
          "compiler, without running it, with the specialization Triton gives the launch on the GPU). On a CPU "
          "run, *launched by* names the tests whose GPU shape launches the variant (your wrapper was called at "
          "that shape with its launches intercepted, nothing ran), then the tests whose small CPU shape "
          "launched the same variant in the interpreter: one compiled variant, two kinds of call. "
          "Occupancy: programs one multiprocessor holds at once"
          + (f" on the {md_inline(target.name, 40)}" if target else "") + ", and what limits them.", "",
          "| task | kernel | launched by | configuration | status | registers | spills | shared memory "
          "| occupancy | note |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for task, k in kernels:
        note = k.get("why_not") or k.get("warning") or k.get("note") or ""
        if k.get("launchable") is False and not k.get("why_not"):
            note = "will not launch"
        shared = k.get("shared_bytes")
        tests = ", ".join(k.get("tests") or [])
        cpu = ", ".join(t.split("/", 1)[-1] for t in k.get("cpu_tests") or [])
        where = "; ".join(x for x in (f"at the GPU shape of {tests}" if tests else "",
                                      f"run on the CPU by {cpu}" if cpu else "") if x)
        status = k.get("status", "?")
        if k.get("launchable") is False:
            status += ", will not launch"
        elif k.get("spills"):
            status += ", spills"
        md.append(f"| {md_inline(task.task, 20)} | {md_code(k.get('kernel', '?'), 60, table=True)} "
                  f"({md_inline(k.get('file', '?'), 60)}:{k.get('line', '?')}) | {md_inline(where, 400)} | "
                  f"{md_inline(k.get('variant', ''), 200)} | {md_inline(status, 40)} | "
                  f"{k.get('registers', '')} | {k.get('spills', '')} | "
                  f"{'' if shared is None else f'{shared / 1024:.1f} KiB'} | {md_inline(_occupancy(k, target), 100)} | "
                  f"{md_inline(note, 200)} |")
    return md


MOVEMENT_LABEL = ("an upper bound without caches, counted in the interpreter, not a predicted score")


def _count(value) -> int | None:
    """A count from a movement record as an int in [0, 10**18], or None (anything else)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10 ** 18:
        return None
    return value


def _number(value) -> str:
    n = _count(value)
    return "?" if n is None else str(n)


def _size(n) -> str:
    n = _count(n)
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _flops(n) -> str:
    n = _count(n)
    if n is None:
        return "?"
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} FLOP"


def _times(n, minimum) -> str:
    n, minimum = _count(n), _count(minimum)
    if n is None or not minimum:
        return ""
    return f"{n / minimum:.1f}x"


def _movement_task(task: TaskResult) -> list[str]:
    m = task.movement
    shape = m.get("shape")
    shape_text = " x ".join(_number(v) for v in shape) if isinstance(shape, list) else "?"
    md = ["", f"### {md_inline(task.title, 80)}: one call at M x N x K = {md_inline(shape_text, 60)}", ""]
    if m.get("error"):
        return md + [md_inline(m["error"], 500)]
    rows = [r for r in m.get("tensors", []) if isinstance(r, dict)] if isinstance(m.get("tensors"), list) else []
    inputs = [r for r in rows if _count(r.get("minimum")) and r.get("name") != "output"]
    # The large inputs (the weight, x): their re-reads are what costs time.
    large = [r for r in inputs if 16 * r["minimum"] >= sum(i["minimum"] for i in inputs)]
    launches = _count(m.get("launch_count"))
    line = (f"Moved {_size(m.get('moved'))}, {_times(m.get('moved'), m.get('minimum')) or '?'} the minimum "
            f"({_size(m.get('minimum'))}: every input read once, the output written once); "
            f"{_number(launches)} launch{'' if launches == 1 else 'es'}, {_number(m.get('programs'))} programs; "
            f"tl.dot {_flops(m.get('flops'))}, {_times(m.get('flops'), m.get('min_flops')) or '?'} "
            "the product's own (2 M N K; DDS: over the stored blocks).")
    if large:
        line += " " + "; ".join(f"{md_inline(r.get('name', '?'), 60)} read {_times(r.get('read'), r['minimum'])} "
                                "its minimum" for r in large) + "."
    md += [line, ""]
    if m.get("output_wrong"):
        md += [f"The output of this call was wrong ({md_inline(m['output_wrong'], 200)}).", ""]
    md += ["| tensor | minimum | read | written | moved / minimum |", "|---|---|---|---|---|"]
    for r in rows:
        minimum = _count(r.get("minimum"))
        moved = (_count(r.get("read")) or 0) + (_count(r.get("written")) or 0)
        md.append(f"| {md_code(r.get('name', '?'), 60, table=True)} | "
                  f"{_size(minimum) if minimum is not None else ''} | {_size(r.get('read'))} | "
                  f"{_size(r.get('written'))} | {_times(moved, minimum)} |")
    extra = {r.get("name") for r in rows} & {"scratch", "other"}
    if extra:
        md += ["", "; ".join(w for n, w in (
            ("scratch", "scratch: tensors your code allocated and gave its kernels (a workspace, a converted copy)"),
            ("other", "other: addresses inside no tensor of the call")) if n in extra) + "."]
    md += ["", "| kernel | grid | programs | loaded | stored | tl.dot FLOPs |", "|---|---|---|---|---|---|"]
    for k in m.get("launches", []) if isinstance(m.get("launches"), list) else []:
        if not isinstance(k, dict):
            continue
        grid = k.get("grid")
        grid = " x ".join(_number(g) for g in grid) if isinstance(grid, list) else "?"
        md.append(f"| {md_code(k.get('kernel', '?'), 60, table=True)} | {md_inline(grid, 60)} | "
                  f"{_number(k.get('programs'))} | {_size(k.get('loaded'))} | {_size(k.get('stored'))} | "
                  f"{_flops(k.get('flops'))} |")
    shown = len(m.get("launches", [])) if isinstance(m.get("launches"), list) else 0
    if launches is not None and launches > shown:
        md += ["", f"({launches - shown} more launches are counted in the totals, not listed.)"]
    return md


def movement_markdown(tasks: list[TaskResult]) -> list[str]:
    """The data-movement section: one small table per task that has a count."""
    counted = [t for t in tasks if isinstance(t.movement, dict) and t.movement]
    if not counted:
        return []
    md = ["", "## Data movement (counted in the CPU interpreter)", "",
          f"For one call per task: the bytes that `tl.load` and `tl.store` touched, one element per "
          f"lane whose mask is true (lanes that load the same address each count), atomics as a read "
          f"and a write, and the `tl.dot` FLOPs. This is {MOVEMENT_LABEL}: a GPU's caches serve many "
          f"of these bytes. The numbers are what your code's process reported about itself: "
          f"feedback only, they never change a score."]
    for task in counted:
        try:
            md += _movement_task(task)
        except Exception:  # noqa: BLE001 - a bad record costs its table, never the report
            md += ["", f"### {md_inline(task.title, 80)}", "", "(the data-movement record could not be shown)"]
    return md


def task_line(task: TaskResult) -> str:
    """A task's points and state in one line: a task that ran but lost points never reads as done."""
    state = one_line(task.summary)
    if task.status == "ok":
        state = ("none of its tests runs here" if task.max_score == 0 else
                 "every test passed" if task.score >= task.max_score else
                 "it ran, but no test passed: see the tests below" if task.score == 0 else
                 "it ran; some tests failed: see the tests below")
    return f"{one_line(task.task, 40)}: {_fmt(task.score)}/{_fmt(task.max_score)} {_bonus(task)}".rstrip() + \
        f": {state}"


def gradescope(result: GradeResult, error: str | None = None, report_dir: Path | None = None) -> dict:
    """Gradescope's results.json (https://gradescope-autograders.readthedocs.io/en/latest/specs/):
    only the fields that spec names; every output is plain text, cleaned and bounded.

    Performance tests that did not run here (no GPU, as on Gradescope) are left
    out with one line saying so, or listed with 0 points ("informational"),
    as the rubric's ``gradescope_performance`` says; they are never failures.
    A CPU run's speed estimate adds one entry per task, 0 of 0 points, in HTML
    (every text in it escaped), with the task's roofline plot from
    ``report_dir`` embedded when it is small (grader/estimate_report.py).
    """
    tests, elsewhere = [], 0.0
    for t in result.tests:
        entry = {"name": one_line(t.name, 200) + (" (bonus)" if t.bonus else ""), "score": t.score,
                 "max_score": t.max_score,
                 "status": "passed" if t.status == "passed" else "failed",
                 "output": clean_text(t.message), "output_format": "text", "visibility": t.visibility}
        if t.kind == "performance" and t.status == "not_run":
            elsewhere += t.max_score
            if result.gradescope_performance == "omit":
                continue
            entry.update(score=0.0, max_score=0.0, output=clean_text(
                f"informational: {t.message}; performance is graded separately on a GPU"))
            del entry["status"]
        tests.append(entry)
    reproduce = f"make grade SUBMISSION=<your folder> SEED={result.seed}"
    lines = [f"Toolchain: {one_line(w, 1000)}" for w in result.toolchain_warnings[:5]]
    if error:
        lines.append(f"Grader error: {one_line(error, 1000)}. The score is 0 until a TA regrades this "
                     "submission.")
    else:
        lines += [task_line(t) for t in result.tasks]
        lines += [f"{one_line(t.task, 40)}: check {one_line(c, 400)}" for t in result.tasks for c in t.checks_off]
        if elsewhere:
            lines.append(f"Performance ({elsewhere:g} points) is graded separately on a GPU; "
                         "this score is correctness only.")
    lines.append(f"Seed {result.seed} (to reproduce: {reproduce}).")
    if not error:
        tests += estimate_report.gradescope_entries(result, report_dir, one_line)
    return {"score": result.score, "execution_time": round(result.seconds),
            "output": clean_text("\n".join(lines)), "output_format": "text",
            "visibility": "visible", "stdout_visibility": "hidden",
            "extra_data": {"seed": result.seed, "rubric_hash": result.rubric_hash, "device": result.device},
            "tests": tests}


def error_result(rubric: Rubric, submission: str | Path, reason: str,
                 tasks: list[str] | None = None) -> GradeResult:
    """A zero-score result for a run the grader itself could not finish, so
    that every report format still exists and says why."""
    tasks = [t for t in (tasks or rubric.tasks) if t in rubric.tasks]
    why = f"not graded: grader error: {one_line(reason, 300)}"
    tests = [TestResult(name=s.name, task=s.task, kind=s.kind, score=0.0, max_score=s.points, status="failed",
                        message=why, visibility=s.visibility, bonus=s.bonus)
             for s in rubric.tests if s.task in tasks]
    task_results = [TaskResult(task=t, title=rubric.tasks[t].title, score=0.0, summary=why, status="grader_error",
                               max_score=sum(r.max_score for r in tests if r.task == t and not r.bonus))
                    for t in tasks]
    everything = sum(r.max_score for r in tests if not r.bonus)
    return GradeResult(
        schema_version=SCHEMA_VERSION, submission=str(submission),
        started=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), seconds=0.0,
        device="none", gpu=None, versions={}, seed=0, rubric=rubric.source, score=0.0,
        max_score=everything, max_score_all_tests=everything, partial=False,
        notes=[f"grader error: {one_line(reason, 1000)}"], tasks=task_results, tests=tests,
        hidden_points=sum(rubric.tasks[t].hidden_points for t in tasks), rubric_hash=rubric.hash)


def write_reports(result: GradeResult, report_dir: str | Path, error: str | None = None) -> Path:
    """Write the three files atomically: a reader never sees a half-written report.
    ``error`` marks a grader error: report.json gets ``grader_error``, and the
    Markdown and Gradescope outputs lead with it."""
    report_dir = Path(report_dir)
    if not report_dir.is_dir():
        report_dir.mkdir(parents=True, mode=DIR_MODE)
        os.chmod(report_dir, DIR_MODE)   # grades are personal: the owner's group (course staff) only
    data = dataclasses.asdict(result)
    # The toolchain warnings lead the file as they lead the other reports.
    data = {"toolchain_warnings": data.pop("toolchain_warnings"), **data}
    if error:
        data["grader_error"] = one_line(error, 1000)
    for old in report_dir.glob(REPORT_PLOTS):   # plots of an earlier grade
        old.unlink()
    plots = {} if error else estimate_report.draw_plots(result, report_dir)
    for plot in report_dir.glob(REPORT_PLOTS):
        os.chmod(plot, FILE_MODE)   # as personal as the report
    contents = {"report.md": markdown(result, error, plots),
                "report.json": json.dumps(data, indent=2),
                "results.json": json.dumps(gradescope(result, error, report_dir), indent=2)}
    for name, text in contents.items():
        fd, tmp = tempfile.mkstemp(dir=report_dir, prefix=f".{name}.")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, report_dir / name)
    return report_dir


def remove_reports(report_dir: str | Path) -> None:
    for name in REPORT_FILES:
        p = Path(report_dir) / name
        if p.is_file() or p.is_symlink():
            p.unlink()
    for p in Path(report_dir).glob(REPORT_PLOTS):
        if p.is_file() or p.is_symlink():
            p.unlink()
