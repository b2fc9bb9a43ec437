"""The harness's two measurements of a worker: a checked call, and a timed, checked batch.

Both run in the trusted grading process. The inputs are the harness's own
(drawn from a seed the worker never sees), the outputs are read out of the
harness's arena, and every output is checked here against a reference
computed here. The clock is the harness's: host time around a batch of calls
that the worker runs as one CUDA graph, less the fixed cost of such a run
(``worker_fixed_s``), with nothing the worker's submission reports or runs
in it. The clock times the calls only: each call writes an output of its
own, and the worker copies those outputs into the arena after the clock has
stopped, from the very run that was timed; then every one of them is checked.
"""

from __future__ import annotations

import math
import time

import torch

from ..compare import check_task_output
from ..facts import CallResult, Timing
from ..tasks import get
from ..worker.graphs import capture, one_kernel_graph
from . import osfacts
from .arena import Arena, Plan
from .session import Session, WorkerGone

# GPU memory one timed batch may hold, both processes together: per call the
# arena's activations and output slot, the harness's private activations, the
# baseline's output and the output the worker's call writes. At most half the
# GPU's free memory, so that a smaller card still grades (with shorter batches).
MAX_TIMED_BYTES = 40 << 30
MAX_CALLS = 1024
# Timed probes per round; the least is the fixed cost taken off the round's batch. At most
# FIXED_SHARE of a batch's time is taken off, whatever a probe measured.
PROBES = 3
FIXED_SHARE = 0.5


def checked_call(session: Session, name: str, args: tuple, out_shape, label: str | None = None) -> CallResult:
    """Put ``args`` in a new arena, have the worker call the kernel once, read the output.
    ``label``: the test the call belongs to (the compile check names its kernels by it).
    On the CPU the worker sees shapes only and the executor runs its program (``_shape_call``)."""
    plan = Plan()
    specs = [plan.arg(a) for a in args]
    out_spec = plan.output(out_shape)
    arena = Arena(plan, session.device, name)
    if session.executor is not None:
        return _shape_call(session, name, arena, args, specs, out_spec, label)
    try:
        mapped = session.map(name, arena)
        if not mapped["ok"]:
            return CallResult("error", "the worker could not map its inputs:\n" + mapped.get("error", "?"))
        msg = {"op": "call", "arena": name, "args": specs, "out": out_spec}
        if label:
            msg["label"] = label
        reply = session.request(msg)
    except WorkerGone as e:
        return CallResult("gone", str(e), kind=e.kind)
    evidence = reply.get("evidence", {})
    if not reply["ok"]:
        if "returned" in reply:
            return CallResult("unusable", reply["returned"], evidence=evidence)
        return CallResult("error", reply.get("error", "?"), evidence=evidence)
    modified = [i for i, (a, s) in enumerate(zip(args, specs)) if not _same(a, arena.arg(s))]
    return CallResult("ok", output=arena.view(out_spec).clone(), evidence=evidence,
                      inputs_modified=modified, stray_write=bool(arena.guards_broken()))


def _appeared(session: Session) -> list[str]:
    """CPU: the threads, processes and libraries that appeared in the worker and in its executor
    since they imported the kernel file, read by this process after the call (osfacts.py). Their
    warm-ups started what an honest call would. (A GPU call loads Triton's launcher of each new
    kernel signature: there the timed runs are watched instead, ``timed_rounds``.)"""
    found = session.changes_since_import()
    if session.executor is not None:   # its gate starts the GPU compiler's front end as a process of its own
        found += [f"{c} (in the executor)" for c in session.executor.changes_since_import(processes=False)]
    return found


MAX_CONFIGS = 16   # autotune configs checked per call (every one a GPU autotuner may pick)
EXECUTOR_EVIDENCE = ("outside", "checks_off", "race")


