"""Run a submission's tasks in sandboxed workers and bring back the facts (grader/facts.py).

Per task, two workers start side by side: one for the visible correctness
cases, one for the hidden ones (the visible worker never sees their shapes).
Each case is called on two fresh draws; every output is compared with the
reference here, while the inputs are at hand. The launched kernels are then
compiled for the GPU (a CPU run's compile check). If every scored case came
back clean, the visible worker times the performance tests. Last, a CPU run
counts one call's data movement (feedback only). Nothing here decides a
test's points: that is the judge's (grader/judge.py).

The harness runs workers and nothing else: it imports no other phase.
grader/grade.py runs the phases in order and hands ``run_tasks`` what it
applies without deciding: the static check's findings, the judge's rule for
what voids a task (whose performance is then not timed) and the judge's
allowance of values a wrapper may read into Python.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping

import torch

from ..compare import check_sanity, check_task_output
from ..diagnose import likely_cause, out_of_bounds
from ..facts import HIDDEN_CALL, CallResult, CaseRun, Draw, Runs, TaskRun, TimedRun, problem
from ..rubric import Rubric, TestSpec
from ..submission import Submission
from ..tasks import get
from ..tracebacks import explain_error, final_exception, known_error
from ..worker import fence
from . import capture, movement
from .measure import checked_call, timed_batches
from .session import FACTS_CHECK, Session, WorkerGone

DRAWS = 2   # fresh draws per correctness case: a kernel that keeps state between calls fails the second


def case_seed(master: int, test_name: str) -> int:
    """A per-test seed the worker can use without learning the master seed."""
    digest = hashlib.blake2b(f"{master}:{test_name}".encode(), digest_size=7).digest()
    return int.from_bytes(digest, "little")


def runs_here(spec: TestSpec, device: str) -> bool:
    return spec.shape_on(device) is not None


def run_tasks(sub: Submission, rubric: Rubric, device: str, seed: int, tasks: list[str], log=print,
              sanitizer: str | None = None, budget_s: float | None = None, *,
              static: Mapping[str, list[str]], voided: Callable[[TaskRun], bool], host_reads: int) -> Runs:
    """Run every task of ``tasks``; a grader failure in one task costs that task only.

    ``sanitizer``: compute-sanitizer's path (GPU): correctness under memcheck,
    nothing timed. ``budget_s``: the whole run's limit; each task's workers get
    an equal share of what is left when it starts. Handed in by grader/grade.py:
    ``static``, the static check's findings by task (each task's ``run.static``);
    ``voided(run)``, whether what the run found so far voids the task (then no
    performance test is timed); ``host_reads``, the values a checked call's
    wrapper may read into Python besides one per output row and column.
    """
    runs = Runs(device=device, seed=seed, tasks={}, sanitized=sanitizer is not None)
    if device == "cuda":
        from .timing import copy_bandwidth_gbs
        runs.bandwidth_gbs = copy_bandwidth_gbs()
    end = None if budget_s is None else time.monotonic() + budget_s
    checks_off = fence.probe(device)   # the worker's checks this Triton has no hooks for
    if sanitizer:
        checks_off["kernel trace"] = "compute-sanitizer instruments the GPU itself (the trace runs without --sanitize)"
    for i, task in enumerate(tasks):
        run = runs.tasks[task] = TaskRun(task=task, checks_off=dict(checks_off))
        share = None if end is None else max(1.0, (end - time.monotonic()) / (len(tasks) - i))
        try:
            _run_task(run, sub, rubric, runs, log, sanitizer, share, static.get(task, []), voided, host_reads)
        except Exception as e:  # a grader bug must cost one task, never the report
            run.error = f"grader error while grading {task}: {type(e).__name__}: {e}"
            log(run.error)
            runs.notes.append(run.error)
    return runs


def _run_task(run: TaskRun, sub: Submission, rubric: Rubric, runs: Runs, log, sanitizer, share,
              static: list[str], voided, host_reads: int) -> None:
    task, device = run.task, runs.device
    t = rubric.tasks[task]
    specs = rubric.tests_for(task)
    for spec in specs:
        if not runs_here(spec, device):
            run.not_run[spec.name] = ("needs a CUDA GPU" if spec.kind == "performance"
                                      else "no CPU shape in the rubric")
    if t.file not in sub.files:
        why = ("; ".join(sub.problems) if sub.unreadable else
               "; ".join(p for p in sub.problems if t.file in p) or f"{t.file} not found in the submission")
        run.missing = problem("unreadable" if sub.unreadable else "missing_file", why)
        log(f"{task}: {t.file} missing, not graded")
        return
    run.static = list(static)
    if _defines(sub.files[t.file], t.entry) is False:
        # The task's summary: the one thing to fix first is that the grader has nothing to
        # call. The static findings still flag the task (an entry built by exec is an attack).
        run.missing = problem("missing_entry", f"{t.file} defines no {t.entry}: the grader calls {t.entry}(...) "
                                               f"(the entry point of the stub in assignment/{t.file}); "
                                               "keep its name and arguments")
        log(f"{task}: {t.file} defines no {t.entry}, not graded")
        return
    timeout = rubric.settings.task_timeout_s if device == "cuda" else rubric.settings.cpu_task_timeout_s
    if share is not None:   # a whole-run budget (Gradescope): this task's share of it
        timeout = min(timeout, share)
    correctness = [s for s in specs if s.kind == "correctness" and runs_here(s, device)]
    performance = [s for s in specs if s.kind == "performance" and runs_here(s, device)]
    started = time.monotonic()
    groups = [[s for s in correctness if not s.hidden], [s for s in correctness if s.hidden]]
    sanitizer = sanitizer if device == "cuda" else None
    sessions, visible = [], None
    compiled: dict = {}   # the visible worker's compile results, by variant key: the hidden one reuses them
    try:
        # Both workers start at once: their imports (torch, CUDA) overlap.
        # The workers share nothing writable (no compile cache either): what the hidden
        # one learns cannot reach the visible one.
        off = set(run.checks_off)
        sessions = [Session(sub, t.file, t.entry, device, time.monotonic() + timeout, sanitizer=sanitizer,
                            checks_off=off) if group else None for group in groups]
        for hidden, (group, session) in enumerate(zip(groups, sessions)):
            if not group:
                continue
            # What the hidden tests' worker shows (its output, how it ended, the kernels it
            # compiled) reaches only those tests' own messages: their shapes stay unknown.
            log(f"{task}: {len(group)} correctness case(s) in a sandboxed worker ...")
            _check_import(run, session, bool(hidden))
            for spec in group:
                run.cases[spec.name] = _correctness(run, session, spec, runs, host_reads)
            # What the GPU will launch: the wrapper at the GPU shapes of these tests (and, in the
            # visible worker, of the performance tests a student sees), compiled with what the CPU
            # shapes launched. The hidden tests' GPU shapes go to the hidden worker only, and what it
            # captures and compiles reaches no table or estimate: their labels and shapes stay unknown.
            gpu_specs = group + ([] if hidden else [s for s in specs if s.kind == "performance" and not s.hidden])
            _compile_check(run, session, group, log, bool(hidden), gpu_specs, runs, compiled)
            if not hidden:
                visible = session   # times the performance tests
            else:
                session.close()
        if performance:
            # No visible cases: a fresh worker times the kernel (the hidden one has seen their shapes).
            if visible is None:
                visible = Session(sub, t.file, t.entry, device, time.monotonic() + timeout, checks_off=off)
                sessions.append(visible)
                _check_import(run, visible, False)
            _performance(run, rubric, performance, visible, timeout, runs, log, voided)
        _movement(run, t.movement_shape, visible, runs, log)   # last: nothing scored follows it
    finally:
        for session in sessions:
            if session is not None and session is not visible:
                session.close()
        if visible is not None:
            visible.close()
            run.log = visible.log_tail() + run.log
        if sanitizer:
            counts = [s.sanitizer_errors() for s in sessions if s is not None]
            run.memcheck_errors = sum(c or 0 for c in counts)
            run.memcheck_silent = None in counts
        run.seconds = time.monotonic() - started
    log(f"{task}: done in {run.seconds:.1f} s")


def _defines(source: bytes, name: str) -> bool | None:
    """Whether the module binds ``name`` at its top level (a def, a class, an assignment,
    an import, also inside a module-level if/try/with); None if it does not parse
    (its import reports that, with the line)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None

    def binds(body) -> bool:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return True
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                    return True
            if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                    (a.asname or a.name.split(".")[0]) == name or a.name == "*" for a in node.names):
                return True
            if isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                inner = list(node.body) + list(getattr(node, "orelse", []))
                inner += [n for h in getattr(node, "handlers", []) for n in h.body]
                inner += list(getattr(node, "finalbody", []))
                if binds(inner):
                    return True
        return False

    return binds(tree.body)


