"""The CPU worker's call: the wrapper runs on shape-only tensors, its launches become a program.

On the CPU the submission's host code never holds an input value. The worker
builds every input as a tensor on PyTorch's ``meta`` device (shape, dtype and
strides, no memory) and calls the entry point on those. While it runs:

- a PyTorch op that allocates, views, copies or casts runs on the meta device
  and is written down (allocations, copies and fills as steps of the program;
  views need no step: a launch names its tensors by storage, offset, sizes and
  strides); any other op is refused with ``HostComputeRefused`` (the handout's
  list: the wrapper allocates, views, copies and casts; kernels compute);
- reading a value into Python (``.item()``, ``int(t)``, ``if t:``) cannot
  happen: a meta tensor has no values (``ValuesUnavailable`` says why);
- each kernel launch (``kernel[grid](...)``) is written down with its grid,
  arguments and options instead of running; an autotuned launch is written
  once per config (its ``pre_hook`` included), as a choice the executor makes.

The program is plain JSON. The harness hands it to the executor (executor.py),
a process of its own that holds the real inputs, compiles each launch's kernel
for the GPU first and runs it in the interpreter. What the executor sees never
comes back to this process: the submission's wrapper cannot compute the
product because it never sees the numbers (docs/integrity.md).

This file runs in the untrusted worker and depends on torch and triton only.
"""

from __future__ import annotations

import base64
import contextlib
import inspect
import math
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from .layout import DTYPES, dtype_name

# Ops that only reinterpret memory (no step: launches name storage, offset, sizes, strides).
VIEW_OPS = {
    "view", "_unsafe_view", "as_strided", "t", "transpose", "permute", "expand", "alias", "detach",
    "_reshape_alias", "slice", "select", "unsqueeze", "squeeze", "narrow", "split", "split_with_sizes",
    "chunk", "unbind", "unflatten", "view_as", "expand_as", "values", "crow_indices", "col_indices",
    "ccol_indices", "row_indices", "_values", "numpy_T", "mT", "diagonal", "unfold", "movedim",
    "lift_fresh", "_nested_view_from_buffer", "view_as_real", "view_as_complex",
}
# Ops that answer a question about shapes (no tensor out, or the same tensor).
SHAPE_OPS = {"is_same_size", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "_nnz", "dense_dim",
             "sparse_dim", "is_coalesced", "_has_compatible_shallow_copy_type", "is_nonzero_meta"}
# Ops that allocate (uninitialised, zeros, a constant, an index range) or move bytes
# (copies, casts, fills, concatenation): a step each, replayed on the real tensors.
STEP_OPS = {
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "scalar_tensor", "arange",
    "fill_", "zero_", "copy_", "_to_copy", "clone", "contiguous", "lift_fresh_copy", "cat", "stack",
    "_copy_from", "_copy_from_and_resize", "resize_", "to", "detach_copy", "alias_copy",
    "view_copy", "permute_copy", "transpose_copy", "t_copy", "expand_copy", "slice_copy", "select_copy",
    "unsqueeze_copy", "squeeze_copy", "set_",
}
MAX_CONSTANT_BYTES = 1 << 20   # a tensor made from Python numbers (not from an input) travels by value


class HostComputeRefused(RuntimeError):
    """A PyTorch op that computes ran in the wrapper during a CPU grade."""


class ValuesUnavailable(RuntimeError):
    """The wrapper asked for a tensor's values during a CPU grade."""


def _op_name(func) -> str:
    return func._schema.name.split("::")[-1]