def _shape_call(session: Session, name: str, arena, args, specs, out_spec, label) -> CallResult:
    """A CPU checked call: the worker calls the wrapper on shape-only tensors and sends back its
    program (worker/shapes.py); the executor, which alone holds the inputs, carries it out
    once per autotune config (worker/executor.py). The outputs of configs after the first
    travel in ``CallResult.configs`` and are checked like the first."""
    msg = {"op": "call", "args": specs, "out": out_spec}
    if label:
        msg["label"] = label
    try:
        reply = session.request(msg)
    except WorkerGone as e:
        return CallResult("gone", str(e), kind=e.kind)
    evidence = reply.get("evidence", {})
    if not reply["ok"]:
        if "returned" in reply:
            return CallResult("unusable", reply["returned"], evidence=evidence, appeared=_appeared(session))
        return CallResult("error", reply.get("error", "?"), evidence=evidence, appeared=_appeared(session))
    program = reply.get("program") or {}
    configs = program_configs(program)
    outputs = []
    try:
        mapped = session.executor.map(name, arena)
        if not mapped["ok"]:
            return CallResult("error", "the executor could not map its inputs:\n" + mapped.get("error", "?"))
        for k in range(len(configs) or 1):
            if k:
                arena.view(out_spec).fill_(float("nan"))
            done = session.executor.request({"op": "execute", "arena": name, "args": specs, "out": out_spec,
                                             "program": program, "choice": k})
            # What the executor saw (the bounds check); the launches are the worker's.
            ran = done.get("evidence", {})
            # The first config's race stays: every config's launches are judged, any one suffices.
            evidence = {**evidence, **{k: ran[k] for k in EXECUTOR_EVIDENCE
                                       if k in ran and not (k == "race" and k in evidence)}}
            if not done["ok"]:
                where = f"with autotune config {configs[k]} ({k + 1} of {len(configs)}): " if configs else ""
                kind = "not_compiled" if done.get("kind") == "not_compiled" else ""
                return CallResult("error", where + done.get("error", "?"), kind=kind, evidence=evidence)
            outputs.append(arena.view(out_spec).clone())
        session.executor.request({"op": "release", "arena": name})
    except WorkerGone as e:
        return CallResult("gone", str(e), kind=e.kind, evidence=evidence)
    modified = [i for i, (a, s) in enumerate(zip(args, specs)) if not _same(a, arena.arg(s))]
    return CallResult("ok", output=outputs[0], evidence=evidence, inputs_modified=modified,
                      stray_write=bool(arena.guards_broken()),
                      configs=list(zip(configs[1:], outputs[1:])), configs_checked=len(configs),
                      appeared=_appeared(session))


def program_configs(program: dict) -> list[str]:
    """The autotune configs a CPU call's program holds (worker/shapes.py ``choice`` steps), in
    words: the call is carried out once per config. Read defensively (the worker sent it)."""
    best: list[str] = []

    def walk(steps, depth: int) -> None:
        nonlocal best
        if not isinstance(steps, list) or depth > 4:
            return
        for step in steps[:10000]:
            if isinstance(step, dict) and isinstance(step.get("branches"), list):
                branches = [b for b in step["branches"] if isinstance(b, dict)]
                names = [f"{step.get('choice')}: {b.get('config')}"[:200] for b in branches]
                if len(names) > len(best):
                    best = names
                for b in branches:
                    walk(b.get("steps"), depth + 1)

    walk(program.get("steps"), 0)
    return best[:MAX_CONFIGS]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.layout == torch.sparse_bsr:
        return all(torch.equal(x, y) for x, y in ((a.crow_indices(), b.crow_indices()),
                                                  (a.col_indices(), b.col_indices()),
                                                  (a.values(), b.values())))
    return torch.equal(a, b)