def _stop(run: TaskRun, kind: str, detail: str, hidden: bool = False) -> None:
    """A worker is of no more use; the first reason is the one reported."""
    if hidden:
        run.hidden_stopped = run.hidden_stopped or problem(kind, detail)
    elif run.stopped is None:
        run.stopped = problem(kind, detail)


def _stopped(run: TaskRun, hidden: bool) -> dict | None:
    return run.hidden_stopped if hidden else run.stopped


def _checks_off(run: TaskRun, found: dict | None, hidden: bool) -> None:
    """Add the checks a worker says it could not start or keep on (what it says can
    only turn a check off, and the report says so). What the hidden tests' worker
    says reaches those tests' own messages only (``hidden_checks_off``): whether a
    check went off there could tell a student about a hidden shape."""
    for check, why in (found or {}).items():
        if check not in fence.CHECKS or check == FACTS_CHECK:   # only the worker's own checks fence.py names
            continue
        _check_off(run, check, f"the worker: {why}", hidden)


def _off(run: TaskRun, hidden: bool) -> dict:
    """The checks off for a worker's calls: the task's, and for the hidden tests' worker its own too."""
    return {**run.checks_off, **run.hidden_checks_off} if hidden else run.checks_off


def _check_off(run: TaskRun, check: str, why: str, hidden: bool) -> None:
    """A check of fence.CHECKS that did not run (or not whole) for this task: every report says
    which and why; for the hidden tests' worker, those tests' own messages (shown after the
    due date) and the runs file do, and nothing a student reads before."""
    (run.hidden_checks_off if hidden else run.checks_off).setdefault(check, why)


