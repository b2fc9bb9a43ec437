"""The CPU call on shape-only tensors (grader/worker/shapes.py) and the executor that carries
its program out (grader/worker/executor.py, gate.py): the wrapper never holds a value, the
program it writes can only allocate, view, copy, cast and launch, the executor refuses a
forged program, and a kernel the GPU's compiler refuses never runs in the interpreter.

In-process: the worker's side and the executor's side run here one after the other, as the
harness joins them (grader/harness/measure.py ``_shape_call``); the grading tests
(tests/integrity/) run them in their sandboxed processes.
"""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch
import triton
import triton.language as tl

from grader.worker import executor, gate, shapes


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * s, mask=offs < n)


def _plain_python(v):
    return v


@triton.jit
def _calls_plain_python(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, _plain_python(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})],
                 key=["n"])
@triton.jit
def _tuned_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # A bug that only the 64-wide config shows: its programs store 2 x instead of x.
    v = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, v * (2.0 if BLOCK == 64 else 1.0), mask=offs < n)


MODULE = sys.modules[__name__]


def _spec(shape, dtype="float32"):
    stride, acc = [], 1
    for n in reversed(shape):
        stride.insert(0, acc)
        acc *= n
    return {"tensor": {"offset": 0, "dtype": dtype, "shape": list(shape), "stride": stride}}


def _record(wrapper, *specs):
    """The worker's side: the wrapper on shape-only inputs; (program as JSON, program)."""
    program = shapes.Program()
    args = [program.input(s, i) for i, s in enumerate(specs)]
    with shapes.shape_only(program):
        y = wrapper(*args)
    return json.loads(json.dumps({"steps": program.take(), "result": program.ref(y)})), program


def _carry_out(program: dict, inputs: list[torch.Tensor], choice: int = 0) -> torch.Tensor:
    """The executor's side, on real inputs."""
    storages = executor.Storages()
    storages.bind_inputs(inputs, [{"tensor": {}} for _ in inputs])
    executor.Replay(MODULE, storages, gate.Gate(), choice).run(program["steps"])
    return storages.tensor(program["result"])


def _scale(x):
    y = torch.empty_like(x)
    _scale_kernel[(triton.cdiv(x.numel(), 16),)](x, y, x.numel(), 3.0, BLOCK=16)
    return y


def test_the_wrapper_sees_shapes_and_the_executor_computes():
    program, _ = _record(_scale, _spec([50]))
    kinds = [next(iter(s)) for s in program["steps"]]
    assert kinds == ["op", "launch"], program
    x = torch.randn(50)
    assert torch.equal(_carry_out(program, [x]), x * 3.0)


@pytest.mark.parametrize("read", [
    lambda x: x[0].item(), lambda x: float(x.sum()), lambda x: int(x[0]), lambda x: bool(x[0] > 0),
    lambda x: x.tolist(),
])
def test_a_wrapper_cannot_read_a_value(read):
    def wrapper(x):
        read(x)
        return x
    with pytest.raises((shapes.ValuesUnavailable, shapes.HostComputeRefused, RuntimeError, NotImplementedError)) as e:
        _record(wrapper, _spec([8]))
    assert "value" in str(e.value) or "computes on the host" in str(e.value) or "meta" in str(e.value)


@pytest.mark.parametrize("compute", [
    lambda x: x @ x.t(), lambda x: torch.matmul(x, x), lambda x: x * 2, lambda x: x.abs().amax(dim=1),
    lambda x: torch.round(x), lambda x: x.sum(), lambda x: torch.where(x > 0, x, x), lambda x: x.diff(),
])
def test_host_computation_is_refused_with_what_is_allowed(compute):
    with pytest.raises(shapes.HostComputeRefused) as e:
        _record(compute, _spec([8, 8]))
    assert "computes on the host" in str(e.value) and "allocate" in str(e.value)


def test_allocation_views_copies_and_casts_are_carried_out():
    def wrapper(x):
        h = x.to(torch.float16).t().contiguous()   # a cast, a view, a copy
        z = torch.zeros((4, 6), dtype=torch.float32, device=x.device)
        z[1:3].copy_(h[:2].float())
        return torch.cat([z, x.t()], dim=0)
    program, _ = _record(wrapper, _spec([6, 4]))
    assert all("launch" not in s for s in program["steps"])
    x = torch.randn(6, 4)
    expected = torch.zeros(4, 6)
    expected[1:3] = x.half().t().contiguous()[:2].float()
    assert torch.equal(_carry_out(program, [x]), torch.cat([expected, x.t()], dim=0))


