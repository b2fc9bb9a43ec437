"""Verdicts on what the harness brought back (grader/facts.py). Trusted side only.

``judge(runs, rubric)`` runs pytest over grader/tests/test_kernels.py, one
test per rubric entry: each test asks ``verdict()`` for its entry and asserts
it. pytest-json-report's output is then read back: a test's outcome and its
recorded verdict are what the scores are made of (grader/scoring.py), so a
verdict is reached exactly once, inside its test. A test that pytest could not
run or that broke is that entry's grader error, never a missing line.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .diagnose import outside_words
from .facts import HIDDEN_CALL, CallResult, Draw, Runs, TaskRun, Timing, problem
from .rubric import Rubric, Settings, TestSpec
from .staticcheck import forbidden_message
from .tracebacks import explain_error, final_exception, known_error
from .worker.evidence import LIBRARY_MATMUL_OPS
from .worker.fence import sentence

TESTS_DIR = Path(__file__).with_name("tests")


@dataclass
class Verdict:
    """The outcome of one test: ``fraction`` of its points (None: not run here) and why."""
    passed: bool
    message: str
    fraction: float | None = 0.0
    details: dict = field(default_factory=dict)


@dataclass
class TaskJudgment:
    """What voids a task as a whole, and its one-line state for the reports."""
    problems: list[dict]   # problem() records: why the task gets no points
    status: str            # a kind: ok, not_implemented, missing_file, import_error, timeout, ...
    summary: str           # the sentence a student reads


@dataclass
class Judgment:
    tests: dict[str, Verdict]
    tasks: dict[str, TaskJudgment]


def not_run(why: str) -> Verdict:
    return Verdict(False, f"not run: {why}", None)


# ----------------------------------------------------------------------------- whole tasks

# What a student reads when a hidden test's call voids the task: one finding, in fixed words,
# whatever the call did (a library matmul, inputs written, no kernel of its own, ...) and however
# many kinds of problem it showed. Which sentences appeared would otherwise tell a student, run
# after run, a few bits about the hidden shapes. The kinds stay in the hidden tests' own messages
# (shown after the due date) and in the runs file (--runs-out), for the TA.
HIDDEN_KIND = "hidden_call"
HIDDEN_DETAIL = ("a hidden test broke the rules: its call did something that section 10 of the handout "
                 "forbids (which, the hidden tests' own messages say after the due date)")
RULE = "the product must be computed by the Triton kernel (handout, section 10, rule 1)"
# Values a checked call's wrapper may read from tensors into Python numbers, besides one per
# row and per column of the output (grade.py hands it to the harness, which sets each call's
# limit): a count, a size, a block row's bounds. A product computed in Python reads every
# element of x and the weight.
HOST_READS = 64
# Threads, processes and libraries of the worker, read by the harness from /proc (grader/harness/osfacts.py).
STARTED_KIND = "started_threads"
STARTED = ("started a thread, a process or a library: a kernel file computes in its kernels, called on the "
           "grader's thread, and starts no thread, process or library of its own (handout, section 10, rule 3)")


def _call_flags(name: str, r: CallResult, off) -> list[dict]:
    """Reasons in one call's evidence that void the task (``off``: checks that did not run)."""
    ev, flags = r.evidence, []
    if ev.get("library_matmuls"):
        flags.append(problem("library_matmul", f"library matmul: {name} ran PyTorch op(s) "
                             f"{ev['library_matmuls']} instead of computing the product in Triton"))
    if r.status == "ok" and "launch record" not in off and not ev.get("own_launches"):
        foreign = ev.get("foreign_launches") or []
        flags.append(problem("no_triton_kernel", f"no Triton kernel: {name} launched no Triton kernel of "
                             "the submission" + (f" (only {foreign})" if foreign else "")))
    if ev.get("oversized_ops"):
        flags.append(problem("computed_outside_triton", f"computed outside Triton: {name} built PyTorch "
                             f"tensors larger than any input or output: {ev['oversized_ops'][:3]}"))
    if r.work_limit and ev.get("torch_elements", 0) > r.work_limit:
        where = f" (issued at {'; '.join(ev['torch_sites'])})" if ev.get("torch_sites") else ""
        flags.append(problem("computed_outside_triton", f"computed outside Triton: in {name} PyTorch ops "
                             f"computed {ev['torch_elements']} elements, more than the activations and the "
                             f"output hold ({r.work_limit}){where}: {RULE}"))
    if r.read_limit and ev.get("host_reads", 0) > r.read_limit:
        flags.append(problem("computed_outside_triton", f"computed outside Triton: in {name} the wrapper read "
                             f"{ev['host_reads']} values of tensors into Python numbers (.item(), float(t), "
                             f"int(t), a tensor in an if), more than the {r.read_limit} a wrapper may read (a "
                             f"count, a size, not the data): {RULE}"))
    if r.traced and "kernel trace" not in off:
        flags += _trace_flags(name, r, ev.get("trace"))
    if r.inputs_modified:
        flags.append(problem("inputs_modified", f"inputs modified: {name} wrote into input(s) "
                             f"{r.inputs_modified}"))
    if r.appeared:
        flags.append(problem(STARTED_KIND, f"{STARTED}: after {name} the grader found in the worker "
                             f"{'; '.join(r.appeared)}, which were not there after the kernel file was imported"))
    return flags