def _check_import(run: TaskRun, session: Session, hidden: bool) -> None:
    """Record why the worker is of no use if the kernel file did not import."""
    try:
        hello = session.hello
    except WorkerGone as e:
        _stop(run, e.kind, str(e), hidden)
        return
    _checks_off(run, hello.get("checks_off"), hidden)
    # The import is the same in both workers and comes before any shape: what it started is
    # the task's, whichever worker showed it.
    run.import_changes += [c for c in session.import_changes() if c not in run.import_changes]
    for s in (session, session.executor):
        if s is not None and s.facts_off:
            _check_off(run, FACTS_CHECK, f"not read: {s.facts_off}", hidden)
    if not hello["ok"]:
        _stop(run, "import_error", "the kernel file could not be imported:\n"
              + explain_error(hello.get("error", "")), hidden)
    elif session.executor is not None:   # CPU: the executor builds the file's kernels alone (kernels_only.py)
        try:
            built = session.executor.hello
        except WorkerGone as e:
            _stop(run, e.kind, str(e), hidden)
            return
        if not built["ok"]:
            _stop(run, "import_error", "the kernels could not be loaded to run on the CPU (a kernel is held to "
                  "Triton's language there): " + final_exception(built.get("error", "")), hidden)


def _correctness(run: TaskRun, session: Session, spec: TestSpec, runs: Runs, host_reads: int) -> CaseRun:
    """The case on DRAWS fresh draws, stopping at the first that is not clean."""
    case = CaseRun(spec.name)
    shape = spec.shape_on(runs.device)
    seed = case_seed(runs.seed, spec.name)
    task = get(run.task)
    for draw in range(DRAWS):
        if _stopped(run, spec.hidden):
            break
        args, extras = task.make_inputs(shape, spec.options, seed + draw, runs.device)
        result = checked_call(session, f"case{len(run.calls)}", args, (shape[0], shape[1]), label=spec.name)
        # A wrapper may prepare (a cast, a pad): about the activations and the output once.
        result.work_limit = shape[0] * shape[1] + sum(args[i].numel() for i in task.activation_args)
        _checks_off(run, result.evidence.get("checks_off"), spec.hidden)
        off = _off(run, spec.hidden)
        result.traced = runs.device == "cuda" and "kernel trace" not in off
        # A wrapper may read a few values into Python (a count, a block row's bounds), never the data.
        result.read_limit = host_reads + shape[0] + shape[1]
        if result.status == "gone":
            _stop(run, result.kind, result.message, spec.hidden)
        d = _draw(run.task, result, args, extras)
        result.output, result.configs = None, []   # the evidence stays, the tensors go
        run.calls.append((HIDDEN_CALL if spec.hidden else spec.name, result))
        case.draws.append(d)
        if not d.clean:
            break
    return case