class Program:
    """What one call of the wrapper did: steps (ops and launches) over numbered storages.

    A storage is numbered the first time a step makes it (``sid``); a tensor is
    ``{"s": sid, "off": elements, "size": [...], "stride": [...], "dtype": name}``.
    The inputs' storages are numbered ``"in<i>"`` (``"in<i>.crow"`` for a BSR
    argument's parts); storages the wrapper keeps from an earlier call keep their
    numbers, and the executor keeps their memory (a cached buffer stays cached)."""

    def __init__(self):
        self.sids: dict[int, str] = {}   # storage _cdata -> sid (all calls of this worker)
        self.keep: list = []             # one tensor per numbered storage: its _cdata is never reused
        self.next = 0
        self.steps: list = []
        self._stack: list[list] = []     # open branches of an autotuned launch

    # -- naming tensors ------------------------------------------------------
    def bind(self, t: torch.Tensor, sid: str | None = None) -> str:
        key = t.untyped_storage()._cdata
        if sid is None:
            sid = f"s{self.next}"
            self.next += 1
        self.sids[key] = sid
        self.keep.append(t)
        return sid

    def ref(self, t: torch.Tensor) -> dict:
        if t.layout != torch.strided:
            raise HostComputeRefused(f"a {t.layout} tensor was passed to a kernel: pass its parts "
                                     "(.crow_indices(), .col_indices(), .values())")
        if t.device.type != "meta":
            t = self.constant(t)
        sid = self.sids.get(t.untyped_storage()._cdata)
        if sid is None:
            raise HostComputeRefused("a tensor the grader cannot follow reached a kernel or an op (made outside "
                                     "PyTorch's ops?): make tensors with torch.empty/zeros/... in the wrapper")
        return {"s": sid, "off": t.storage_offset(), "size": list(t.shape), "stride": list(t.stride()),
                "dtype": dtype_name(t.dtype)}

    def constant(self, t: torch.Tensor) -> torch.Tensor:
        """A real tensor (made at import, or from Python numbers): its bytes go with the program."""
        with _disable_current_modes():
            dense = t.detach().contiguous().cpu()
            nbytes = dense.numel() * dense.element_size()
            if nbytes > MAX_CONSTANT_BYTES:
                raise HostComputeRefused(f"a tensor of {nbytes} bytes made outside the call reached it: "
                                         "allocate buffers in the wrapper (at most 1 MiB of constants)")
            twin = torch.empty_strided(dense.shape, dense.stride(), dtype=dense.dtype, device="meta")
            # Not .numpy(), which the wrapper's call refuses (shape_only).
            data = torch._C.TensorBase.numpy(dense.reshape(-1).view(torch.uint8)).tobytes() if nbytes else b""
        sid = self.bind(twin)
        self.emit({"const": sid, "dtype": dtype_name(dense.dtype), "size": list(dense.shape),
                   "data": base64.b64encode(data).decode()})
        return twin

    def input(self, spec: dict, i: int):
        """The meta twin of argument ``i`` of the harness's call description."""
        if "tensor" in spec:
            return self._meta(spec["tensor"], f"in{i}")
        bsr = spec["bsr"]
        parts = [self._meta(bsr[k], f"in{i}.{k}") for k in ("crow", "col", "values")]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.sparse_bsr_tensor(*parts, size=tuple(bsr["size"]), check_invariants=False)

    def _meta(self, spec: dict, sid: str) -> torch.Tensor:
        t = torch.empty_strided(tuple(spec["shape"]), tuple(spec["stride"]), dtype=DTYPES[spec["dtype"]],
                                device="meta")
        self.bind(t, sid)
        return t

    # -- steps ---------------------------------------------------------------
    def emit(self, step: dict) -> None:
        (self._stack[-1] if self._stack else self.steps).append(step)

    @contextlib.contextmanager
    def branch(self):
        self._stack.append([])
        try:
            yield self._stack[-1]
        finally:
            self._stack.pop()

    def take(self) -> list:
        steps, self.steps = self.steps, []
        return steps

    # -- values of op arguments and launch arguments ----------------------------
    def value(self, v):
        """A Python value as JSON the executor turns back (tensors by reference)."""
        if isinstance(v, torch.Tensor):
            return {"t": self.ref(v)}
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"float": repr(v)}
        if isinstance(v, (list, tuple)):
            return {"tuple" if isinstance(v, tuple) else "list": [self.value(x) for x in v]}
        if isinstance(v, torch.dtype):
            return {"dtype": dtype_name(v)}
        if isinstance(v, torch.device):
            return {"device": "cpu"}
        if isinstance(v, torch.memory_format):
            return {"memory_format": str(v).removeprefix("torch.")}
        if isinstance(v, torch.layout):
            return {"layout": str(v).removeprefix("torch.")}
        return self._triton_value(v)

    def _triton_value(self, v):
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction

        if isinstance(v, tl.constexpr):
            return self.value(v.value)
        if isinstance(v, tl.dtype):
            return {"tl_dtype": v.name}
        if isinstance(v, InterpretedFunction):
            return {"jit": kernel_ref(v.fn)}
        desc = _descriptor(v)
        if desc is not None:
            return {"descriptor": {"base": self.ref(desc.base), "shape": list(desc.shape),
                                   "strides": list(desc.strides), "block_shape": list(desc.block_shape),
                                   "padding": getattr(desc, "padding", "zero")}}
        raise HostComputeRefused(f"a {type(v).__name__} was passed to a kernel or an op: pass tensors, "
                                 "numbers, booleans, dtypes, tuples of these or tensor descriptors")