def _trace_flags(name: str, r: CallResult, trace: dict | None) -> list[dict]:
    """What the kernel trace of a GPU call says against it (grader/worker/trace.py): only
    the submission's Triton kernels may compute, and at least one of them must run."""
    if trace is None:
        return [problem("no_triton_compute", f"no Triton kernel computed the output: the kernel trace of "
                        f"{name} did not come back")] if r.status == "ok" else []
    flags = []
    ops = trace.get("torch_ops") or []
    library = [op for op in ops if op.split("::")[-1] in LIBRARY_MATMUL_OPS]
    if library:
        flags.append(problem("library_matmul", f"library matmul: in {name} PyTorch op(s) {library} ran on the "
                             "GPU instead of the product being computed in Triton"))
    others = [op for op in ops if op not in library]
    if others or trace.get("foreign"):
        what = "; ".join(part for part in (
            f"PyTorch op(s) {others}" if others else "",
            f"kernels of no PyTorch op {trace['foreign'][:3]}" if trace.get("foreign") else "") if part)
        flags.append(problem("no_triton_compute", f"no Triton kernel computed the output: in {name} kernels that "
                             f"are not the submission's ran on the GPU: {what} (on the GPU a wrapper may "
                             f"allocate, copy, convert and view, nothing more): {RULE}"))
    elif r.status == "ok" and not trace.get("own"):
        flags.append(problem("no_triton_compute", f"no Triton kernel computed the output: in {name} no kernel "
                             "of the submission ran on the GPU (the kernel trace)"))
    return flags


def task_flags(calls: list[tuple[str, CallResult]], off=(), hidden_off=()) -> list[dict]:
    """Reasons that void the whole task, from the worker's own evidence.

    The worker could hide such evidence, never invent points with it: these
    flags can only take points away (docs/integrity.md). ``off``: the checks
    that did not run (fence.py), whose evidence is not asked for (``hidden_off``:
    those that did not run in the hidden tests' worker only). Whatever the
    hidden tests' calls did, they add one finding in fixed words (HIDDEN_KIND,
    HIDDEN_DETAIL): what they did, their sizes and names stay out of every
    report a student reads before the due date.
    """
    flags, hidden = [], False
    for name, r in calls:
        found = _call_flags(name, r, {*off, *hidden_off} if name == HIDDEN_CALL else off)
        if name == HIDDEN_CALL:
            hidden = hidden or bool(found)
        else:
            flags += found
    seen, unique = set(), []
    for f in flags:  # one line per kind of problem is enough
        if f["kind"] not in seen:
            seen.add(f["kind"])
            unique.append(f)
    if hidden:
        unique.append(problem(HIDDEN_KIND, HIDDEN_DETAIL))
    return unique