def _draw(task: str, result: CallResult, args: tuple, extras: dict) -> Draw:
    """The facts of one checked call: its comparison with the reference, the likely cause."""
    d = Draw(result.status, result.message, result.kind, stray_write=result.stray_write)
    outside = result.evidence.get("outside") or {}
    if outside.get("loads") or outside.get("stores"):
        d.outside = {**outside, "tensor": argument_name(task, outside.get("tensor", ""))}
    d.race = result.evidence.get("race") or None
    if result.status != "ok":
        return d
    ref_slack = get(task).reference_and_slack(args)   # computed once: the check and the diagnosis share it
    d.check = check_task_output(result.output, task, args, ref_slack)
    d.configs = result.configs_checked
    for config, output in result.configs if d.check.passed else ():
        # CPU: every autotune config's output is checked, since the GPU's autotuner may pick any.
        check = check_task_output(output, task, args, ref_slack)
        if not check.passed:
            check.message = f"with autotune config {config}: {check.message}"
            d.check, result.output = check, output
            break
    if not d.check.passed:
        d.cause = likely_cause(task, result.output, args, ref_slack[0])
        if d.cause is None and d.outside:
            d.cause = out_of_bounds(task, d.outside)
        return d
    d.sanity = check_sanity(result.output, args[0], extras["weight"], task)
    return d


def argument_name(task: str, key: str) -> str:
    """The name of the argument a bounds-check key stands for ("0" -> "x", "1.values" ->
    "weight_bsr.values()", "scratch" -> "a tensor the wrapper made"); "" when not known."""
    if key == "scratch":
        return "a tensor the wrapper made"
    head, _, part = key.partition(".")
    names = get(task).arg_names
    if not head.isdigit() or int(head) >= len(names):
        return ""
    parts = {"crow": "crow_indices()", "col": "col_indices()", "values": "values()"}
    return names[int(head)] + (f".{parts.get(part, part)}" if part else "")


def _compile_check(run: TaskRun, session: Session, group: list, log, hidden: bool, gpu_specs: list,
                   runs: Runs, compiled: dict) -> None:
    """Compile for the target GPU what the worker launched, in two passes: first what the CPU
    shapes' calls launched, so that a capture that fails, or ends the worker, leaves them
    compiled; then (a CPU run) what the wrapper launches at the GPU shapes of ``gpu_specs``,
    captured in between. A kernel that would not compile or launch there fails exactly the
    tests whose launches it serves, as on the GPU (``_compile_verdicts``). The report's table
    shows the visible worker's kernels only. ``compiled``: results by variant key, filled by
    the visible worker's check and reused by the hidden one's (never the other way)."""
    off = _off(run, hidden)
    if "compile check" in off or not any(r.status == "ok" for _, r in run.calls):
        return   # off and said so; or no call came back right, and no test it serves can pass
    if _stopped(run, hidden):
        stopped = _stopped(run, hidden)["detail"].splitlines() or ["?"]
        _check_off(run, "compile check", f"not run: the worker had ended ({stopped[0][:200]})", hidden)
        return
    left = session.deadline - time.monotonic()
    if left < 15:
        _check_off(run, "compile check", f"not run: {max(left, 0):.0f} s of the task's time limit were left",
                   hidden)
        return
    log(f"{run.task}: compiling the launched kernels for the GPU (sm_90) ...")
    rows = _compile(run, session, hidden, compiled, left, gpu_only=False)
    captured: set[str] = set()   # the tests whose GPU shape was captured whole
    left = session.deadline - time.monotonic()
    gpu_shapes = runs.device == "cpu" and any(s.shape for s in gpu_specs)
    if rows is None:
        stopped = _stopped(run, hidden) or {"detail": "?"}
        _check_off(run, "compile check", f"not run: the worker ended ({stopped['detail'].splitlines()[0][:200]})",
                   hidden)
    elif gpu_shapes and "launch capture" not in off and left <= capture.MIN_LEFT_S:
        _check_off(run, "launch capture", f"not run: {max(left, 0):.0f} s of the task's time limit were left",
                   hidden)
    elif gpu_shapes and "launch capture" not in off:
        log(f"{run.task}: calling the wrapper at the GPU shapes, launches intercepted ...")
        found = capture.capture(session, run.task, gpu_specs, min(capture.BUDGET_S, left / 3))
        _checks_off(run, found.pop("checks_off", None), hidden)
        if not hidden:
            run.capture = found
        cases = found.get("cases", {}) if "gone" not in found else {}
        captured = {name for name, c in cases.items() if not c.get("error")}
        if "error" in found:   # the worker could not capture, or its reply ended it
            _check_off(run, "launch capture", found["error"] + (" (the worker was ended)" if "gone" in found
                                                                 else ""), hidden)
        elif len(captured) < len(cases):
            failed = sorted(name for name in cases if name not in captured)
            first = (cases[failed[0]].get("error") or "").strip().splitlines()
            _check_off(run, "launch capture", f"incomplete: the wrapper failed when called at the GPU shape of "
                       f"{', '.join(failed)} ({first[-1][:200] if first else '?'}); those tests are judged by "
                       "what their CPU shapes launched", hidden)
        if cases:
            left = session.deadline - time.monotonic()
            log(f"{run.task}: compiling what the GPU shapes launch ...")
            more = _compile(run, session, hidden, compiled, left, gpu_only=True) if left >= 15 else None
            if more is None:
                captured = set()   # nothing of the GPU shapes compiled: the CPU shapes' launches decide
                _check_off(run, "launch capture", "what the GPU shapes launch was captured but not compiled: " +
                           ("the worker ended" if _stopped(run, hidden) else
                            f"{max(left, 0):.0f} s of the task's time limit were left"), hidden)
            else:
                rows = _merged(rows, more)
    if rows is None:
        return
    if not hidden:
        run.kernels.extend(rows)
    _compile_verdicts(run, rows, group, captured, hidden)


