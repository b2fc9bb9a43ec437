"""Launch plans of the reference kernels (``_plan``, ``_Launch`` in solutions/*.py).

What a call decides from its problem (the inputs' shapes, strides, dtypes,
devices and alignment) is decided once: the checks, the config, the grids.
On a GPU the kernel Triton compiled for a plan's first launch is launched
directly afterwards (``compiled[grid](...)``), which skips Triton's per-call
binding; in the interpreter every launch stays ``kernel[grid](...)``.

- a problem seen before skips the checks and gives what a first call gives;
  inputs that differ in anything the checks or the launches read are a new
  problem, checked again, bad ones refused;
- FORCE_CONFIG and REUSE_PLANS = False take the plain path on every call;
- the bound launch passes the plain launch's arguments with the constexprs
  last, and falls back to the plain launch when it may not bind;
- every launch of the reference puts its constexprs last, by name (what
  the bound launch relies on);
- on a GPU: bound launches give bit-identical results, unaligned inputs take
  the plain path, and the grader's launch record counts bound launches.
"""

import inspect
import random
import warnings

import pytest
import torch
import triton

from grader.compare import check_output
from solutions import dds as dds_solution
from solutions import w4a16 as w4a16_solution
from solutions import w8a8 as w8a8_solution
from tests.helpers import HAS_CUDA, dds_reference, needs_gpu, problem, w4a16_reference, w8a8_reference

SEED = random.randrange(2**31)
MODULES = {"w8a8": w8a8_solution, "w4a16": w4a16_solution, "dds": dds_solution}
ENTRIES = {"w8a8": w8a8_solution.w8a8_mm, "w4a16": w4a16_solution.w4a16_mm, "dds": dds_solution.dds_mm}
CHECKS = {"w8a8": "check_w8a8_inputs", "w4a16": "check_w4a16_inputs", "dds": "check_dds_inputs"}
SMALL = {"w8a8": ((5, 64, 96), {}), "w4a16": ((5, 64, 96), {}), "dds": ((5, 64, 96), {"density": 0.5})}


def _check(task, args, out):
    """Against the grader's exact reference (W8A8 bit for bit), with the grader's tolerance."""
    if task == "w8a8":
        assert torch.equal(out, w8a8_reference(*args)), f"seed {SEED}"
    else:
        ref = (w4a16_reference if task == "w4a16" else dds_reference)(*args)
        c = check_output(out, ref, task, tuple(ref.shape))
        assert c.passed, f"seed {SEED}: {c.message}"


@pytest.fixture
def fresh_plans(monkeypatch):
    """Empty plan tables for this test; returns a counter of each task's input checks."""
    counts = {}
    for task, module in MODULES.items():
        monkeypatch.setattr(module, "_PLANS", {})
        check = getattr(module, CHECKS[task])

        def counted(*args, _check=check, _task=task):
            counts[_task] = counts.get(_task, 0) + 1
            return _check(*args)
        monkeypatch.setattr(module, CHECKS[task], counted)
    return counts


def _plan_launches(module) -> list:
    return [v for plan in module._PLANS.values() for v in plan.values() if isinstance(v, module._Launch)]


@pytest.mark.parametrize("task", MODULES)
def test_a_problem_seen_before_skips_the_checks_and_gives_the_same_results(task, fresh_plans):
    shape, options = SMALL[task]
    for i in range(3):  # fresh inputs every call, one problem
        args, _ = problem(task, shape, SEED + i, **options)
        _check(task, args, ENTRIES[task](*args))
    assert fresh_plans[task] == 1 and len(MODULES[task]._PLANS) == 1


@pytest.mark.parametrize("task", MODULES)
def test_what_the_checks_read_makes_a_new_problem_and_bad_inputs_are_still_refused(task, fresh_plans):
    shape, options = SMALL[task]
    args, extras = problem(task, shape, SEED, **options)
    entry = ENTRIES[task]
    entry(*args)
    x = args[0]
    with pytest.raises(ValueError, match="float16"):
        entry(x.float(), *args[1:])               # same shape, another dtype
    with pytest.raises(ValueError):
        entry(x[:, :-8].contiguous(), *args[1:])  # K no longer matches the weight
    if task == "w8a8":
        with pytest.raises(ValueError, match="input_scale"):
            entry(x, args[1], args[2][:-1], args[3])
        with pytest.raises(ValueError, match="qweight_t"):
            entry(x, args[1].to(torch.int32), *args[2:])
    elif task == "w4a16":
        with pytest.raises(ValueError, match="scales"):
            entry(x, args[1], args[2][:, :-1])
    else:
        with pytest.raises(ValueError, match="sparse_bsr"):
            entry(x, extras["weight"])
    assert fresh_plans[task] == 1 + (4 if task == "w8a8" else 3)  # the good call once, each bad one