def voids_task(run: TaskRun) -> bool:
    """Whether what a task's run has found so far voids the task: forbidden code, or a call's
    evidence (``task_flags``). The harness times no performance test of such a task
    (grader/grade.py hands it this rule)."""
    return bool(run.static) or bool(run.import_changes) \
        or bool(task_flags(run.calls, run.checks_off, run.hidden_checks_off))


def hidden_kinds(calls: list[tuple[str, CallResult]], off=()) -> list[str]:
    """The kinds of problem the hidden tests' calls showed (for those tests' own messages;
    ``off``: the checks off for them)."""
    kinds = []
    for name, r in calls:
        if name == HIDDEN_CALL:
            kinds += [f["kind"] for f in _call_flags(name, r, off) if f["kind"] not in kinds]
    return kinds


def task_problems(run: TaskRun, file: str) -> list[dict]:
    """Everything that voids the task: forbidden code, memory errors, then the calls' evidence."""
    found = []
    if run.static:
        found.append(problem("forbidden_code", forbidden_message(file, run.static)))
    if run.memcheck_errors:
        found.append(problem("memory_errors", f"memory errors: compute-sanitizer reported "
                             f"{run.memcheck_errors} out-of-bounds or invalid accesses (the printed "
                             "output below names them)"))
    elif run.memcheck_silent:
        found.append(problem("memory_errors", "memory errors not ruled out: compute-sanitizer printed no "
                             "summary for a worker (it was ended before it could)"))
    if run.import_changes:
        found.append(problem(STARTED_KIND, f"{STARTED}: importing the kernel file added to the worker "
                             + "; ".join(run.import_changes)))
    return found + task_flags(run.calls, run.checks_off, run.hidden_checks_off)


def task_state(run: TaskRun, problems: list[dict]) -> tuple[str, str]:
    """(status kind, summary) of a task: what a student sees first."""
    if run.missing:
        return run.missing["kind"], run.missing["detail"]
    if run.error:
        return "grader_error", run.error
    results = [r for _, r in run.calls]
    errors = [r.message for r in results if r.status == "error"]
    if errors and len(errors) == len(results) and all("NotImplementedError" in e for e in errors):
        return "not_implemented", "not implemented (the stub raises NotImplementedError)"
    if problems:
        return problems[0]["kind"], "no points: " + problems[0]["detail"].split(":")[0]
    if run.stopped:
        return run.stopped["kind"], run.stopped["detail"]
    if results and len(errors) == len(results):
        return "raised", "every call raised an exception"
    return "ok", "ran to completion"


# ----------------------------------------------------------------------------- one test

def _outside_of(outside: dict) -> str:
    """Where the bounds check's lanes were: past the tensor their pointer came from, by name."""
    tensor = outside.get("tensor")
    if tensor:
        return f"outside {tensor}, the tensor its pointer was derived from"
    return "outside every tensor it was given"


def race_words(race: dict) -> str:
    """A cross-program race (worker/races.py) in a sentence that names the kernel, the programs
    and the tensor, and says why the interpreter's right answer does not carry to a GPU."""
    if race.get("kind") == "too many":
        return (f"kernel {race.get('kernel', '?')} touched more bytes of the tensors the wrapper made in one launch "
                "than the CPU grade's race record holds, so it cannot rule out that two of its programs share an "
                "element without an atomic (the interpreter runs programs one after another, a GPU at the same "
                "time); the CPU tests' shapes need far fewer: does a launch loop over a whole large buffer?")
    if race.get("kind") == "input":
        place = str(race.get("tensor", "?"))
        return (f"kernel {race.get('kernel', '?')} stores into the call's input (argument {place}, counting from 0); "
                "the inputs are read-only. A value a program leaves in an input for another program to read is "
                "a race the interpreter hides (it runs programs one after another, a GPU at the same time), and "
                "the caller's tensors must come back as they were given: write to a tensor the wrapper allocates")
    where = "the output" if race.get("tensor") == "out" else "a tensor the wrapper made"
    first = tuple(race.get("program") or ())
    other = tuple(race.get("other") or ())
    if race.get("kind") == "store":
        what = f"programs {first} and {other} of one launch both store to the same element of {where}"
    else:
        what = f"program {first} stores to an element of {where} that program {other} of the same launch loads"
    return (f"kernel {race.get('kernel', '?')}: {what}, with no atomic. The interpreter runs a launch's programs "
            "one after another, so the result here follows their order; a GPU runs them at the same time, in no "
            "order, and the result is undefined (lost updates, stale reads). Give each output element one "
            "program that writes it, combine partial results with tl.atomic_add, or split the work into two "
            "launches")