def _compile(run: TaskRun, session: Session, hidden: bool, compiled: dict, left: float, gpu_only: bool):
    """One compile request: the worker's rows, or None when the worker is gone. What the visible
    worker compiled goes into ``compiled``, for the hidden one's next requests and its own."""
    try:
        reply = session.request({"op": "compile", "budget_s": min(90.0, left - 10), "gpu_only": gpu_only,
                                 "known": dict(compiled)})
    except WorkerGone as e:
        _stop(run, e.kind, str(e), hidden)
        return None
    rows = reply.get("compile", [])
    if not hidden:
        compiled.update({r["key"]: {k: r.get(k) for k in ("status", "registers", "spills", "shared_bytes", "error",
                                                          "loop", "num_warps")}
                         for r in rows if r.get("key") and r.get("checked") and r.get("status") in ("ok", "error")})
    return rows


def _merged(cpu_rows: list[dict], gpu_rows: list[dict]) -> list[dict]:
    """The second pass's rows (what the GPU shapes launch, with the CPU shapes' launches of the
    same kernel and arguments merged in), then the first pass's variants that only the CPU
    shapes launched, then the notes of both."""
    merged_ids = {i for r in gpu_rows for i in r.get("ids") or []}
    variants = [r for r in gpu_rows if r.get("ids")]
    for r in cpu_rows:
        if r.get("ids") and not set(r["ids"]) & merged_ids:
            r["note"] = "; ".join(n for n in ("launched at the CPU shapes only (the GPU shapes launch other "
                                              "variants)", r.get("note")) if n)
            variants.append(r)
    notes, seen = [], set()
    for r in cpu_rows + gpu_rows:
        # the second pass counts the CPU shapes' variants as not compiled: the first pass compiled them
        if not r.get("ids") and r.get("note") not in seen and "CPU shapes only" not in r.get("note", ""):
            seen.add(r.get("note"))
            notes.append(r)
    return variants + notes


