"""The private Triton APIs the worker patches or calls, in one place, with the Triton versions they were tested on.

The worker's checks hook into Triton below its public API: the launch record
wraps ``run``, the interpreter's bounds check and data
movement wrap its builder, the launch capture intercepts the interpreter's
launches and the autotuner's trials and counts sampled programs on the
builder, the compile check calls Triton's binder and its backend. A new Triton
may rename or reshape any of them. ``probe`` says, for the installed Triton,
which checks cannot install and why; the harness runs it
(trusted, the same Triton as the worker's), leaves those checks off in the
worker, and every report of the run says which check is off and why. A check
is never silently off.

    fence.probe("cpu")    -> {"bounds check": "this Triton (3.10.0) has no ...", ...}  ({} when all install)

Each entry of ``PRIVATE`` is (check, platform, module, attribute path, the
parameters the patch relies on or None). ``platform`` is "cpu" (the CPU
interpreter), "cuda" (a GPU run) or "both". Add an entry with every new patch:
tests/worker/test_fence.py checks that each patch the worker installs is listed here.

This file runs in the untrusted worker and in the trusted harness; it depends
on triton only.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import subprocess
import sys

# The Triton versions each platform's checks were run on (GPU: results/*.json; CPU: the CI venv).
TESTED_ON = {"cuda": ("3.6.0",), "cpu": ("3.6.0",)}

# What each check does for the grade when it is off (the report's sentence after "off:").
CHECKS = {
    "launch record": "no check that the submission launched its own Triton kernel",
    "bounds check": "out-of-bounds loads and stores are not caught in the interpreter",
    "data movement": "no data-movement table",
    "compile check": "kernels are not compiled for the GPU on a CPU run, nor captured at the GPU shapes",
    "launch capture": "what the wrapper launches at the GPU shapes is neither compiled nor estimated on a CPU run",
    "kernel trace": "no trace of the kernels that ran on the GPU during a checked call",
    "shape-only call": "a CPU run cannot call the wrapper on shape-only inputs (grading on the CPU fails)",
    # The harness's own (grader/harness/osfacts.py), listed here with the others for the reports.
    "threads and libraries": "no check that the kernel file starts no thread, process or library, at import "
                             "(a CPU run: nor during its calls) or while timed",
}

_RUN = ("grid", "warmup")                       # run(self, *args, grid, warmup, **kwargs)
# The leading parameters the patches read; the rest (cache_modifier, eviction_policy) pass through.
_LOAD = ("ptrs", "mask", "other", "cache_modifier", "eviction_policy", "is_volatile")
_STORE = ("ptrs", "value", "mask")
_RMW = ("rmwOp", "ptr", "val", "mask")
_CAS = ("ptr",)
_INTERP = "triton.runtime.interpreter"
_MEMORY = (
    (_INTERP, "InterpreterBuilder.create_masked_load", _LOAD),
    (_INTERP, "InterpreterBuilder.create_masked_store", _STORE),
    (_INTERP, "InterpreterBuilder.create_atomic_rmw", _RMW),
    (_INTERP, "InterpreterBuilder.create_atomic_cas", _CAS),
    (_INTERP, "TensorHandle", None),                       # a mask handle is built with it
    (_INTERP, "GridExecutor.__call__", None),              # one launch
    (_INTERP, "interpreter_builder", None),                # the builder a launch runs on
    (_INTERP, "InterpreterBuilder.set_grid_dim", ("nx", "ny", "nz")),  # its .grid_dim: the launch's grid
    (_INTERP, "InterpreterBuilder.set_grid_idx", ("x", "y", "z")),     # its .grid_idx: the program (races.py)
    ("triton.runtime.autotuner", "Autotuner._bench", None),  # trial launches, not the call's
)
# The launch capture (capture.py): its own patches, with the parameters they read or pass
# by name (a counted program's atomics read through create_masked_load). Every other
# create_* of the builder is wrapped by name with its arguments passed through.
_CAPTURE = (
    (_INTERP, "InterpreterBuilder.create_masked_load",
     ("ptrs", "mask", "other", "cache_modifier", "eviction_policy", "is_volatile")),
    (_INTERP, "InterpreterBuilder.create_masked_store", ("ptrs", "value", "mask")),
    (_INTERP, "InterpreterBuilder.create_atomic_rmw", ("rmwOp", "ptr", "val", "mask", "sem", "scope")),
    (_INTERP, "InterpreterBuilder.create_atomic_cas", ("ptr", "cmp", "val", "sem", "scope")),
    (_INTERP, "InterpreterBuilder.create_dot", ("a", "b", "d")),
    (_INTERP, "InterpreterBuilder.set_grid_dim", ("nx", "ny", "nz")),
    (_INTERP, "InterpreterBuilder.set_grid_idx", ("x", "y", "z")),
    (_INTERP, "InterpreterBuilder", None),                  # its create_* element operations, counted
    (_INTERP, "TensorHandle", None),
    (_INTERP, "interpreter_builder", None),
    (_INTERP, "GridExecutor.__call__", None),              # one launch, intercepted
    (_INTERP, "GridExecutor._init_args_hst", ("args_dev", "kwargs")),
    (_INTERP, "_implicit_cvt", ("arg",)),
    (_INTERP, "_patch_lang", ("fn",)),                     # a sampled program runs on the interpreter's tl
    (_INTERP, "_patch_lang_core", ("lang", "scope")),      # its tl.static_range, counted per unrolled copy
    ("triton.runtime.autotuner", "Autotuner.run", None),
    ("triton.runtime.autotuner", "Autotuner._bench", ("config",)),  # one captured launch per config
)
# The CPU call on shape-only tensors (shapes.py): launches written down, autotuned ones once per config;
# the executor's gate compiles each launch's kernel up to Triton IR (gate_child.py).
_SHAPES = (
    (_INTERP, "GridExecutor.__call__", None),               # one launch: written down, not run
    (_INTERP, "GridExecutor", None),                        # its .fn and .grid
    (_INTERP, "InterpretedFunction.rewrite", None),         # the executor finds a kernel by its def line
    (_INTERP, "FunctionRewriter._find_def", ("lines",)),    # kernels_only: the interpreter's reading of a kernel
    (_INTERP, "FunctionRewriter._prepare_source", ("lines",)),
    ("triton.runtime.autotuner", "Autotuner.run", None),
    ("triton.runtime.autotuner", "Autotuner.prune_configs", ("kwargs",)),
    ("triton.runtime.autotuner", "Config.all_kwargs", None),
    ("triton.backends.nvidia.compiler", "CUDABackend.make_ttgir", None),
)
PRIVATE = (
    ("launch record", "cuda", "triton.runtime.jit", "JITFunction.run", _RUN),
    ("launch record", "cpu", _INTERP, "InterpretedFunction.run", _RUN),
    *(("bounds check", "cpu", *m) for m in _MEMORY),
    *(("data movement", "cpu", *m) for m in _MEMORY),
    ("data movement", "cpu", _INTERP, "InterpreterBuilder.create_dot", ("a", "b")),
    ("compile check", "cpu", "triton.runtime.jit", "create_function_from_signature", ("sig", "kparams", "backend")),
    ("compile check", "cpu", "triton.runtime.jit", "JITFunction._pack_args", ("backend", "kwargs", "bound_args",
                                                                            "specialization", "options")),
    ("compile check", "cpu", "triton.compiler", "make_backend", None),
    ("compile check", "cpu", "triton.compiler", "ASTSource", None),
    ("compile check", "cpu", "triton.backends.compiler", "GPUTarget", None),
    ("compile check", "cpu", "triton.backends.nvidia.compiler", "CUDABackend.make_cubin",
     ("src", "metadata", "opt", "capability")),
    ("compile check", "cpu", "triton.knobs", "nvidia.dump_ptxas_log", None),
    *(("launch capture", "cpu", *m) for m in _CAPTURE),
    *(("shape-only call", "cpu", *m) for m in _SHAPES),
    # The trace knows the submission's kernels by the name their launch returns (CompiledKernel.name).
    ("kernel trace", "cuda", "triton.compiler.compiler", "CompiledKernel", None),
)


# Triton's own PyTorch compute, known by the file that issues it (relative to the triton
# package): the benchmark behind @triton.autotune computes its statistics with PyTorch
# (triton.testing.do_bench). Every other PyTorch op Triton issues during a launch is an
# allocation, a view or a copy (the interpreter's host copies), or comes from code the
# submission gave it (a grid, a hook, a heuristic, an argument's method): those count.
TRITON_OWN_COMPUTE = ("testing.py",)


# Patched where this Triton has them, with the checks that patch them and the parameters
# the patches read (an interpreter without create_dot_scaled, 3.6's, runs no tl.dot_scaled:
# there is nothing to count).
OPTIONAL = (
    (("data movement", "launch capture"), _INTERP,
     "InterpreterBuilder.create_dot_scaled", ("lhs", "lhs_scale_handle", "lhs_format_enum", "rhs")),
)


def tested_on(device: str) -> str:
    return ", ".join(TESTED_ON["cpu" if device == "cpu" else "cuda"])


def _resolve(module: str, path: str):
    obj = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _parameters(fn) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def problem(module: str, path: str, params) -> str | None:
    """Why ``module.path`` cannot be patched as the worker does, or None."""
    import triton

    where = f"{module}.{path}"
    try:
        obj = _resolve(module, path)
    except Exception as e:  # noqa: BLE001 - an import error, a missing attribute: the same answer
        return f"this Triton ({triton.__version__}) has no {where} ({type(e).__name__})"
    if params:
        try:
            have = _parameters(obj)
        except (TypeError, ValueError):
            return f"{where} has no signature to check in this Triton ({triton.__version__})"
        missing = [p for p in params if p not in have]
        if missing:
            return (f"in this Triton ({triton.__version__}) {where} takes ({', '.join(have)}), "
                    f"without {', '.join(missing)}")
    return None


def probe(device: str) -> dict[str, str]:
    """{check: why it is off} for the checks of ``device`` ("cpu" or "cuda") that cannot install
    on the installed Triton; {} when every one can. Never raises."""
    platform = "cpu" if device == "cpu" else "cuda"
    off: dict[str, str] = {}
    for checks, module, path, params in OPTIONAL if platform == "cpu" else ():
        why = problem(module, path, params)
        if why and "has no" not in why:   # there, but not as the patches read it: their checks are off
            for check in checks:
                off[check] = f"{why}; the grader's hook was tested on Triton {tested_on(device)}"
    for check, where, module, path, params in PRIVATE:
        if where not in (platform, "both") or check in off:
            continue
        try:
            why = problem(module, path, params)
        except Exception as e:  # noqa: BLE001 - a broken Triton: every check that needs it is off
            why = f"{module}.{path} could not be inspected ({type(e).__name__}: {e})"
        if why:
            off[check] = f"{why}; the grader's hook was tested on Triton {tested_on(device)}"
    return off


def sentence(check: str, why: str) -> str:
    """The report's line for a check that is off."""
    return f"{check} off ({CHECKS.get(check, 'a check of the grader')}): {why}"


