"""What a call did, recorded in the child: Triton launches and PyTorch ops.

Both recorders are installed before the submission is imported. They live in
the submission's own process, so they raise the bar rather than prove
anything; docs/integrity.md says what they do and do not guarantee.

The op recorder sees every PyTorch op of the call's thread, wherever it is
issued: the wrapper, a grid callable or a heuristic Triton calls during a
launch, an argument's method, a launch hook, a helper a kernel calls in the
interpreter. Triton's own work is left out by what it is, not by when it runs:
what Triton's runtime does during a launch is allocation, views and copies
(never counted as compute, whoever issues them), and the one place Triton
computes with PyTorch, its benchmark's statistics, is known by the file that
issues it (fence.TRITON_OWN_COMPUTE).
"""

from __future__ import annotations

import functools
import os
import sys
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from .fence import TRITON_OWN_COMPUTE

# PyTorch ops that do the matrix product for you; none may run inside a graded call.
LIBRARY_MATMUL_OPS = {
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "matmul",
    "linear", "einsum", "tensordot", "addr", "outer", "inner", "kron", "chain_matmul",
    "_int_mm", "_scaled_mm", "_weight_int4pack_mm", "_weight_int4pack_mm_for_cpu",
    "_weight_int8pack_mm", "_addmm_activation", "to_dense", "_to_dense",
    "_sparse_mm", "_sparse_addmm", "sparse_sampled_addmm", "_sparse_csr_mm",
}
# Ops that only allocate, fill or re-view memory; big outputs of these are fine.
_NON_COMPUTE = {
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "full", "full_like", "fill_", "zero_", "scalar_tensor", "arange", "detach",
    "view", "_unsafe_view", "as_strided", "t", "transpose", "permute", "expand", "alias",
    "_reshape_alias", "slice", "select", "unsqueeze", "squeeze", "values", "crow_indices",
    "col_indices", "lift_fresh", "contiguous", "clone", "copy_", "_to_copy", "set_",
}
# The PyTorch ops a wrapper may run (the handout's list: allocation, views, copies and
# conversions, the index helpers), by the name of the op the wrapper calls: on a GPU the
# kernels these launch may run in a checked call (trace.py); any other op's may not.
WRAPPER_OPS = _NON_COMPUTE | {
    "ones_like", "new_ones", "new_full", "lift_fresh_copy",
    "detach_", "to", "type_as", "reshape", "numpy_T", "mT", "flatten", "unflatten", "expand_as", "view_as",
    "reshape_as", "narrow", "split", "chunk", "unbind", "item", "_local_scalar_dense",
    "cat", "stack", "diff", "repeat_interleave", "sort", "argsort",
}
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_HERE = os.path.abspath(__file__)
MAX_SITES = 3


def _op_name(func) -> str:
    return func._schema.name.split("::")[-1]


def _triton_dir() -> str:
    import triton

    return os.path.dirname(os.path.abspath(triton.__file__)) + os.sep