def _compile_verdicts(run: TaskRun, rows: list[dict], group: list, captured: set[str], hidden: bool) -> None:
    """A variant that would not compile or launch fails exactly the tests it serves, as on the GPU:
    a test whose GPU shape was captured whole, by what that shape launches (its ``tests``); any
    other test of the group, by what its CPU shape launched (``cpu_tests``) or what its GPU shape
    launched before its capture stopped; a launch outside every test (at import) fails them all,
    as an import that fails would on the GPU. A performance test that only a GPU shape launches
    the variant for gets it in ``gpu_launch_errors``."""
    bad = [r for r in rows if r.get("ids") and (r.get("status") == "error" or r.get("launchable") is False)]
    if not bad:
        return

    def why(r, where: str = ""):
        if r.get("status") == "error":
            hint = known_error(r.get("error", ""))
            return f"compile error for the GPU{where}: {r.get('error', '')}" + (f"\n{hint}" if hint else "")
        return f"would not launch on the GPU{where}: kernel {r.get('kernel')} {r.get('why_not', '')}"

    unlabelled = [r for r in bad if not r.get("tests") and not r.get("cpu_tests")]
    if unlabelled:
        for spec in group:
            run.cases[spec.name].compile_error = why(unlabelled[0])
        _stop(run, "compile_error", why(unlabelled[0]), hidden)
        return
    names = {spec.name for spec in group}
    for spec in group:
        name = spec.name
        at_gpu = [r for r in bad if name in (r.get("tests") or [])]
        at_cpu = [] if name in captured else [r for r in bad if name in (r.get("cpu_tests") or [])]
        if at_cpu:
            run.cases[name].compile_error = why(at_cpu[0])
        elif at_gpu:
            run.cases[name].compile_error = why(at_gpu[0], " at this test's GPU shape")
    for r in bad:   # tests this worker did not run: the performance tests, whose GPU shape launches it
        for name in r.get("tests") or []:
            if name not in names and not hidden:
                run.gpu_launch_errors.setdefault(name, why(r))


def scored_cases_clean(run: TaskRun, rubric: Rubric, device: str) -> bool:
    """Whether every scored (not bonus) correctness case that runs here came back
    clean on all its draws, and would compile for the GPU."""
    for spec in rubric.tests_for(run.task, "correctness"):
        if spec.bonus or not runs_here(spec, device):
            continue
        case = run.cases.get(spec.name)
        if case is None or case.compile_error or not case.draws or not all(d.clean for d in case.draws) \
                or len(case.draws) < DRAWS:
            return False
    return True


def _performance(run: TaskRun, rubric: Rubric, specs: list[TestSpec], session, timeout: float, runs: Runs,
                 log, voided: Callable[[TaskRun], bool]) -> None:
    """Time the performance tests, only for a task whose scored cases came back clean and that
    nothing voids (``voided``: the judge's rule, handed in by grader/grade.py)."""
    if runs.sanitized:
        run.untimed = "correctness ran under compute-sanitizer"
        return
    if session is None or not scored_cases_clean(run, rubric, runs.device) or voided(run):
        run.untimed = ("performance counts only for a kernel that passes all of this task's correctness "
                       "tests")
        return
    session.deadline = time.monotonic() + timeout
    s = rubric.settings
    for i, spec in enumerate(specs):
        timed = run.timed[spec.name] = TimedRun(spec.name)
        if run.stopped:
            timed.error = "not timed: " + run.stopped["detail"]
            continue
        log(f"{run.task}: timing {spec.name} ...")
        try:
            timed.timing = timed_batches(session, f"timed{i}", run.task, spec.shape, spec.options,
                                         case_seed(runs.seed, spec.name), s.timing_rounds, s.timed_batch_ms,
                                         more_rounds=lambda tm, spec=spec: borderline(spec, tm, s),
                                         extra_rounds=s.borderline_rounds)
        except WorkerGone as e:
            _stop(run, e.kind, str(e))
            timed.error = f"while timed: {e}"
            continue
        run.calls.append((spec.name, CallResult("ok", evidence=timed.timing.evidence)))
        torch.cuda.empty_cache()


def borderline(spec: TestSpec, timing, settings) -> bool:
    """Within ``borderline_margin`` of a threshold: measure more rounds before the score is fixed."""
    if not timing.kernel_ms:
        return False
    return any(abs(timing.ratio / r - 1) < settings.borderline_margin
               for r in (spec.full_ratio, spec.zero_ratio) if r)


def _movement(run: TaskRun, shape, session, runs: Runs, log) -> None:
    """Count one call's data movement in the interpreter (CPU runs; feedback only)."""
    if (runs.device != "cpu" or shape is None or session is None or run.stopped
            or "data movement" in run.checks_off or not any(r.status == "ok" for _, r in run.calls)):
        return
    if session.deadline - time.monotonic() < 20:
        run.movement = {"shape": list(shape), "error": "not counted: the task's time limit is near"}
        return
    log(f"{run.task}: counting data movement at {list(shape)} in the interpreter ...")
    session.deadline = min(session.deadline, time.monotonic() + movement.TIMEOUT_S)
    run.movement = movement.measure(session, "movement", run.task, shape, {},
                                    case_seed(runs.seed, f"{run.task}/movement"))