def _draw_verdict(d: Draw) -> Verdict:
    if d.status == "error":
        # The first line (the report's table) names the exception; the frame follows.
        if d.kind == "not_compiled":   # the gate refused it: nothing ran, the compiler's words follow
            # The frame (explain_error) names the kernel and its line.
            message = (f"does not compile for the GPU: {final_exception(d.message)}\n"
                       "not run: the CPU grade runs only kernels that compile for the GPU\n"
                       + explain_error(d.message))
        else:
            message = f"raised {final_exception(d.message)}\n" + explain_error(d.message)
        hint = known_error(d.message)
        if hint:
            message += f"\n{hint}"
        if d.outside:
            message += f"\n(before that, kernel {d.outside['kernel']} {outside_words(d.outside)} " \
                       f"{_outside_of(d.outside)}: a load or store without its mask?)"
        return Verdict(False, message)
    if d.status == "gone" and d.kind == "crashed":
        return Verdict(False, f"{d.message}: a load or store outside its tensors (a missing mask?) can crash "
                              "the process, in the interpreter as on a GPU")
    if d.status != "ok" or d.check is None:   # gone, unusable
        return Verdict(False, d.message)
    c = d.check
    details = {"max_abs_err": c.max_abs_err, "max_rel_err": c.max_rel_err, "bad_elements": c.bad}
    if not c.passed:
        return Verdict(False, c.message + (f"\n{d.cause}" if d.cause else "")
                       + (f"\n(also: {race_words(d.race)})" if d.race else ""), details=details)
    if d.stray_write:
        return Verdict(False, "wrote outside its output tensor (a store with a missing mask?)", details=details)
    if d.outside:
        return Verdict(False, f"the output is right, but kernel {d.outside['kernel']} {outside_words(d.outside)} "
                              f"{_outside_of(d.outside)} (the interpreter masked those lanes off; on a GPU they "
                              "read or write another tensor's memory, or fault): a load or store without its "
                              "mask on a ragged edge?", details=details)
    if d.race:
        return Verdict(False, "the output is right in the interpreter, but " + race_words(d.race), details=details)
    if d.sanity is None or not d.sanity.passed:
        return Verdict(False, d.sanity.message if d.sanity else "no sanity check", details=details)
    configs = f"; every autotune config checked ({d.configs})" if d.configs > 1 else ""
    return Verdict(True, f"{c.message}; {d.sanity.message}{configs}", 1.0, details)


def correctness_verdict(spec: TestSpec, run: TaskRun) -> Verdict:
    case = run.cases.get(spec.name)
    if case is None or not case.draws:
        stopped = run.hidden_stopped if spec.hidden else run.stopped
        why = stopped["detail"] if stopped else (run.error or "grader error: the case did not run")
        return Verdict(False, why)
    for i, draw in enumerate(case.draws):
        verdict = _draw_verdict(draw)
        if not verdict.passed:
            if draw.race and draw.check is not None and draw.check.passed:
                pass   # a race, whichever draw's data showed it: its message says all
            elif i and draw.status == "ok":   # a wrong answer the second time, not a crash
                verdict.message = ("the first call passed, the second on fresh inputs failed "
                                   "(does the kernel keep state between calls?): " + verdict.message)
            elif i:
                verdict.message = "the first call passed, the second failed: " + verdict.message
            return verdict
    if case.compile_error:
        return Verdict(False, "passed in the interpreter, but " + case.compile_error)
    return verdict