def _descriptor(v):
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # pragma: no cover - an older Triton
        return None
    return v if isinstance(v, TensorDescriptor) else None


def kernel_ref(fn) -> dict:
    """Which @triton.jit function: its name and the line of its ``def`` in the kernel file."""
    code = fn.__code__
    return {"name": fn.__name__, "line": code.co_firstlineno, "file": code.co_filename}


class ShapeMode(TorchDispatchMode):
    """Every PyTorch op of the call: run on meta tensors, written down, or refused."""

    def __init__(self, program: Program):
        super().__init__()
        self.program = program

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = _op_name(func)
        if name in ("_local_scalar_dense", "item", "is_nonzero", "equal", "tolist"):
            raise ValuesUnavailable(VALUES_MESSAGE)
        if name in VIEW_OPS or name in SHAPE_OPS:
            return func(*self._meta_args(args), **self._meta_kwargs(kwargs))
        if name not in STEP_OPS:
            raise HostComputeRefused(
                f"torch op '{name}' computes on the host: the wrapper may allocate (torch.empty, zeros, full, "
                "arange, ...), view (.view, .t(), .reshape, ...), copy and cast (.contiguous(), .to(), .clone(), "
                ".copy_(), .fill_(), torch.cat/stack); everything else belongs in a Triton kernel (handout: "
                "'What a kernel file may use')")
        args, kwargs = self._meta_args(args), self._meta_kwargs(kwargs)
        out = func(*args, **kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        step = {"op": f"{name}.{func._overloadname}", "args": self.program.value(list(args)),
                "kwargs": {k: self.program.value(v) for k, v in kwargs.items()}, "out": []}
        for o in outs:
            if not isinstance(o, torch.Tensor):
                continue
            known = self.program.sids.get(o.untyped_storage()._cdata)
            step["out"].append({"new": self.program.bind(o)} if known is None else {"same": known})
            step["out"][-1]["ref"] = self.program.ref(o)
        self.program.emit(step)
        return out

    def _meta_args(self, args):
        return [self._meta(a) for a in args]

    def _meta_kwargs(self, kwargs):
        return {k: self._meta(v) for k, v in kwargs.items()}

    def _meta(self, v):
        if isinstance(v, torch.device):
            return torch.device("meta")
        if isinstance(v, torch.Tensor) and v.device.type != "meta" and v.layout == torch.strided:
            return self.program.constant(v)
        if isinstance(v, (list, tuple)):
            return type(v)(self._meta(x) for x in v)
        return v


class Launches:
    """While installed, a launch is written into the program instead of running."""

    def __init__(self, program: Program, on_launch=None):
        self.program = program
        self.on_launch = on_launch   # the compile check's record of each launch (the worker's rows)
        self._saved = []

    def install(self) -> None:
        from triton.runtime import autotuner
        from triton.runtime.interpreter import GridExecutor

        program, launches = self.program, self
        original_call, original_tune = GridExecutor.__call__, autotuner.Autotuner.run

        def grid_call(executor, *args, **kwargs):
            launches.launch(executor, args, kwargs)

        def tune_run(tuner, *args, **kwargs):
            return launches.autotuned(tuner, args, kwargs)

        self._saved = [(GridExecutor, "__call__", original_call), (autotuner.Autotuner, "run", original_tune)]
        GridExecutor.__call__ = grid_call
        autotuner.Autotuner.run = tune_run
        self.program = program

    def restore(self) -> None:
        for owner, name, fn in self._saved:
            setattr(owner, name, fn)
        self._saved = []

    def launch(self, executor, args, kwargs) -> None:
        """One ``kernel[grid](...)`` of the interpreter's GridExecutor, written down."""
        fn = executor.fn
        names = inspect.getfullargspec(fn).args
        kwargs = {k: v for k, v in kwargs.items() if k in names}
        bound = inspect.getcallargs(fn, *args, **kwargs)   # the launch's own TypeError, as the GPU gives
        grid = executor.grid(dict(bound)) if callable(executor.grid) else executor.grid
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        if not 1 <= len(grid) <= 3 or not all(isinstance(g, int) and not isinstance(g, bool) for g in grid):
            raise ValueError(f"the grid must be a tuple of one to three ints, got {grid!r}")
        if any(g < 0 for g in grid):
            raise ValueError(f"the grid has a negative size: {grid!r}")
        self.program.emit({"launch": kernel_ref(fn), "grid": list(grid),
                           "args": {k: self.program.value(v) for k, v in bound.items()}})

    def autotuned(self, tuner, args, kwargs):
        """An autotuned launch: one branch per config; the executor runs the call once per config."""
        tuner.nargs = dict(zip(tuner.arg_names, args))
        configs = list(tuner.configs)
        if len(configs) > 1:
            try:
                configs = list(tuner.prune_configs(kwargs))
            except Exception:  # noqa: BLE001 - a perf model that needs a GPU: every config is checked
                configs = list(tuner.configs)
        branches = []
        for config in configs:
            with self.program.branch() as steps:
                full = {**tuner.nargs, **kwargs, **config.all_kwargs()}
                if config.pre_hook is not None:
                    config.pre_hook(full)
                tuner.fn.run(*args, **kwargs, **config.all_kwargs())
            branches.append({"config": describe_config(config), "steps": steps})
        tuner.nargs = None
        tuner.best_config = configs[0]
        self.program.emit({"choice": getattr(tuner.base_fn, "__name__", "?"), "branches": branches})


def describe_config(config) -> str:
    """An autotune config as its report names it: "BLOCK=64, num_warps=4, num_stages=3"."""
    items = [f"{k}={v}" for k, v in config.kwargs.items()]
    items += [f"num_warps={config.num_warps}", f"num_stages={config.num_stages}"]
    return ", ".join(items)


def choices(steps: list) -> int:
    """How many runs check every config: the most branches of any autotuned launch."""
    n = 1
    for step in steps:
        if "choice" in step:
            n = max(n, len(step["branches"]), *(choices(b["steps"]) for b in step["branches"]))
    return n


VALUES_MESSAGE = ("the wrapper read a tensor's value into Python (.item(), int(t), float(t), a tensor in an `if`, "
                  ".tolist(), .numpy()): during grading the wrapper sees each input's shape, dtype and strides "
                  "only, never its values. Read values inside a kernel (tl.load); size grids and buffers from "
                  "shapes")
# Ways to a tensor's values that do not go through PyTorch's dispatcher: refused by name.
_READERS = ("tolist", "numpy", "__array__")


def _refuse_values(*_args, **_kwargs):
    raise ValuesUnavailable(VALUES_MESSAGE)


@contextlib.contextmanager
def shape_only(program: Program, on_launch=None):
    """The wrapper's call, shape-only: ops on meta tensors, launches written down."""
    launches = Launches(program, on_launch)
    launches.install()
    saved = {name: vars(torch.Tensor).get(name) for name in _READERS}
    for name in _READERS:
        setattr(torch.Tensor, name, _refuse_values)
    try:
        with ShapeMode(program):
            yield
    finally:
        for name, fn in saved.items():
            if fn is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, fn)
        launches.restore()
