"""The private Triton APIs the worker hooks into (grader/worker/fence.py): all listed,
all present in the installed Triton, and a missing one turns its check off with a
reason instead of failing a student's call (the end-to-end simulation is in
tests/integrity/test_integrity.py: every report format says which check is off and why)."""

from __future__ import annotations

import inspect

import pytest

from grader.facts import TaskRun
from grader.harness import run as harness_run
from grader.worker import fence
from grader.worker import main as worker_main
from grader.worker.evidence import LaunchRecorder
from grader.worker.movement import Movement


def _owners():
    import triton.runtime.autotuner as autotuner
    import triton.runtime.interpreter as interp
    import triton.runtime.jit as jit

    return {"InterpreterBuilder": interp.InterpreterBuilder, "GridExecutor": interp.GridExecutor,
            "ReduceScanOpInterface": interp.ReduceScanOpInterface, "Autotuner": autotuner.Autotuner,
            "JITFunction": jit.JITFunction, "InterpretedFunction": interp.InterpretedFunction}


def _snapshot() -> dict:
    return {(name, attr): value for name, cls in _owners().items() for attr, value in vars(cls).items()}


def _listed() -> set[str]:
    return {path for _, _, _, path, _ in fence.PRIVATE} | {path for _, _, path, _ in fence.OPTIONAL}


def test_this_triton_has_every_hook_the_worker_uses():
    import triton

    assert fence.probe("cpu") == {} and fence.probe("cuda") == {}, triton.__version__
    assert set(fence.CHECKS) >= {check for check, *_ in fence.PRIVATE}
    for device in ("cpu", "cuda"):
        assert fence.tested_on(device)


@pytest.mark.parametrize("counts", ["bounds", "movement"])
def test_every_attribute_the_interpreter_counters_patch_is_listed(counts):
    before = _snapshot()
    m = Movement([], confine=counts == "bounds")
    m.install()
    try:
        changed = {k for k in set(before) | set(_snapshot()) if before.get(k) is not _snapshot().get(k)}
    finally:
        m.restore()
    assert changed and _snapshot() == before   # restore() undoes every patch, inherited ones included
    assert {f"{cls}.{attr}" for cls, attr in changed} <= _listed(), sorted(changed)


def test_every_attribute_the_launch_record_patches_is_listed():
    before = _snapshot()
    recorder = LaunchRecorder(own_prefix="x.")
    recorder.install()
    try:
        changed = {k for k in set(before) | set(_snapshot()) if before.get(k) is not _snapshot().get(k)}
    finally:
        for cls, attr in ("JITFunction", "run"), ("InterpretedFunction", "run"):
            setattr(_owners()[cls], attr, before[cls, attr])
    assert _snapshot() == before
    assert changed == {("JITFunction", "run"), ("InterpretedFunction", "run")}
    assert {f"{cls}.{attr}" for cls, attr in changed} <= _listed()


def test_a_hook_whose_signature_changed_is_named():
    why = fence.problem("triton.runtime.interpreter", "InterpreterBuilder.create_masked_load",
                        ("ptrs", "mask", "eviction"))
    have = ", ".join(inspect.signature(__import__("triton").runtime.interpreter.InterpreterBuilder
                                       .create_masked_load).parameters)
    assert why.endswith(f"create_masked_load takes ({have}), without eviction"), why
    assert "has no triton.runtime.interpreter.Nope" in fence.problem("triton.runtime.interpreter", "Nope", None)


def test_a_missing_hook_turns_its_check_off_with_the_reason(monkeypatch):
    entry = ("bounds check", "cpu", "triton.runtime.interpreter", "InterpreterBuilder.create_masked_load_v2", None)
    monkeypatch.setattr(fence, "PRIVATE", fence.PRIVATE + (entry,))
    off = fence.probe("cpu")
    assert set(off) == {"bounds check"} and "create_masked_load_v2" in off["bounds check"]
    assert fence.probe("cuda") == {}   # a CPU check's hook is no GPU run's concern
    line = fence.sentence("bounds check", off["bounds check"])
    assert line.startswith("bounds check off (out-of-bounds loads and stores are not caught") and \
        f"tested on Triton {fence.tested_on('cpu')}" in line


def test_a_worker_that_cannot_install_its_launch_record_says_so(monkeypatch):
    def broken(self):
        raise AttributeError("JITFunction has no run")
    monkeypatch.setattr(LaunchRecorder, "install", broken)
    _, failed = worker_main._start_checks("submission", "cpu", set())
    assert failed == {"launch record": "could not be installed: AttributeError: JITFunction has no run"}
    _, failed = worker_main._start_checks("submission", "cpu", {"launch record"})
    assert failed == {}   # left off by the harness: nothing to install, nothing to say