def ratio_fraction(spec: TestSpec, ratio: float) -> float:
    frac = (ratio - spec.zero_ratio) / (spec.full_ratio - spec.zero_ratio)
    return min(1.0, max(0.0, frac))


def timing_verdict(spec: TestSpec, timing: Timing, bandwidth_gbs: float, settings: Settings) -> Verdict:
    """Score from the ratio of the baseline's per-call time to the kernel's."""
    t = statistics.median(timing.kernel_ms)
    base = statistics.median(timing.baseline_ms)
    ratio = base / t
    details = {"kernel_ms": t, "baseline_ms": base, "ratio": ratio, "rounds": len(timing.kernel_ms),
               "fixed_ms": statistics.median(timing.fixed_ms) if timing.fixed_ms else 0.0,
               "calls_per_batch": timing.calls, "weight_sets": timing.weight_sets,
               "cuda_graph": timing.graph}
    if timing.wrong:
        return Verdict(False, f"the output of a timed call is wrong: {timing.wrong}", details=details)
    floor_ms = spec.registered_task.minimum_bytes(spec.shape, spec.options) / (bandwidth_gbs * 1e9) * 1e3
    details["memory_floor_ms"] = floor_ms
    if t < settings.memory_floor_trust * floor_ms:
        return Verdict(False, f"timed at {t * 1e3:.1f} us, below the memory floor of {floor_ms * 1e3:.1f} us "
                              "(bytes that must move / measured bandwidth): the timing is not trusted",
                       details=details)
    frac = ratio_fraction(spec, ratio)
    msg = (f"{t * 1e3:.1f} us vs torch.matmul fp16 {base * 1e3:.1f} us per call: ratio {ratio:.2f} "
           f"(full credit at {spec.full_ratio:g}, none at {spec.zero_ratio:g})")
    if not timing.graph:
        msg += ("; timed eagerly, host overhead included: the calls could not be captured in a CUDA "
                f"graph ({timing.note})")
    return Verdict(frac > 0, msg, frac, details)


def performance_verdict(spec: TestSpec, run: TaskRun, runs: Runs, settings: Settings) -> Verdict:
    if runs.sanitized:
        return not_run("correctness ran under compute-sanitizer")
    timed = run.timed.get(spec.name)
    if timed is None:
        why = run.untimed or (run.stopped or {}).get("detail") or run.error or "grader error: not timed"
        return Verdict(False, "not timed: " + why)
    if timed.error or timed.timing is None:
        return Verdict(False, timed.error or "grader error: no timing")
    voided = timing_void(run)
    if voided:
        return Verdict(False, voided)
    return timing_verdict(spec, timed.timing, runs.bandwidth_gbs, settings)


def timing_void(run: TaskRun) -> str:
    """Why none of the task's timings counts, or "": a thread, process or library appeared in
    the worker around one of its timed runs (measure.py reads them before each round's first
    probe and after its run): something besides the timed calls may have run on the clock."""
    for name, timed in run.timed.items():
        if timed.timing is not None and timed.timing.appeared:
            return (f"timing void: {STARTED}; around the timed runs of {name} the grader found in the worker "
                    + "; ".join(timed.timing.appeared))
    return ""


def verdict(spec: TestSpec, runs: Runs, rubric: Rubric) -> Verdict:
    """The one verdict of a rubric entry, task problems applied."""
    run = runs.tasks.get(spec.task)
    if run is None:
        return Verdict(False, "grader error: the task did not run")
    if spec.name in run.not_run:
        return not_run(run.not_run[spec.name])
    if run.missing:
        return Verdict(False, run.missing["detail"])
    if spec.kind == "correctness":
        v = correctness_verdict(spec, run)
    else:
        v = performance_verdict(spec, run, runs, rubric.settings)
    if v.fraction is None:
        return v
    found = task_problems(run, rubric.tasks[spec.task].file)
    if found:
        message = "no points for this task: " + "; ".join(f["detail"] for f in found)
        if spec.hidden and any(f["kind"] == HIDDEN_KIND for f in found):   # shown after the due date only
            off = {**run.checks_off, **run.hidden_checks_off}
            message += f" (the hidden tests' calls: {', '.join(hidden_kinds(run.calls, off))})"
        v = Verdict(False, message, 0.0, v.details)
    if spec.hidden and run.hidden_checks_off:   # shown after the due date only
        v.message += "\n" + "\n".join("in the hidden tests' worker, check " + sentence(check, why)
                                       for check, why in sorted(run.hidden_checks_off.items()))
    return v