def _issuer():
    """The innermost Python frame that issued the op being dispatched: the first one
    outside torch's own Python code and this file (None if there is none)."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if not (name.startswith(_TORCH_DIR) or name == _HERE):
            return f
        f = f.f_back
    return None


def _site(frame, triton_dir: str) -> tuple[bool, str]:
    """(whether the op is Triton's own compute, where it was issued, in words)."""
    if frame is None:
        return False, "?"
    name = frame.f_code.co_filename
    if name.startswith(triton_dir):
        rel = name[len(triton_dir):]
        return rel in TRITON_OWN_COMPUTE, f"triton/{rel}:{frame.f_lineno} (Triton calling code it was given)"
    return False, f"{os.path.basename(name)}:{frame.f_lineno} in {frame.f_code.co_name}"


class OpRecorder(TorchDispatchMode):
    """Records the name and largest output size of every PyTorch op in a call, and
    how many elements the compute ops (not allocation, views or copies) produced
    in all: a product computed in PyTorch, a K-loop of rank-1 updates say, shows
    there however it is spelled, and wherever in the call it runs. ``sites``
    says where the compute ops were issued (file:line, by elements produced)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.largest: dict[str, int] = {}
        self.computed = 0
        self.sites: Counter = Counter()
        self._triton_dir = _triton_dir()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = _op_name(func)
        if name in _NON_COMPUTE:
            self.ops[name] += 1
            return out
        triton_own, site = _site(_issuer(), self._triton_dir)
        if triton_own:
            return out
        self.ops[name] += 1
        outs = out if isinstance(out, (tuple, list)) else (out,)
        sizes = [o.numel() for o in outs if isinstance(o, torch.Tensor)]
        self.largest[name] = max([self.largest.get(name, 0), *sizes])
        self.computed += sum(sizes)
        self.sites[site] += sum(sizes)
        return out

    def top_sites(self) -> list[str]:
        """Where the compute ops that produced the most elements were issued."""
        return [f"{site} ({n} elements)" for site, n in self.sites.most_common(MAX_SITES)]

    def host_reads(self) -> int:
        """Values read from tensors into Python numbers (``.item()``, ``float(t)``, ``int(t)``,
        a tensor in an ``if``, printing one: each ends in ``_local_scalar_dense``)."""
        return self.ops.get("_local_scalar_dense", 0)

    def library_matmuls(self) -> list[str]:
        return sorted(n for n in self.ops if n in LIBRARY_MATMUL_OPS or "conv" in n)

    def oversized(self, limit: int) -> list[str]:
        """Compute ops whose output had more than ``limit`` elements."""
        return sorted(f"{n} ({k} elements)" for n, k in self.largest.items() if k > limit)


class LaunchRecorder:
    """Counts Triton kernel launches, by kernel and by defining module, and on a
    GPU keeps the names of the submission's compiled kernels (the kernel trace
    knows them by these names). An active OpRecorder stays on during a launch:
    what code the submission gave Triton computes there is recorded."""

    def __init__(self, own_prefix: str, on_launch=None):
        self.own_prefix = own_prefix
        self.launches: Counter = Counter()
        self.kernel_names: set[str] = set()   # GPU: CompiledKernel.name of every own launch
        # Called after every launch as on_launch(fn, args, kwargs, result), result
        # None if the launch raised (compile.record); its failures are ignored.
        self.on_launch = on_launch

    def install(self) -> None:
        import triton.runtime.interpreter as interpreter
        import triton.runtime.jit as jit

        recorder = self
        for cls in (jit.JITFunction, interpreter.InterpretedFunction):
            original = cls.run

            @functools.wraps(original)   # the same signature: fence.probe still recognizes run
            def run(self, *args, _original=original, **kwargs):
                key = recorder._count(getattr(self, "fn", None))
                result = None
                try:
                    result = _original(self, *args, **kwargs)
                    recorder._own_kernel(key, result)
                    return result
                finally:
                    if recorder.on_launch is not None:
                        try:   # the grader's own record of the launch is not the submission's work
                            with _disable_current_modes():
                                recorder.on_launch(self, args, kwargs, result)
                        except Exception:  # noqa: BLE001 - evidence never breaks a launch
                            pass

            cls.run = run

    def _count(self, fn) -> str:
        """One launch of the Python function ``fn`` behind a kernel (None: unknown); its key."""
        key = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"
        self.launches[key] += 1
        return key

    def _own_kernel(self, key: str, compiled) -> None:
        """Keep the name of a compiled kernel of the submission's (the GPU trace knows its kernels by it)."""
        name = getattr(compiled, "name", None)
        if isinstance(name, str) and key.startswith(self.own_prefix):
            self.kernel_names.add(name)

    def reset(self) -> None:
        self.launches.clear()

    def own(self) -> int:
        return sum(n for k, n in self.launches.items() if k.startswith(self.own_prefix))

    def foreign(self) -> list[str]:
        return sorted(k for k in self.launches if not k.startswith(self.own_prefix))
