"""Data movement of one call, counted by the worker in the CPU interpreter: feedback only.

The harness lays out the inputs of one call of the rubric's ``movement_shape``
in an arena, as for a checked call, and asks the worker to run it with its
loads, stores and dots counted (grader/worker/movement.py). The counts are
the submission's own claim about itself: they are validated and capped
(session.py), shown next to the minimum the harness computes
(the task's ``floor_parts``), and never change a score.
"""

from __future__ import annotations

import time

from ..compare import check_task_output
from ..tasks import get
from .arena import Arena, Plan
from .session import Session, WorkerGone

TIMEOUT_S = 60   # the counted call's limit (the worker is ended past it; nothing scored follows)
BSR_PARTS = (("crow", "crow_indices"), ("col", "col_indices"), ("values", "values"))


def _names(task: str, specs: list[dict]) -> dict[str, str]:
    """The worker's keys for the call's tensors -> the names the report shows."""
    names = {"out": "output", "scratch": "scratch", "other": "other"}
    for i, (spec, name) in enumerate(zip(specs, get(task).arg_names)):
        if "tensor" in spec:
            names[str(i)] = name
        else:
            names.update({f"{i}.{key}": f"{name}.{part}" for key, part in BSR_PARTS})
    return names


def summarize(task: str, shape, options: dict, specs: list[dict], counts: dict) -> dict:
    """The table the report shows, from the worker's validated counts: every input
    in argument order, then the output, scratch and other bytes (those present)."""
    floors = get(task).floor_parts(shape, get(task).defaults(options))
    names = _names(task, specs)
    got = {}
    for key, (read, written) in counts.get("tensors", {}).items():
        if key in names:
            got[names[key]] = (read, written)
    order = [n for n in names.values() if n not in ("output", "scratch", "other")] + ["output"]
    rows = [{"name": n, "minimum": floors.get(n), "read": got.get(n, (0, 0))[0],
             "written": got.get(n, (0, 0))[1]} for n in order]
    rows += [{"name": n, "minimum": None, "read": got[n][0], "written": got[n][1]}
             for n in ("scratch", "other") if n in got and sum(got[n])]
    return {"shape": list(shape), "tensors": rows, "minimum": sum(floors.values()),
            "moved": sum(r["read"] + r["written"] for r in rows),
            "flops": counts.get("flops", 0), "min_flops": get(task).dot_flops(shape, get(task).defaults(options)),
            "programs": counts.get("programs", 0), "launch_count": counts.get("launch_count", 0),
            "launches": counts.get("launches", []), "output_wrong": "", "error": "", "seconds": 0.0}


def measure(session: Session, name: str, task: str, shape, options: dict, seed: int) -> dict:
    """Count one call's data movement; {"shape", "error"} when that could not be done."""
    started = time.monotonic()
    args, _ = get(task).make_inputs(shape, options, seed, session.device)
    plan = Plan()
    specs = [plan.arg(a) for a in args]
    out_spec = plan.output((shape[0], shape[1]))
    arena = Arena(plan, session.device, name)
    failed = {"shape": list(shape), "error": ""}
    try:
        # The worker writes its wrapper's program down on shape-only inputs (worker/shapes.py);
        # the executor, which holds the inputs, counts it (worker/executor.py).
        reply = session.request({"op": "call", "args": specs, "out": out_spec})
        if reply["ok"]:
            mapped = session.executor.map(name, arena)
            if not mapped["ok"]:
                return {**failed, "error": "the executor could not map its inputs"}
            reply = session.executor.request({"op": "movement", "arena": name, "args": specs, "out": out_spec,
                                              "program": reply.get("program") or {}, "choice": 0})
    except WorkerGone as e:
        return {**failed, "error": f"not counted: {e}"}
    if not reply["ok"]:
        why = reply.get("returned") or ((reply.get("error") or "").strip().splitlines() or ["?"])[-1]
        if why.startswith("the interpreter could not be instrumented"):
            return {**failed, "error": f"not counted: {why}"}
        return {**failed, "error": f"not counted: the call failed: {why}"}
    if "movement" not in reply:
        return {**failed, "error": "not counted: the worker sent no counts"}
    result = summarize(task, shape, options, specs, reply["movement"])
    check = check_task_output(arena.view(out_spec).clone(), task, args)
    if not check.passed:
        result["output_wrong"] = check.message.splitlines()[0][:300] if check.message else "wrong output"
    result["seconds"] = round(time.monotonic() - started, 2)
    return result