# A kernel the interpreter must run: a range() over a loaded scalar, which Triton 3.6's
# interpreter cannot do under numpy >= 2.4 (the GPU machines of 2026-11 have both).
_INTERPRETER_PROBE = r'''
import torch, triton, triton.language as tl

@triton.jit
def k(p, n_ptr):
    n = tl.load(n_ptr)
    acc = 0.0
    for i in range(0, n, 2):
        acc += 1.0
    tl.store(p, acc)

out = torch.zeros(1)
k[(1,)](out, torch.tensor([4], dtype=torch.int32))
assert out.item() == 2.0
'''


@functools.lru_cache(maxsize=None)
def interpreter_problem(pythonpath: str | None = None) -> str:
    """Why Triton's CPU interpreter cannot run kernels on this machine, or "" when it can
    (one small kernel, run in a fresh process with TRITON_INTERPRET=1). ``pythonpath``:
    the PYTHONPATH the process gets instead of this one's; a grading worker gets its own
    (grader/harness/session.py), so packages that only this process's PYTHONPATH holds
    (a numpy pinned there, say) do not reach it."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    try:
        proc = subprocess.run([sys.executable, "-c", _INTERPRETER_PROBE], capture_output=True, text=True,
                              env=env, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"Triton's interpreter could not be tried here ({type(e).__name__})"
    if proc.returncode == 0:
        return ""
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return f"Triton's interpreter does not work here ({last[:200]})"