# ----------------------------------------------------------------------------- pytest

class Judging:
    """What the graded pytest tests see (the ``grading`` fixture)."""

    def __init__(self, runs: Runs, rubric: Rubric):
        self.runs, self.rubric = runs, rubric

    def selected_tests(self) -> list[TestSpec]:
        """The rubric's entries for the tasks that ran, correctness first."""
        order = {"correctness": 0, "performance": 1}
        chosen = [t for t in self.rubric.tests if t.task in self.runs.tasks]
        return sorted(chosen, key=lambda t: order[t.kind])

    def verdict(self, spec: TestSpec) -> Verdict:
        return verdict(spec, self.runs, self.rubric)

    @staticmethod
    def recorded(v: Verdict) -> dict:
        """A verdict as the graded test records it: JSON data for the report."""
        return asdict(v)


def judge(runs: Runs, rubric: Rubric) -> Judgment:
    """Every selected rubric entry's verdict, reached in its pytest test, and each task's state."""
    judging = Judging(runs, rubric)
    reported = _run_pytest(judging)
    tests = {}
    for spec in judging.selected_tests():
        tests[spec.name] = _from_report(spec, reported.get(spec.name))
    tasks = {}
    for name, run in runs.tasks.items():
        found = task_problems(run, rubric.tasks[name].file)
        tasks[name] = TaskJudgment(found, *task_state(run, found))
    return Judgment(tests, tasks)


def _from_report(spec: TestSpec, entry: dict | None) -> Verdict:
    """A test's verdict from pytest-json-report's record of it: its outcome, and the
    verdict it recorded before asserting it."""
    if entry is None:
        return Verdict(False, f"grader error: test {spec.name} did not run under pytest")
    recorded = {}
    for prop in entry.get("user_properties", []):
        if isinstance(prop, dict) and isinstance(prop.get("verdict"), dict):
            recorded = prop["verdict"]
    outcome = entry.get("outcome")
    if not recorded:
        crash = ((entry.get("call") or entry.get("setup") or {}).get("crash") or {}).get("message", "")
        return Verdict(False, f"grader error: test {spec.name} {outcome or 'broke'}: {crash}".rstrip(": "))
    message, details = str(recorded.get("message", "")), recorded.get("details") or {}
    if outcome == "skipped":
        return Verdict(False, message, None, details)
    if outcome == "passed":
        return Verdict(True, message, float(recorded.get("fraction") or 0.0), details)
    return Verdict(False, message, 0.0, details)


def _run_pytest(judging: Judging) -> dict[str, dict]:
    """Run grader/tests with the json-report plugin; {test name: its json record}.

    Only this process's own plugin and pytest-json-report are loaded: no
    conftest.py, no plugin found by entry point or in a folder.
    """
    import pytest

    from .pytest_plugin import GradingPlugin

    autoload = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "pytest.json"
            pytest.main([str(TESTS_DIR / "test_kernels.py"), "-q", "-p", "no:cacheprovider",
                         "--noconftest", "-p", "pytest_jsonreport.plugin", "--no-header", "--tb=no",
                         "-rN", "--json-report", f"--json-report-file={report}",
                         "--rootdir", str(TESTS_DIR), "-c", str(TESTS_DIR / "pytest.ini")],
                        plugins=[GradingPlugin(judging)])
            data = json.loads(report.read_text()) if report.exists() else {"tests": []}
    finally:
        if autoload is None:
            os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = autoload
    return {t["nodeid"].split("[", 1)[-1][:-1]: t for t in data.get("tests", []) if "[" in t.get("nodeid", "")}
