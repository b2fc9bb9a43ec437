"""The clock times the calls only (grader/harness/measure.py, grader/worker/main.py).

A timed call writes an output of its own; the worker copies the outputs of
the run that was timed into the arena after the harness has stopped its
clock ("collect"), and the harness checks every one of them. These tests
drive the worker's timed batch in this process (eager on the CPU, a CUDA
graph on a GPU) and the harness's rounds through a session that forwards
each command to it.
"""

from __future__ import annotations

import gc

import pytest
import torch

from grader.facts import Timing
from grader.harness import measure
from grader.harness.arena import CANARY, Arena, Plan
from grader.harness.measure import timed_rounds
from grader.worker.main import Worker, outputs_problem
from tests.helpers import HAS_CUDA, needs_gpu

M, N, K, CALLS = 8, 16, 32, 6


class _Launches:
    """What Worker needs of a LaunchRecorder here: nothing is recorded."""

    def reset(self):
        pass

    def own(self):
        return 0

    def foreign(self):
        return []


class Session:
    """Forwards each command to an in-process Worker, as the sandboxed session would. With
    ``delay_s``, the harness's clock (measure.time.perf_counter) is a fake one that each
    command moves on by ``delay_s[op]`` and nothing else, so what the clock includes does
    not depend on how fast this machine runs the commands."""

    def __init__(self, worker: Worker, delay_s: dict | None = None, monkeypatch=None):
        self.worker, self.delay_s, self.ops = worker, delay_s or {}, []
        self.now = 0.0
        if delay_s is not None:
            monkeypatch.setattr(measure.time, "perf_counter", lambda: self.now)

    def request(self, msg: dict) -> dict:
        self.ops.append(msg["op"])
        self.now += self.delay_s.get(msg["op"], 0)
        try:
            return getattr(self.worker, msg["op"])(msg)
        except Exception as e:  # noqa: BLE001 - as the worker's main loop replies
            return {"ok": False, "error": repr(e)}


def _batch(device: str, fn):
    """An arena with CALLS calls of fn(x, w) (x [M, K], w [K, N]), a worker that maps it,
    and the calls' activations."""
    torch.manual_seed(0)
    w = torch.randn(K, N, device=device)
    xs = [torch.randn(M, K, device=device) for _ in range(CALLS)]
    plan = Plan()
    w_spec = plan.arg(w)
    calls = [{"args": [plan.arg(x), w_spec], "out": plan.output((M, N), torch.float32)} for x in xs]
    arena = Arena(plan, device)
    worker = Worker(fn, _Launches(), device, fds=None, package="submission")
    worker.arenas["timed"] = arena.buf          # the mapping the session would send
    assert worker.prepare({"arena": "timed", "calls": calls})["ok"]
    return arena, worker, calls, xs, w


def _untouched(arena, spec) -> bool:
    raw = arena.view({**spec, "dtype": "uint8", "shape": [M * N * 4], "stride": [1]})
    return bool((raw == CANARY).all())


def _product(x, w):
    return x @ w


def test_the_timed_run_copies_nothing_and_collect_copies_that_runs_outputs():
    arena, worker, calls, xs, w = _batch("cpu", _product)
    assert worker.run({})["ok"]
    assert all(_untouched(arena, c["out"]) for c in calls)   # nothing was copied while timed
    assert worker.collect({}) == {"ok": True}
    for c, x in zip(calls, xs):
        assert torch.equal(arena.view(c["out"]), x @ w)


def test_no_finalizer_runs_between_the_timed_run_and_the_copy():
    # A finalizer of the submission's (a __del__ in a reference cycle) could write the
    # outputs after the clock stopped: the collector is off from the run to the copy.
    _, worker, *_ = _batch("cpu", _product)
    assert gc.isenabled()
    worker.run({})
    assert not gc.isenabled()
    worker.collect({})
    assert gc.isenabled()