@pytest.mark.parametrize("task", MODULES)
def test_layout_and_alignment_are_part_of_the_problem(task, fresh_plans):
    shape, options = SMALL[task]
    args, _ = problem(task, shape, SEED, **options)
    entry = ENTRIES[task]
    _check(task, args, entry(*args))
    x = args[0]
    # The same values 2 bytes into their storage: another address class for Triton.
    shifted = torch.cat([x.new_zeros(1), x.flatten()])[1:].view(x.shape)
    assert shifted.data_ptr() % 16 != x.data_ptr() % 16
    _check(task, (shifted, *args[1:]), entry(shifted, *args[1:]))
    n = 2
    if task == "w8a8":  # a contiguous [K, N] weight instead of the transposed view: other strides
        wt = args[1].contiguous()
        _check(task, (x, wt, *args[2:]), entry(x, wt, *args[2:]))
        n = 3
    assert len(MODULES[task]._PLANS) == n and fresh_plans[task] == n


@pytest.mark.parametrize("task", MODULES)
def test_forced_configs_and_reuse_off_take_the_plain_path_every_call(task, fresh_plans, monkeypatch):
    module = MODULES[task]
    shape, options = SMALL[task]
    args, _ = problem(task, shape, SEED, **options)
    monkeypatch.setattr(module, "REUSE_PLANS", False)
    for _ in range(2):
        _check(task, args, ENTRIES[task](*args))
    monkeypatch.setattr(module, "REUSE_PLANS", True)
    monkeypatch.setattr(module, "FORCE_CONFIG", next(iter(module.CONFIGS.values())))
    _check(task, args, ENTRIES[task](*args))
    assert fresh_plans[task] == 3 and module._PLANS == {}


def test_empty_inputs_are_checked_every_call_and_never_planned(fresh_plans):
    args, _ = problem("w8a8", (0, 32, 64), SEED)
    for _ in range(2):
        assert w8a8_solution.w8a8_mm(*args).shape == (0, 32)
    assert fresh_plans["w8a8"] == 2 and w8a8_solution._PLANS == {}