def test_what_a_worker_says_is_off_reaches_the_report_in_its_words_or_in_none():
    run = TaskRun("w8a8")
    harness_run._checks_off(run, {"bounds check": "the interpreter could not be instrumented: X",
                                  "a made-up check 7 32 72": "anything"}, hidden=False)
    harness_run._checks_off(run, {"data movement": "M=7 N=32 K=72"}, hidden=True)
    assert run.checks_off == {"bounds check": "the worker: the interpreter could not be instrumented: X"}
    # the hidden tests' worker's words reach only those tests' own messages (after the due date)
    assert run.hidden_checks_off == {"data movement": "the worker: M=7 N=32 K=72"}


def test_every_attribute_the_launch_capture_patches_is_listed():
    """The capture (worker/capture.py) intercepts launches and autotuner trials, and
    while a sampled program runs it patches the builder: its own patches by name, and
    every other create_* of the builder wrapped with its arguments passed through."""
    from grader.worker import capture

    listed = {path for check, _, _, path, _ in fence.PRIVATE if check == "launch capture"}
    before = _snapshot()
    cap = capture.Capture()
    cap.install()
    try:
        changed = {k for k in set(before) | set(_snapshot()) if before.get(k) is not _snapshot().get(k)}
    finally:
        cap.restore()
    assert _snapshot() == before and changed
    assert {f"{cls}.{attr}" for cls, attr in changed} <= listed, sorted(changed)
    counter = capture._Counter(capture._Tensors([]), set())
    counter.install()
    try:
        changed = {k for k in set(before) | set(_snapshot()) if before.get(k) is not _snapshot().get(k)}
    finally:
        counter.restore()
    assert _snapshot() == before
    named = {f"{cls}.{attr}" for cls, attr in changed} & listed
    assert {"InterpreterBuilder.create_masked_load", "InterpreterBuilder.create_dot",
            "InterpreterBuilder.create_atomic_rmw"} <= named
    assert all(cls == "InterpreterBuilder" and attr.startswith("create_") for cls, attr in changed)


def test_a_capture_that_cannot_install_turns_itself_off_in_the_report(monkeypatch):
    """A Triton whose interpreter the capture cannot patch: the worker says so, the
    harness turns the check off for the task with the worker's reason, and no case
    is reported as the wrapper's failure."""
    from grader.worker import capture

    def broken(self):
        raise AttributeError("GridExecutor has no __call__")
    monkeypatch.setattr(capture.Capture, "install", broken)
    worker = worker_main.Worker(lambda *a: None, LaunchRecorder(own_prefix="x."), "cpu", None, "x")
    reply = worker.capture({"cases": [{"test": "w8a8/perf_m1", "args": [], "probe": True}], "names": []})
    assert not reply["ok"] and "GridExecutor has no __call__" in reply["error"]
    run = TaskRun("w8a8")
    harness_run._checks_off(run, reply["checks_off"], hidden=False)
    assert list(run.checks_off) == ["launch capture"] and "could not be intercepted" in run.checks_off["launch capture"]
    worker.off.add("launch capture")
    assert "fence.py" in worker.capture({"cases": [], "names": []})["error"]


def test_every_attribute_the_shape_only_call_patches_is_listed():
    """The CPU call on shape-only tensors (worker/shapes.py) writes launches down instead of
    running them: what it patches is listed under "shape-only call", and restore() undoes it."""
    import triton.runtime.autotuner as autotuner
    import triton.runtime.interpreter as interp

    from grader.worker import shapes

    owners = {"GridExecutor": interp.GridExecutor, "Autotuner": autotuner.Autotuner}

    def snapshot():
        return {(name, attr): value for name, cls in owners.items() for attr, value in vars(cls).items()}

    listed = {path for check, _, _, path, _ in fence.PRIVATE if check == "shape-only call"}
    before = snapshot()
    launches = shapes.Launches(shapes.Program())
    launches.install()
    try:
        after = snapshot()
        changed = {k for k in set(before) | set(after) if before.get(k) is not after.get(k)}
    finally:
        launches.restore()
    assert snapshot() == before
    assert {f"{cls}.{attr}" for cls, attr in changed} == {"GridExecutor.__call__", "Autotuner.run"}
    assert {"GridExecutor.__call__", "Autotuner.run"} <= listed


@pytest.mark.slow
def test_the_interpreter_probe_runs_with_the_workers_pythonpath(tmp_path, monkeypatch):
    # A package on this process's PYTHONPATH only (here a numpy that cannot import; on the
    # GPU machines, the pinned numpy) never reaches a grading worker, which gets its own.
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text("raise ImportError('this numpy is broken')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    fence.interpreter_problem.cache_clear()
    try:
        assert "this numpy is broken" in fence.interpreter_problem()
        assert fence.interpreter_problem(pythonpath="") == ""
    finally:
        fence.interpreter_problem.cache_clear()