def _batch_size(task, shape, inputs, batch_ms: float) -> tuple[int, int]:
    """(calls, weight sets): enough calls for ``batch_ms`` of baseline work, and
    enough distinct weights that a batch cannot run out of the L2 cache.

    The baseline's per-call time is measured as it will be timed (a CUDA
    graph of back-to-back calls), not eagerly: an eager estimate of a
    microsecond-scale decode call is launch overhead, which would leave
    batches so short that one worker round trip weighs on the result.
    """
    args, extras = inputs
    act = get(task).activation_args
    set_bytes = sum(_bytes(a) for i, a in enumerate(args) if i not in act)
    call_bytes = 2 * sum(_bytes(args[i]) for i in act) + 3 * 2 * shape[0] * shape[1]
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    sets = max(1, min(16, math.ceil(3 * l2 / max(set_bytes, 1))))
    x, wt = args[0], extras["weight"].t()
    out = torch.empty((shape[0], shape[1]), dtype=torch.float16, device="cuda")
    probe = 16

    def calls_():
        for _ in range(probe):
            torch.matmul(x, wt, out=out)

    graph = capture(calls_)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3 / probe)
    est_ms = min(times)
    del graph
    calls = max(sets, min(MAX_CALLS, math.ceil(batch_ms / max(est_ms, 1e-4))))
    budget = min(MAX_TIMED_BYTES, torch.cuda.mem_get_info()[0] // 2)
    calls = max(1, min(calls, budget // max(call_bytes, 1)))
    return calls, sets


def _bytes(t: torch.Tensor) -> int:
    if t.layout == torch.sparse_bsr:
        return sum(_bytes(p) for p in (t.crow_indices(), t.col_indices(), t.values()))
    return t.numel() * t.element_size()


def timed_batches(session: Session, name: str, task: str, shape, options: dict, seed: int,
                  rounds: int, batch_ms: float, more_rounds=None, extra_rounds: int = 4) -> Timing:
    """Time the worker's kernel against fp16 torch.matmul on the same inputs.

    One batch is ``calls`` back-to-back calls: call j gets fresh activations
    of its own and weight set j mod ``sets``. Each round refreshes every
    activation, times the baseline's batch (a CUDA graph in this process),
    then the worker's batch (the worker's CUDA graph, replayed on command),
    and checks every output of the worker's batch (``timed_rounds``).
    ``more_rounds(timing)`` may ask for up to ``extra_rounds`` more rounds
    (scores near a threshold).
    """
    registered = get(task)
    first = registered.make_inputs(shape, options, seed + 1, "cuda")
    calls, nsets = _batch_size(task, shape, first, batch_ms)
    act = registered.activation_args
    sets = [first] + [registered.make_inputs(shape, options, seed + 1 + r, "cuda") for r in range(1, nsets)]
    plan = Plan()
    set_specs = [[plan.arg(a) if i not in act else None for i, a in enumerate(args)] for args, _ in sets]
    private = []   # the harness's own activations of each call, refreshed every round
    batch = []
    for j in range(calls):
        args = sets[j % nsets][0]
        mine = {i: args[i].clone() for i in act}
        private.append(mine)
        specs = [set_specs[j % nsets][i] if i not in act else {"tensor": plan.tensor(mine[i])}
                 for i in range(len(args))]
        batch.append({"args": specs, "out": plan.output((shape[0], shape[1]))})
    arena = Arena(plan, "cuda", name=name)
    timing = Timing(calls=calls, weight_sets=nsets)
    mapped = session.map(name, arena)
    if not mapped["ok"]:
        raise WorkerGone("the worker could not map the timed inputs:\n" + mapped.get("error", "?"))
    ready = session.request({"op": "prepare", "arena": name, "calls": batch})
    if not ready["ok"]:
        raise WorkerGone("raised an exception while timed:\n" + ready.get("error", "?"), "raised")
    timing.graph, timing.note = ready.get("graph", False), ready.get("note", "")
    timing.evidence = ready.get("evidence", {})

    # The baseline: the same calls on the same inputs, fp16 weights, each into an output of its own.
    weights = [extras["weight"].t() for _, extras in sets]
    base_out = torch.empty((calls, shape[0], shape[1]), dtype=torch.float16, device="cuda")

    def baseline():   # on the harness's private activations: nothing the worker can write
        for j in range(calls):
            torch.matmul(private[j][act[0]], weights[j % nsets], out=base_out[j])

    base_graph = capture(baseline)
    out_specs = [c["out"] for c in batch]

    def refresh(r: int) -> None:
        for j, mine in enumerate(private):
            registered.fresh_activations(mine, (seed + 1 + r * calls + j) % 2**62)
            for i in act:
                arena.view(batch[j]["args"][i]["tensor"]).copy_(mine[i])
        arena.reset_outputs(out_specs)
        torch.cuda.synchronize()

    empty_graph, _cell = one_kernel_graph()   # the harness's side of the fixed cost

    def replayed_s(graph) -> float:
        t0 = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def time_baseline() -> tuple[float, float]:
        fixed = min(replayed_s(empty_graph) for _ in range(PROBES))
        return replayed_s(base_graph), fixed

    try:
        return timed_rounds(session, timing, rounds, refresh, time_baseline,
                            lambda: _first_wrong(arena, batch, sets, private, task, shape, act),
                            more_rounds, extra_rounds, facts=None if session.facts_off else session)
    finally:
        release(session, name)


def release(session: Session, name: str) -> None:
    """Have the worker drop arena ``name`` and the batch on it, so that the memory of
    one timed test is free for the next (the harness drops its side when the arena
    goes). A worker that is gone has nothing left to drop."""
    try:
        session.request({"op": "release", "arena": name})
    except WorkerGone:
        pass


def timed_rounds(session, timing: Timing, rounds: int, refresh, time_baseline, check,
                 more_rounds=None, extra_rounds: int = 4, facts=None) -> Timing:
    """The rounds of a timed test, appended to ``timing``.

    Each round: ``refresh(r)`` (fresh activations, output slots reset), the
    baseline's batch (``time_baseline()``: its seconds and the harness's
    fixed cost of a one-kernel graph, seconds), then the worker's: the clock
    runs from the "run" command to the worker's reply, which comes after its
    calls and a device-wide synchronize, and nothing else; the fixed cost
    of such a run, measured just before (``worker_fixed_s``), is taken off.
    Then the worker copies the outputs of that very run into the arena
    ("collect"), outside the clock, and ``check()`` reads every one of them
    (the first wrong one, in words, or ""). A worker that cannot collect its
    outputs (they share memory, or are not plain tensors) has timed calls
    without an output of their own: they count as wrong.

    ``facts`` (the session, when its worker's threads and libraries are read):
    before each round's first probe and after its run, this process reads them
    (grader/harness/osfacts.py). Any thread, process or library that appears
    from the first such reading to the end of the last run, and any thread or
    process that appeared since the kernel file was imported, is recorded in
    ``timing.appeared``: something besides the timed calls could have run during
    the probes or the run (the judge voids the task's timing).
    """
    calls = timing.calls
    first = None
    r = 0
    while r < rounds or (more_rounds and r < rounds + extra_rounds and more_rounds(timing)):
        refresh(r)
        base_s, base_fixed = time_baseline()
        timing.baseline_fixed_ms.append(base_fixed * 1e3)
        timing.baseline_ms.append(_less_fixed(base_s, base_fixed) * 1e3 / calls)
        if facts is not None:
            now = facts.snapshot()
            if first is None:
                first = now
                _record(timing, "since the kernel file was imported", osfacts.changes(
                    facts.after_import, now, libraries_too=False))
            _record(timing, "during the timed runs", osfacts.changes(first, now))
        fixed = worker_fixed_s(session)
        timing.fixed_ms.append(fixed * 1e3)
        t0 = time.perf_counter()
        ran = session.request({"op": "run"})
        timing.kernel_ms.append(_less_fixed(time.perf_counter() - t0, fixed) * 1e3 / calls)
        if facts is not None:
            _record(timing, "during the timed runs", osfacts.changes(first, facts.snapshot()))
        collected = session.request({"op": "collect"})
        if timing.wrong:
            pass
        elif not ran["ok"]:
            timing.wrong = "a timed call raised an exception:\n" + ran.get("error", "?")
        elif not collected["ok"]:
            timing.wrong = collected.get("returned") or ("the outputs of the timed calls could not be "
                                                         "collected:\n" + collected.get("error", "?"))
        else:
            timing.wrong = check()
        r += 1
    return timing


def _record(timing: Timing, when: str, found: list[str]) -> None:
    """Keep the first reading's changes that are not recorded yet (one phrase each)."""
    timing.appeared += [f"{change} ({when})" for change in found
                        if not any(a.startswith(change) for a in timing.appeared)]


def worker_fixed_s(session: Session) -> float:
    """What a timed run costs the clock besides its calls, seconds: the least of PROBES
    "probe" commands, each the worker's own one-kernel graph replayed and synchronized
    (the command's round trip, a graph launch, the synchronize, the reply). No code of
    the submission runs in a probe, and the worker's garbage collector is off from the
    first probe to the collect, so nothing of the submission's can lengthen one. An
    untimed probe goes first: the GPU switches from the harness's process to the
    worker's (on an H100 0.6 ms, more than the rest together), and the run pays that
    switch in no round, since the probes just ran in the worker. 0 when the worker
    has no probe (the batch was never prepared)."""
    if not session.request({"op": "probe"})["ok"]:
        return 0.0
    times = []
    for _ in range(PROBES):
        t0 = time.perf_counter()
        session.request({"op": "probe"})
        times.append(time.perf_counter() - t0)
    return min(times)


def _less_fixed(elapsed: float, fixed: float) -> float:
    """A batch's time less its fixed cost, never less than (1 - FIXED_SHARE) of it."""
    return max(elapsed - fixed, (1 - FIXED_SHARE) * elapsed)


def _first_wrong(arena, batch, sets, private, task, shape, act) -> str:
    """Check every output of the batch that just ran; describe the first wrong one.

    The calls that share a weight set are checked together: their activations
    stacked make one reference product, and their outputs stacked one check.
    """
    nsets = len(sets)
    for r in range(nsets):
        calls = list(range(r, len(batch), nsets))
        args = list(sets[r][0])
        for i in act:
            args[i] = torch.cat([private[j][i] for j in calls])
        out = torch.cat([arena.view(batch[j]["out"]) for j in calls])
        check = check_task_output(out, task, args)
        if not check.passed:
            return f"one of the calls on weight set {r + 1}: {check.message}"
    if arena.guards_broken():
        return "a timed call wrote outside its output"
    return ""
