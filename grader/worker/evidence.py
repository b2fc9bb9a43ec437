"""What a call did, recorded in the child: Triton launches and PyTorch ops.

Both recorders are installed before the submission is imported. They live in
the submission's own process, so they raise the bar rather than prove
anything; docs/integrity.md says what they do and do not guarantee.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

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
    "col_indices", "lift_fresh", "contiguous", "clone", "copy_", "_to_copy",
}


def _op_name(func) -> str:
    return func._schema.name.split("::")[-1]


class OpRecorder(TorchDispatchMode):
    """Records the name and largest output size of every PyTorch op in a call, and
    how many elements the compute ops (not allocation, views or copies) produced
    in all: a product computed in PyTorch, a K-loop of rank-1 updates say, shows
    there however it is spelled."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.largest: dict[str, int] = {}
        self.computed = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = _op_name(func)
        self.ops[name] += 1
        if name not in _NON_COMPUTE:
            outs = out if isinstance(out, (tuple, list)) else (out,)
            sizes = [o.numel() for o in outs if isinstance(o, torch.Tensor)]
            self.largest[name] = max([self.largest.get(name, 0), *sizes])
            self.computed += sum(sizes)
        return out

    def library_matmuls(self) -> list[str]:
        return sorted(n for n in self.ops if n in LIBRARY_MATMUL_OPS or "conv" in n)

    def oversized(self, limit: int) -> list[str]:
        """Compute ops whose output had more than ``limit`` elements."""
        return sorted(f"{n} ({k} elements)" for n, k in self.largest.items() if k > limit)


class LaunchRecorder:
    """Counts Triton kernel launches, by kernel and by defining module, and
    keeps an active OpRecorder out of the launch itself."""

    def __init__(self, own_prefix: str, on_launch=None):
        self.own_prefix = own_prefix
        self.launches: Counter = Counter()
        # Called after every launch as on_launch(fn, args, kwargs, result), result
        # None if the launch raised (compile.record); its failures are ignored.
        self.on_launch = on_launch

    def install(self) -> None:
        import triton.runtime.interpreter as interpreter
        import triton.runtime.jit as jit
        from triton.compiler.compiler import CompiledKernel

        recorder = self
        for cls in (jit.JITFunction, interpreter.InterpretedFunction):
            original = cls.run

            def run(self, *args, _original=original, **kwargs):
                recorder._count(getattr(self, "fn", None))
                # What Triton does inside a launch (the CPU interpreter copies
                # tensors with PyTorch ops) is not the submission's PyTorch work.
                result = None
                try:
                    with _disable_current_modes():
                        result = _original(self, *args, **kwargs)
                    return result
                finally:
                    if recorder.on_launch is not None:
                        try:
                            with _disable_current_modes():
                                recorder.on_launch(self, args, kwargs, result)
                        except Exception:  # noqa: BLE001 - evidence never breaks a launch
                            pass

            cls.run = run

        # A kernel compiled by an earlier launch (what ``kernel[grid](...)``
        # returns) can be launched again as ``compiled[grid](...)``, which the
        # allowlist permits and which skips JITFunction.run: the reference
        # launches its kernels that way once their problem has been seen.
        original_getitem = CompiledKernel.__getitem__

        def getitem(self, grid, _original=original_getitem):
            runner = _original(self, grid)
            fn = getattr(getattr(getattr(self, "src", None), "fn", None), "fn", None)

            def counted(*args, **kwargs):
                recorder._count(fn)
                with _disable_current_modes():
                    return runner(*args, **kwargs)
            return counted

        CompiledKernel.__getitem__ = getitem

    def _count(self, fn) -> None:
        """One launch of the Python function ``fn`` behind a kernel (None: unknown)."""
        self.launches[f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"] += 1

    def reset(self) -> None:
        self.launches.clear()

    def own(self) -> int:
        return sum(n for k, n in self.launches.items() if k.startswith(self.own_prefix))

    def foreign(self) -> list[str]:
        return sorted(k for k in self.launches if not k.startswith(self.own_prefix))