def test_no_finalizer_runs_between_the_probes_and_the_run():
    # The probes' time is taken off the run's: nothing of the submission's may lengthen them.
    _, worker, *_ = _batch("cpu", _product)
    worker.probe_graph = type("G", (), {"replay": lambda self: None})()   # (a GPU worker's one-kernel graph)
    assert gc.isenabled()
    assert worker.probe({})["ok"]
    assert not gc.isenabled()
    worker.run({})
    assert not gc.isenabled()
    worker.collect({})
    assert gc.isenabled()


def test_the_clock_stops_before_the_outputs_are_collected(monkeypatch):
    arena, worker, calls, xs, w = _batch("cpu", _product)
    session = Session(worker, delay_s={"run": 0.03, "collect": 0.5}, monkeypatch=monkeypatch)
    timing = timed_rounds(session, Timing(calls=CALLS), 2, refresh=lambda r: arena.reset_outputs(
        [c["out"] for c in calls]), time_baseline=lambda: (1e-3, 0.0),
        check=lambda: "" if all(torch.equal(arena.view(c["out"]), x @ w) for c, x in zip(calls, xs)) else "wrong")
    assert session.ops == ["probe", "run", "collect"] * 2   # no probe on the CPU: nothing taken off
    assert timing.wrong == ""
    assert timing.kernel_ms == pytest.approx([30 / CALLS] * 2)   # the run's 30 ms, not the collect's 500


class ClockedSession:
    """A session whose commands take known times on a fake clock (measure.time.perf_counter):
    the first probe of a round ``switch_s`` (the GPU changing processes), the others
    ``probe_s``, a run ``run_s``."""

    def __init__(self, monkeypatch, probe_s: float, run_s: float, switch_s: float = 6e-4, probes: bool = True):
        self.now, self.ops = 100.0, []
        self.probe_s, self.run_s, self.switch_s, self.probes = probe_s, run_s, switch_s, probes
        monkeypatch.setattr(measure.time, "perf_counter", lambda: self.now)

    def request(self, msg: dict) -> dict:
        op = msg["op"]
        first = op == "probe" and (not self.ops or self.ops[-1] != "probe")
        self.ops.append(op)
        if op == "probe":
            if not self.probes:
                return {"ok": False, "error": "no timed batch was prepared"}
            self.now += self.switch_s if first else self.probe_s
        elif op == "run":
            self.now += self.run_s
        return {"ok": True}


def test_the_fixed_cost_of_a_run_is_taken_off_on_both_sides(monkeypatch):
    session = ClockedSession(monkeypatch, probe_s=2e-4, run_s=5e-3)
    timing = timed_rounds(session, Timing(calls=10), 3, refresh=lambda r: None,
                          time_baseline=lambda: (8e-3, 1e-4), check=lambda: "")
    assert session.ops == (["probe"] * (1 + measure.PROBES) + ["run", "collect"]) * 3
    assert timing.kernel_ms == pytest.approx([(5e-3 - 2e-4) * 1e3 / 10] * 3)   # the switch is in no round
    assert timing.baseline_ms == pytest.approx([(8e-3 - 1e-4) * 1e3 / 10] * 3)
    assert timing.fixed_ms == pytest.approx([0.2] * 3) and timing.baseline_fixed_ms == pytest.approx([0.1] * 3)
    assert timing.ratio == pytest.approx(7.9 / 4.8)


def test_at_most_half_a_batch_is_taken_off_whatever_a_probe_says(monkeypatch):
    session = ClockedSession(monkeypatch, probe_s=4e-3, run_s=5e-3)
    timing = timed_rounds(session, Timing(calls=10), 1, refresh=lambda r: None,
                          time_baseline=lambda: (8e-3, 7e-3), check=lambda: "")
    assert timing.kernel_ms == pytest.approx([0.25]) and timing.baseline_ms == pytest.approx([0.4])


def test_a_worker_without_a_probe_has_nothing_taken_off(monkeypatch):
    session = ClockedSession(monkeypatch, probe_s=2e-4, run_s=5e-3, probes=False)
    timing = timed_rounds(session, Timing(calls=10), 1, refresh=lambda r: None,
                          time_baseline=lambda: (8e-3, 0.0), check=lambda: "")
    assert timing.kernel_ms == pytest.approx([0.5]) and timing.fixed_ms == [0.0]