def test_a_cached_buffer_is_the_same_memory_in_every_call():
    cache = {}

    def wrapper(x):
        if "y" not in cache:
            cache["y"] = torch.empty_like(x)
        _scale_kernel[(triton.cdiv(x.numel(), 16),)](x, cache["y"], x.numel(), 1.0, BLOCK=16)
        return cache["y"].clone()

    program = shapes.Program()
    storages = executor.Storages()
    for _ in range(2):   # two calls, fresh inputs: the buffer made in the first serves the second
        args = [program.input(_spec([20]), 0)]
        with shapes.shape_only(program):
            y = wrapper(*args)
        p = json.loads(json.dumps({"steps": program.take(), "result": program.ref(y)}))
        x = torch.randn(20)
        storages.bind_inputs([x], [{"tensor": {}}])
        executor.Replay(MODULE, storages, gate.Gate(), 0).run(p["steps"])
        assert torch.equal(storages.tensor(p["result"]), x)


@pytest.mark.parametrize("forge, words", [
    (lambda p: p["steps"].insert(0, {"op": "mm.default", "args": {"list": []}, "kwargs": {}, "out": []}),
     "not one a wrapper may run"),
    (lambda p: p["steps"][1]["args"].update(x_ptr={"t": {"s": "in0", "off": 0, "size": [4096], "stride": [1],
                                                         "dtype": "float32"}}), "reaches past the memory"),
    (lambda p: p["steps"][1]["args"].update(x_ptr={"t": {"s": "nowhere", "off": 0, "size": [4], "stride": [1],
                                                         "dtype": "float32"}}), "names no memory"),
    (lambda p: p["steps"][1]["launch"].update(name="print"), "not a module-level @triton.jit function"),
    (lambda p: p["steps"][1]["args"].update(s={"py": "__import__('os')"}), "unknown kind"),
    (lambda p: p["steps"].append({"exec": "anything"}), "unknown step"),
])
def test_a_forged_program_is_refused(forge, words):
    """The worker is untrusted: whatever it sends, the executor runs only what a program may hold."""
    program, _ = _record(_scale, _spec([50]))
    forge(program)
    with pytest.raises(executor.ProgramError, match=words):
        _carry_out(program, [torch.randn(50)])


def test_a_kernel_the_gpu_compiler_refuses_never_runs_in_the_interpreter(monkeypatch):
    """A kernel body calling a plain Python function runs in the interpreter but not on the GPU:
    the gate's front end refuses it before the interpreter would hand it the real values."""
    ran = []
    monkeypatch.setattr(MODULE, "_plain_python", lambda v: ran.append(1) or v)

    def wrapper(x):
        y = torch.empty_like(x)
        _calls_plain_python[(1,)](x, y, x.numel(), BLOCK=16)
        return y
    program, _ = _record(wrapper, _spec([16]))
    with pytest.raises(gate.NotCompiled, match="does not compile for the GPU"):
        _carry_out(program, [torch.randn(16)])
    assert not ran


def test_every_autotune_config_is_a_choice_the_executor_makes():
    def wrapper(x):
        y = torch.empty_like(x)
        _tuned_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
        return y
    program, _ = _record(wrapper, _spec([100]))
    assert shapes.choices(program["steps"]) == 3
    from grader.harness.measure import program_configs
    assert [c.split(": ")[1].split(",")[0] for c in program_configs(program)] == ["BLOCK=16", "BLOCK=32", "BLOCK=64"]
    x = torch.randn(100)
    outs = [_carry_out(program, [x], k) for k in range(3)]
    assert torch.equal(outs[0], x) and torch.equal(outs[1], x) and torch.equal(outs[2], 2 * x)


def test_a_module_level_tensor_travels_by_value_and_a_big_one_is_refused():
    table = torch.arange(8, dtype=torch.float32)

    def wrapper(x):
        y = torch.empty_like(x)
        _scale_kernel[(1,)](table, y, 8, 2.0, BLOCK=16)
        return y
    program, _ = _record(wrapper, _spec([8]))
    assert torch.equal(_carry_out(program, [torch.zeros(8)]), table * 2)
    big = torch.zeros(1 << 20)
    with pytest.raises(shapes.HostComputeRefused, match="1 MiB"):
        _record(lambda x: _scale_kernel[(1,)](big, x, 8, 2.0, BLOCK=16) or x, _spec([8]))


def test_kernels_are_found_by_name_and_line_only_at_module_level():
    ref = shapes.kernel_ref(_scale_kernel.fn)
    assert executor.find_kernel(MODULE, ref) is _scale_kernel
    with pytest.raises(executor.ProgramError, match="top level"):
        executor.find_kernel(types.ModuleType("empty"), ref)