class _FakeCompiled:
    """Stands for a compiled kernel: records each ``[grid](*args)`` launch."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args: self.launches.append((grid, args))


@pytest.mark.parametrize("module", MODULES.values(), ids=MODULES)
def test_the_bound_launch_passes_the_plain_arguments_then_the_constexprs(module):
    compiled, plain = _FakeCompiled(), []

    def launch_plain():
        plain.append(1)
        return compiled

    launch = module._Launch((4, 2, 1), {"SPLIT_K": 2, "BLOCK_M": 16}, {"num_warps": 4})
    launch.launch(("x", 7), True, launch_plain)      # first launch: plain, then bound
    launch.launch(("y", 8), True, launch_plain)      # through the compiled kernel
    launch.launch(("z", 9), False, launch_plain)     # may not bind this call (an output unaligned, say)
    assert len(plain) == 2 and compiled.launches == [((4, 2, 1), ("y", 8, 2, 16))]
    unbound = module._Launch((1, 1, 1), {}, {})
    for _ in range(2):
        unbound.launch((), False, launch_plain)       # never bound: the interpreter, unaligned inputs
    assert unbound.compiled is None and len(plain) == 4
    nothing = module._Launch((1, 1, 1), {}, {})
    nothing.launch((), True, lambda: None)            # a launch that compiled nothing binds nothing
    assert nothing.compiled is None


@pytest.mark.skipif(HAS_CUDA, reason="the interpreter's launches")
def test_the_interpreter_never_binds(fresh_plans):
    for task, module in MODULES.items():
        shape, options = SMALL[task]
        for i in range(2):
            args, _ = problem(task, shape, SEED + i, **options)
            ENTRIES[task](*args)
        assert module._PLANS and all(not plan["bind"] for plan in module._PLANS.values())
        assert all(launch.compiled is None for launch in _plan_launches(module))


# Configs that reach every launch site: split-K and PDL, TMA, dequantize + GEMM, the grouped DDS kernels.
PATHS = [
    ("w8a8", None, (1, 64, 96), {}),
    ("w8a8", triton.Config(dict(SPLIT_K=3, BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, GROUP_M=2, PDL=True, TMA=True),
                           num_warps=4, num_stages=2), (40, 72, 200), {}),
    ("w4a16", None, (3, 64, 256), {"group_size": 32}),
    ("w4a16", triton.Config(dict(SPLIT_K=2, BLOCK_M=32, BLOCK_N=32, BLOCK_K=64, GROUP_M=2, TMA=True,
                                 DEQUANTIZED=False, PDL=False), num_warps=4, num_stages=2), (35, 48, 128), {}),
    ("w4a16", triton.Config(dict(SPLIT_K=1, BLOCK_M=32, BLOCK_N=32, BLOCK_K=64, GROUP_M=2, TMA=False,
                                 DEQUANTIZED=True, PDL=True), num_warps=4, num_stages=2), (35, 48, 128), {}),
    ("dds", None, (5, 64, 96), {"density": 0.5}),
    ("dds", triton.Config(dict(G=2, BLOCK_M=32, STEPS=2), num_warps=4, num_stages=2), (33, 96, 96),
     {"density": 0.6}),
]


@pytest.mark.skipif(HAS_CUDA, reason="records the interpreter's launches")
def test_every_launch_names_its_constexprs_and_puts_them_last(monkeypatch):
    # The bound launch passes the plain launch's positional arguments, then the
    # constexprs' values in their places; that holds only if every launch passes
    # exactly the kernel's constexprs by name and every other parameter by position.
    import triton.runtime.interpreter as interpreter

    seen, run = [], interpreter.InterpretedFunction.run

    def spy(self, *args, **kwargs):
        seen.append((self, args, kwargs))
        return run(self, *args, **kwargs)
    monkeypatch.setattr(interpreter.InterpretedFunction, "run", spy)
    for task, config, shape, options in PATHS:
        monkeypatch.setattr(MODULES[task], "FORCE_CONFIG", config)
        args, _ = problem(task, shape, SEED, **options)
        _check(task, args, ENTRIES[task](*args))
    kernels = set()
    for kernel, args, kwargs in seen:
        params = list(inspect.signature(kernel.fn).parameters.values())
        constexpr = ["constexpr" in str(p.annotation) for p in params]
        named = [p.name for p in params if p.name in kwargs]
        assert len(args) + len(named) == len(params), kernel.fn.__name__
        assert not any(constexpr[:len(args)]) and all(constexpr[len(args):]), kernel.fn.__name__
        assert named == [p.name for p in params[len(args):]], kernel.fn.__name__
        kernels.add(kernel.fn.__name__)
    assert kernels == {"_quantize_rows_kernel", "_w8a8_gemm_kernel", "_w4a16_kernel", "_dequantize_kernel",
                       "_dds_kernel", "_densify_kernel", "_grouped_kernel"}


def test_the_launch_record_counts_launches_of_a_compiled_kernel(monkeypatch):
    # compiled[grid](...) skips JITFunction.run: the grader's record must see it too.
    import triton.runtime.interpreter as interpreter
    import triton.runtime.jit as jit
    from triton.compiler.compiler import CompiledKernel

    from grader.worker.evidence import LaunchRecorder

    for cls in (jit.JITFunction, interpreter.InterpretedFunction):
        monkeypatch.setattr(cls, "run", cls.run)
    monkeypatch.setattr(CompiledKernel, "__getitem__", CompiledKernel.__getitem__)
    rec = LaunchRecorder(own_prefix="solutions.")
    rec.install()
    launched = []
    kernel = CompiledKernel.__new__(CompiledKernel)  # what a launch compiled, minus the GPU
    kernel.module, kernel.function, kernel.packed_metadata, kernel.name = object(), 0, None, "k"
    kernel._run = lambda *args: launched.append(args)
    kernel.src = type("Src", (), {"fn": w8a8_solution._w8a8_gemm_kernel})()
    kernel[(2, 1, 1)]("a", 3, stream=0)
    kernel.module = None  # nothing to unload
    assert rec.own() == 1 and launched and launched[0][-2:] == ("a", 3)
    assert list(rec.launches) == ["solutions.w8a8._w8a8_gemm_kernel"]


# ------------------------------------------------------------------ GPU

GPU_PROBLEMS = [("w8a8", (1, 4096, 4096), {}), ("w8a8", (333, 4096, 4096), {}),
                ("w4a16", (1, 11008, 4096), {}), ("w4a16", (16, 4096, 4096), {"group_size": 128}),
                ("w4a16", (333, 4096, 4096), {}), ("w4a16", (1000, 4096, 4096), {}),
                ("dds", (1, 1024, 1024), {"density": 0.25}), ("dds", (4096, 1024, 1024), {"density": 0.5})]


@needs_gpu
@pytest.mark.parametrize("task,shape,options", GPU_PROBLEMS)
def test_gpu_bound_launches_give_the_plain_launches_results(task, shape, options, fresh_plans, monkeypatch):
    import triton.runtime.jit as jit

    module, entry = MODULES[task], ENTRIES[task]
    args, _ = problem(task, shape, SEED, **options)
    first = entry(*args)                      # the plan's first call: kernel[grid](...), then bound
    assert _plan_launches(module) and all(launch.compiled is not None for launch in _plan_launches(module))
    plain_launches, run = [], jit.JITFunction.run

    def spy(self, *a, **kw):
        plain_launches.append(self)
        return run(self, *a, **kw)
    monkeypatch.setattr(jit.JITFunction, "run", spy)
    again = entry(*args)                      # through the compiled kernels only
    assert plain_launches == [] and torch.equal(first, again)
    monkeypatch.setattr(module, "REUSE_PLANS", False)
    assert torch.equal(entry(*args), first) and plain_launches
    _check(task, args, first)


@needs_gpu
@pytest.mark.parametrize("task", MODULES)
def test_gpu_unaligned_inputs_take_the_plain_path(task, fresh_plans):
    shape, options = {"w8a8": ((4, 4096, 4096), {}), "w4a16": ((4, 4096, 4096), {}),
                      "dds": ((4, 1024, 1024), {"density": 0.25})}[task]
    args, _ = problem(task, shape, SEED, **options)
    x = args[0]
    shifted = torch.cat([x.new_zeros(1), x.flatten()])[1:].view(x.shape)
    for _ in range(2):
        _check(task, (shifted, *args[1:]), ENTRIES[task](shifted, *args[1:]))
    plan, = MODULES[task]._PLANS.values()
    assert not plan["bind"] and all(launch.compiled is None for launch in _plan_launches(MODULES[task]))


@needs_gpu
def test_gpu_the_launch_record_counts_every_call_of_a_seen_problem(fresh_plans, monkeypatch):
    # The grader voids a task whose call launched none of its own kernels: a
    # call of a problem seen before must still count its (bound) launches.
    import triton.runtime.interpreter as interpreter
    import triton.runtime.jit as jit
    from triton.compiler.compiler import CompiledKernel

    from grader.worker.evidence import LaunchRecorder

    for cls in (jit.JITFunction, interpreter.InterpretedFunction):
        monkeypatch.setattr(cls, "run", cls.run)
    monkeypatch.setattr(CompiledKernel, "__getitem__", CompiledKernel.__getitem__)
    rec = LaunchRecorder(own_prefix="solutions.")
    rec.install()
    args, _ = problem("w8a8", (1, 4096, 4096), SEED)
    for _ in range(3):
        rec.reset()
        w8a8_solution.w8a8_mm(*args)
        assert rec.own() == 2 and not rec.foreign()


@needs_gpu
def test_gpu_graph_capture_of_bound_launches(fresh_plans):
    args, _ = problem("w4a16", (1, 4096, 4096), SEED)
    expected = w4a16_solution.w4a16_mm(*args)   # plan made, kernels bound
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = w4a16_solution.w4a16_mm(*args)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, expected)