def _one_buffer():
    y = torch.zeros(M, N)
    return lambda x, w: y.copy_(x @ w)


@pytest.mark.parametrize("make, says", [
    (_one_buffer, "share memory"),                                            # one buffer for every call
    (lambda: lambda x, w: (x @ w)[:1].expand(M, N), "share memory"),          # an expanded view
    (lambda: lambda x, w: (x @ w).to(torch.float16), "dtype"),
])
def test_outputs_without_memory_of_their_own_make_the_timed_calls_wrong(make, says):
    arena, worker, calls, xs, w = _batch("cpu", make())
    session = Session(worker)
    timing = timed_rounds(session, Timing(calls=CALLS), 1, refresh=lambda r: None, time_baseline=lambda: (1e-3, 0.0),
                          check=lambda: "")
    assert says in timing.wrong
    assert all(_untouched(arena, c["out"]) for c in calls)


def test_a_tensor_subclass_is_not_an_output():
    class Lazy(torch.Tensor):
        pass

    ys = [torch.zeros(M, N).as_subclass(Lazy), torch.zeros(M, N)]
    outs = [torch.empty(M, N), torch.empty(M, N)]
    assert "subclass" in outputs_problem(ys, outs)
    assert outputs_problem([torch.zeros(M, N), torch.zeros(M, N)], outs) is None


def test_a_timed_call_that_raises_is_wrong():
    state = {"n": 0}

    def fn(x, w):
        state["n"] += 1
        if state["n"] > 2 * CALLS:   # the warm-up batch and one more are fine
            raise RuntimeError("boom")
        return x @ w

    arena, worker, calls, *_ = _batch("cpu", fn)
    timing = timed_rounds(Session(worker), Timing(calls=CALLS), 2, refresh=lambda r: None,
                          time_baseline=lambda: (1e-3, 0.0), check=lambda: "")
    assert timing.wrong.startswith("a timed call raised an exception") and "boom" in timing.wrong


@needs_gpu
def test_gpu_the_probe_replays_the_workers_own_graph():
    _, worker, *_ = _batch("cuda", _product)
    assert worker.probe_graph is not None
    worker.probe_cell.zero_()
    assert worker.probe({})["ok"] and worker.probe_cell.item() == 1.0
    worker.collect({})


@needs_gpu
def test_gpu_the_graph_replay_writes_its_own_outputs_and_collect_copies_them():
    arena, worker, calls, xs, w = _batch("cuda", _product)
    assert worker.batch.graph is not None
    for _ in range(2):
        arena.reset_outputs([c["out"] for c in calls])
        torch.cuda.synchronize()
        assert worker.run({})["ok"]
        assert all(_untouched(arena, c["out"]) for c in calls)   # the replay holds no copy
        assert worker.collect({}) == {"ok": True}
        for c, x in zip(calls, xs):
            assert torch.allclose(arena.view(c["out"]), x @ w)
        # The graph's outputs are NaN again: the next replay must write every one of them.
        assert all(torch.isnan(y).all() for y in worker.batch.outputs)


@needs_gpu
def test_gpu_a_replay_that_skips_a_call_leaves_nan_not_the_last_answer():
    arena, worker, calls, xs, w = _batch("cuda", _product)
    worker.run({})
    worker.collect({})
    worker.batch.outputs[2].zero_()        # stands for a replay that computed call 3 ...
    worker.batch.copies.replay()           # ... and is collected; the next collect without a run:
    torch.cuda.synchronize()
    worker.batch.copies.replay()
    torch.cuda.synchronize()
    assert torch.isnan(arena.view(calls[2]["out"])).all()


@pytest.mark.skipif(HAS_CUDA, reason="the CPU's eager batch")
def test_cpu_batches_are_eager():
    _, worker, *_ = _batch("cpu", _product)
    assert worker.batch.graph is None
