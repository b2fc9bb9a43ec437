"""Who wrote the output, from what: provenance of a checked call's values, in the CPU interpreter.

    with Provenance(named, own_prefix="submission.") as p:   # patches the interpreter and
        y = kernel_wrapper(*args)                             # records host writes
        facts = p.report(y)     # {"elements", "unwritten", "foreign", "inputless"}

A forged call computes the answer somewhere else (Python numbers, a tensor
prepared before the call) and either returns it as it is or has a kernel copy
it into the output, while another kernel burns the FLOPs the arithmetic count
asks for. This module follows the values instead of counting work:

- **Memory.** Every byte the call can reach carries flags in a shadow:
  ``INPUT`` (its value comes from the call's inputs), ``FOREIGN`` (it comes
  from somewhere else: memory nobody wrote during the call, a host
  computation, a fill with a nonzero number, a tensor built from Python
  numbers) and ``KERNEL`` (the submission's own kernels stored it during the
  call). The inputs' bytes start as ``INPUT``; any byte not known starts
  ``FOREIGN``. Host writes during the call update the shadow (a PyTorch
  dispatch mode): allocations and zeros written carry nothing, copies and
  conversions carry their sources' flags element by element (``KERNEL``
  included), anything else the host computes is ``FOREIGN``.
- **Values.** Every value a kernel computes carries the same flags, per
  element: a load takes them from the shadow (masked-off lanes from ``other``),
  constants and ranges carry none, an element-wise result the union of its
  operands', ``tl.dot`` the union over the row and the column it sums, a
  reduction the union over its axis; ``tl.where`` carries its two branches',
  not its condition's (a mask chooses, it does not compute). A store of the
  submission's kernel writes the value's flags and ``KERNEL`` into the shadow.
  A value produced where this module has no rule carries ``FOREIGN``: an
  unknown path can only cost points, never launder data.
- **The output.** ``report(y)``: of the returned tensor's elements, how many
  the host wrote with data and no kernel of the submission stored after
  (``unwritten``), how many were stored from ``FOREIGN`` data (``foreign``),
  and how many finite nonzero ones were stored from no input at all
  (``inputless``: only constants). An element nobody wrote with data (an
  allocation or a zero fill the kernels skipped) is left to the check of the
  values: NaN where nothing was stored, right where a zero was the answer.
  Copies (``.to()``, ``clone``, ``copy_``) carry each element's own flags.

The same propagation tags every pointer with the tensor it was derived from
(``_pb``: first byte, past the last byte, the argument's key): the bounds
check (movement.py) holds each access to that tensor, so a read past the end
of x is out of bounds even where it lands inside another argument.

What it does not follow: control flow. A kernel that branches on a number it
was passed (``if bits & 1:``) and stores constants accordingly moves
information no data flow shows; getting that number to the kernel takes a
host computation of the product, which the op record's count of values read
into Python (``.item()``) sees (evidence.py, judge.py). docs/integrity.md
says what each layer proves.

Every private name patched here is listed in fence.py ("output provenance").
This file runs in the untrusted worker and depends on torch, triton and numpy only.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

INPUT, FOREIGN, KERNEL = 1, 2, 4
VALUE = INPUT | FOREIGN
MIXED = ("mixed",)            # a pointer derived from more than one tensor: bounds fall back to "any tensor"
MAX_ELEMENTS = 1 << 24        # outputs larger than this are not checked element by element
_ABSENT = object()

# Builder methods whose results carry no flags (constants, ranges, the program's coordinates).
CONSTANTS = {"get_int1", "get_uint8", "get_int8", "get_uint16", "get_int16", "get_uint32", "get_int32",
             "get_uint64", "get_int64", "get_fp16", "get_fp32", "get_fp64", "get_null_value",
             "get_all_ones_value", "create_get_program_id", "create_get_num_programs", "create_make_range"}
# The element-wise leaves that the builder's one-line methods delegate to (create_fadd -> binary_op):
# a method that only calls one of these is left to it.
LEAVES = ("binary_op", "unary_op", "ternary_op", "cast_impl", "create_idiv")
# Methods with a rule of their own below, and those that produce no value.
SPECIAL = {"create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas", "create_dot",
           "create_dot_scaled", "create_reshape", "create_trans", "create_expand_dims", "create_broadcast",
           "create_cat", "create_join", "create_split", "create_gather", "ternary_op", "create_print",
           "create_assert", "create_assume", "create_barrier", "create_load", "create_store",
           "create_tensor_pointer_load", "create_tensor_pointer_store", "create_descriptor_load",
           "create_descriptor_store", "create_descriptor_gather", "create_descriptor_scatter"}

# Host ops (PyTorch, during the call), by what their written tensors then hold.
ALLOCATIONS = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "empty_permuted",
               "zeros", "zeros_like", "new_zeros", "resize_"}    # uninitialised memory reads NaN (deterministic mode)
FILLS = {"fill_": "value", "full": "fill_value", "full_like": "fill_value", "new_full": "fill_value",
         "ones": 1, "ones_like": 1, "new_ones": 1, "zero_": 0, "scalar_tensor": "s", "fill": "value"}
COPIES = {"copy_", "clone", "_to_copy", "cat", "stack", "index_select", "index", "narrow_copy", "repeat",
          "expand_copy", "_reshape_copy", "lift_fresh_copy", "_copy_from", "_copy_from_and_resize", "sort",
          "repeat_interleave", "alias_copy", "as_strided_copy", "detach_copy", "permute_copy", "select_copy",
          "slice_copy", "split_copy", "squeeze_copy", "t_copy", "transpose_copy", "unbind_copy",
          "unsqueeze_copy", "view_copy", "_unsafe_view", "flip", "roll"}
# In-place ops that change a tensor's metadata, not its data.
METADATA = {"set_", "as_strided_", "squeeze_", "unsqueeze_", "transpose_", "t_", "detach_", "swapaxes_",
            "swapdims_", "requires_grad_", "_set_conj", "_set_neg", "_coalesced_"}


# ----------------------------------------------------------------------------- flags of values

_TH = _BPH = _TDH = None   # the interpreter's handle classes, looked up when a Provenance installs


def _classes() -> None:
    global _TH, _BPH, _TDH
    import triton.runtime.interpreter as interp

    _TH, _BPH, _TDH = interp.TensorHandle, interp.BlockPointerHandle, interp.TensorDescHandle


def _flags(h):
    """A handle's value flags: an int (every element alike) or a uint8 array; FOREIGN if unknown."""
    f = getattr(h, "_pf", None)
    return FOREIGN if f is None else f


def _compact(f):
    """An array whose elements are all alike, as one int."""
    if isinstance(f, np.ndarray):
        if f.size == 0:
            return 0
        first = int(f.flat[0])
        if not (f != first).any():
            return first
    return f


def _uniform(f) -> int:
    """The union of a flag array's elements."""
    if isinstance(f, np.ndarray):
        return int(np.bitwise_or.reduce(f, axis=None)) if f.size else 0
    return int(f)


def _union(flags, shape):
    """The union of ``flags`` element by element, broadcast to ``shape`` (where one
    does not broadcast, its union over every element counts for all)."""
    if all(isinstance(f, int) for f in flags):
        acc = 0
        for f in flags:
            acc |= f
        return acc
    acc = 0
    for f in flags:
        if isinstance(f, np.ndarray):
            try:
                f = np.broadcast_to(f, shape)
            except ValueError:
                f = _uniform(f)
        acc = (acc | f) if isinstance(acc, int) and isinstance(f, int) else np.bitwise_or(acc, f)
    if isinstance(acc, np.ndarray) and acc.shape != tuple(shape):
        acc = np.broadcast_to(acc, shape)
    return _compact(acc)


def _pointer_base(handles):
    """The tensor the handles' pointers come from: one base, MIXED, or None (no pointer)."""
    found = None
    for h in handles:
        b = getattr(h, "_pb", None)
        if b is None:
            continue
        if found is None:
            found = b
        elif b != found:
            return MIXED
    return found


def _handles(value, out: list) -> list:
    """The interpreter's TensorHandles in an argument (lists, tuples, block pointers, descriptors)."""
    if isinstance(value, _TH):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _handles(v, out)
    elif isinstance(value, (_BPH, _TDH)):
        _handles([value.base, *value.shape, *value.strides], out)
        if isinstance(value, _BPH):
            _handles(value.offsets, out)
    return out


def _set(h, flags, base=None) -> None:
    """Give an output handle its flags (and pointer base)."""
    if isinstance(h, _TH):
        h._pf = flags
        if base is not None:
            h._pb = base
    elif isinstance(h, (tuple, list)):
        for x in h:
            _set(x, flags if isinstance(flags, int) else _uniform(flags), base)


# ----------------------------------------------------------------------------- the memory shadow

class _Region:
    """The flags of one storage's bytes: one int while all are alike, else an array."""
    __slots__ = ("start", "end", "uniform", "arr")

    def __init__(self, start: int, end: int, flags: int):
        self.start, self.end, self.uniform, self.arr = start, end, flags, None

    def array(self) -> np.ndarray:
        if self.arr is None:
            self.arr = np.full(self.end - self.start, self.uniform, dtype=np.uint8)
            self.uniform = None
        return self.arr


class Shadow:
    """Flags of every byte the call can reach, region by region (a storage, an input)."""

    def __init__(self):
        self.regions: list[_Region] = []
        self.starts = np.zeros(0, dtype=np.uint64)
        self.ends = np.zeros(0, dtype=np.uint64)

    def add(self, start: int, end: int, flags: int) -> _Region | None:
        """A region of bytes [start, end) with ``flags``; None where it would overlap one known."""
        if end <= start:
            return None
        i = int(np.searchsorted(self.starts, np.uint64(start), side="right"))
        if (i > 0 and int(self.ends[i - 1]) > start) or (i < len(self.regions) and int(self.starts[i]) < end):
            return None
        r = _Region(start, end, flags)
        self.regions.insert(i, r)
        self.starts = np.insert(self.starts, i, np.uint64(start))
        self.ends = np.insert(self.ends, i, np.uint64(end))
        return r

    def region(self, addr: int) -> _Region | None:
        i = int(np.searchsorted(self.starts, np.uint64(addr), side="right")) - 1
        if i >= 0 and addr < int(self.ends[i]):
            return self.regions[i]
        return None

    def _index(self, addr: np.ndarray):
        """(region index per address, -1 outside every region)."""
        if not self.regions:
            return np.full(addr.shape, -1, dtype=np.int64)
        idx = np.searchsorted(self.starts, addr, side="right").astype(np.int64) - 1
        ok = idx >= 0
        ok[ok] = addr[ok] < self.ends[idx[ok]]
        idx[~ok] = -1
        return idx

    def read(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        """Flags per address of the ``nbytes`` there: value bits of any byte, KERNEL only if all have it."""
        addr = np.asarray(addr, dtype=np.uint64).reshape(-1)
        if addr.size == 0:
            return np.zeros(0, dtype=np.uint8)
        lo, hi = int(addr.min()), int(addr.max()) + nbytes
        r = self.region(lo)
        if r is not None and hi <= r.end:                # the usual case: one region
            if r.arr is None:
                return np.full(addr.shape, r.uniform, dtype=np.uint8)
            return self._bytes(r.arr, (addr - np.uint64(r.start)).astype(np.int64), nbytes)
        out = np.full(addr.shape, FOREIGN, dtype=np.uint8)
        for b in range(nbytes):   # bytes may straddle regions: each byte on its own
            at = addr + np.uint64(b)
            idx = self._index(at)
            f = np.full(addr.shape, FOREIGN, dtype=np.uint8)
            for j in np.unique(idx[idx >= 0]):
                r = self.regions[int(j)]
                sel = idx == j
                f[sel] = r.uniform if r.arr is None else r.arr[(at[sel] - np.uint64(r.start)).astype(np.int64)]
            out = (out | f) & VALUE | (out & f & KERNEL) if b else f
        return out

    @staticmethod
    def _bytes(arr, off, nbytes):
        f = arr[off]
        if nbytes > 1:
            acc_or, acc_and = f.copy(), f.copy()
            for b in range(1, nbytes):
                g = arr[off + b]
                acc_or |= g
                acc_and &= g
            f = (acc_or & VALUE) | (acc_and & KERNEL)
        return f

    def write(self, addr: np.ndarray, nbytes: int, flags) -> None:
        """Set the flags of ``nbytes`` at each address (flags: an int, or one per address)."""
        addr = np.asarray(addr, dtype=np.uint64).reshape(-1)
        if addr.size == 0:
            return
        flags = flags if isinstance(flags, int) else np.asarray(flags, dtype=np.uint8).reshape(-1)
        idx = self._index(addr)
        for j in np.unique(idx[idx >= 0]):
            r = self.regions[int(j)]
            sel = idx == j
            off = (addr[sel] - np.uint64(r.start)).astype(np.int64)
            value = flags if isinstance(flags, int) else flags[sel]
            if isinstance(value, int) and r.arr is None and r.uniform == value:
                continue
            arr = r.array()
            for b in range(nbytes):
                ok = off + b < len(arr)
                arr[(off + b)[ok]] = value if isinstance(value, int) else value[ok]

    def write_span(self, start: int, end: int, flags: int) -> None:
        """Set the flags of every byte in [start, end) (a contiguous host write)."""
        r = self.region(start)
        if r is None or end <= start:
            return
        end = min(end, r.end)
        if start == r.start and end == r.end:
            r.uniform, r.arr = flags, None
        elif r.arr is not None or r.uniform != flags:
            r.array()[start - r.start:end - r.start] = flags


def tensor_range(t) -> tuple[int, int]:
    """[first byte, past the last byte] that the view ``t`` spans."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    extent = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + extent * t.element_size()


def element_addresses(t) -> np.ndarray:
    """The address of each element of ``t`` (row-major order), as uint64."""
    offs = np.zeros((), dtype=np.int64)
    for size, stride in zip(t.shape, t.stride()):
        offs = offs[..., None] + np.arange(size, dtype=np.int64) * stride
    return (np.uint64(t.data_ptr()) + (offs.reshape(-1) * t.element_size()).astype(np.uint64))


def _tensors(value, out: list) -> list:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, out)
    return out


# ----------------------------------------------------------------------------- host writes

_WRITES: dict = {}   # op -> whether it writes a tensor (from its schema)
# Copies of one tensor into another of its shape (or a broadcast of it): element by element.
ELEMENTWISE = {"copy_", "clone", "_to_copy", "_copy_from", "_copy_from_and_resize", "lift_fresh_copy",
               "detach_copy", "alias_copy", "view_copy", "_reshape_copy", "expand_copy"}


def _shaped(each, shape):
    """Per-element flags ``each`` as ``shape`` (the same elements, or broadcast), or None."""
    if each is None:
        return None
    if each.size == int(np.prod(shape, dtype=np.int64)):
        return each.reshape(shape)
    try:
        return np.broadcast_to(each, shape)
    except ValueError:
        return None

class _HostWrites(TorchDispatchMode):
    """Keeps the shadow of what the host writes during the call (see the module docstring)."""

    def __init__(self, owner: "Provenance"):
        super().__init__()
        self.owner = owner
        import triton
        here = os.path.dirname(os.path.abspath(triton.__file__)) + os.sep
        self._skip = (os.path.join(here, "runtime", "interpreter.py"), os.path.join(here, "testing.py"))

    def _issued_by_triton(self) -> bool:
        """Whether the op comes from the interpreter's own argument copies or Triton's benchmark:
        the first frame outside torch and the worker's own files (another dispatch mode of the
        worker's, the op record, may stand between) is Triton's."""
        import sys
        f = sys._getframe(2)
        torch_dir = os.path.dirname(torch.__file__) + os.sep
        worker_dir = os.path.dirname(os.path.abspath(__file__)) + os.sep
        while f is not None:
            name = f.f_code.co_filename
            if not (name.startswith(torch_dir) or name.startswith(worker_dir)):
                return name in self._skip
            f = f.f_back
        return False

    @staticmethod
    def _writes(func) -> bool:
        """Whether the op writes a tensor: an argument it mutates, or a new tensor it returns."""
        known = _WRITES.get(func)
        if known is None:
            schema = func._schema
            name = schema.name.split("::")[-1]
            mutates = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
            fresh = any(r.alias_info is None and "Tensor" in str(r.type) for r in schema.returns)
            known = _WRITES[func] = name not in METADATA and (mutates or fresh)
        return known

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        owner = self.owner
        if owner.error or not self._writes(func) or self._issued_by_triton():
            return func(*args, **kwargs)
        try:
            name, schema = func._schema.name.split("::")[-1], func._schema
            written, sources, values = [], [], {}
            for i, a in enumerate(schema.arguments):
                v = args[i] if i < len(args) else kwargs.get(a.name, _ABSENT)
                if v is _ABSENT:
                    continue
                values[a.name] = v
                found = _tensors(v, [])
                if a.alias_info is not None and a.alias_info.is_write:
                    written += found
                    if name not in ("copy_", "fill_", "zero_", "_copy_from"):   # read-modify-write: a source too
                        sources += found
                else:
                    sources += found
            with _disable_current_modes():
                src = [owner.tensor_flags(t) for t in sources if t.device.type == "cpu"]
                each = None   # a copy of one tensor: each element keeps its own flags
                if name in ELEMENTWISE and len(sources) == 1 and sources[0].device.type == "cpu":
                    f = owner.element_flags(sources[0])
                    each = None if f is None else f.reshape(tuple(sources[0].shape))
        except Exception as e:  # noqa: BLE001 - the record's fault, never the call's
            owner.fail(e)
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        try:
            fresh = [o for o, r in zip(out if isinstance(out, (tuple, list)) else (out,), schema.returns)
                     if r.alias_info is None]
            targets = [t for t in written + [t for o in fresh for t in _tensors(o, [])]
                       if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.layout == torch.strided]
            if targets:
                flags = self._flags(name, values, src)
                with _disable_current_modes():
                    for t in targets:
                        shaped = _shaped(each, tuple(t.shape))
                        if shaped is None and flags == 0:
                            owner.mark(t, 0)
                            continue
                        per = np.full(t.numel(), flags, dtype=np.uint8) if shaped is None else \
                            np.array(shaped, dtype=np.uint8).reshape(-1)
                        if t.numel() <= MAX_ELEMENTS:   # a zero written is no data, whoever wrote it
                            per[(t.detach().reshape(-1) == 0).numpy()] = 0
                        if shaped is None and (per == flags).all():
                            owner.mark(t, flags)
                        else:
                            owner.mark_elements(t, per)
        except Exception as e:  # noqa: BLE001
            owner.fail(e)
        return out

    @staticmethod
    def _flags(name: str, values: dict, src: list) -> int:
        """What a host op's written tensors hold, from its name and its sources' flags."""
        if name in ALLOCATIONS:
            return 0
        if name in FILLS:
            fill = FILLS[name]
            value = fill if isinstance(fill, int) else values.get(fill, 1)
            if isinstance(value, torch.Tensor):   # fill_ with a tensor: a copy of that one value
                return _union([f for f, _ in src], ()) if src else FOREIGN
            return 0 if value == 0 else FOREIGN
        flags = 0
        for f, _ in src:
            flags |= f & VALUE
        if name in COPIES or name in ELEMENTWISE:
            return flags | (KERNEL if src and all(k for _, k in src) else 0)
        return flags | FOREIGN   # the host computed it


# ----------------------------------------------------------------------------- the interpreter's side

class Provenance:
    """Tracks the provenance of every value a call computes while installed (module docstring)."""

    def __init__(self, named: list[tuple[str, int, int]], own_prefix: str):
        """``named``: (key, first byte, past the last byte) of each input tensor of the call."""
        self.shadow = Shadow()
        self.named = sorted(named, key=lambda n: n[1])
        for _key, start, end in self.named:
            self.shadow.add(start, end, INPUT)
        self.own_prefix = own_prefix
        self.own = False          # the running launch is one of the submission's kernels
        self.error = ""           # the record's own failure: then it is off for the call, never wrong
        self._keep = []           # storages seen: alive, so that no address is reused during the call
        self._saved: list = []
        self._mode = None

    # -- memory
    def storage_region(self, t: torch.Tensor):
        """The shadow region of ``t``'s storage (made, FOREIGN, the first time it is seen)."""
        try:
            storage = t.untyped_storage()
        except Exception:  # noqa: BLE001 - not a plain tensor
            return None
        start = storage.data_ptr()
        r = self.shadow.region(start) if storage.nbytes() else None
        if r is None:
            r = self.shadow.add(start, start + storage.nbytes(), FOREIGN)
            if r is not None:
                self._keep.append(storage)
        return r

    def mark(self, t: torch.Tensor, flags: int) -> None:
        """A host write of ``flags`` into every element of ``t``."""
        if t.numel() == 0:
            return
        self.storage_region(t)
        if t.is_contiguous():
            start = t.data_ptr()
            self.shadow.write_span(start, start + t.numel() * t.element_size(), flags)
        elif t.numel() <= MAX_ELEMENTS:
            self.shadow.write(element_addresses(t), t.element_size(), flags)

    def tensor_flags(self, t: torch.Tensor) -> tuple[int, bool]:
        """(union of the value flags of ``t``'s elements, whether every element is the
        kernels' or untouched: stored by them, or allocated and never written with data)."""
        if t.numel() == 0 or t.layout != torch.strided:
            return 0, True
        r = self.shadow.region(t.data_ptr())
        if r is not None and r.arr is None:
            return r.uniform & VALUE, bool(r.uniform & KERNEL) or r.uniform == 0
        if t.numel() > MAX_ELEMENTS:
            return FOREIGN, False
        f = self.shadow.read(element_addresses(t), t.element_size())
        return _uniform(f) & VALUE, bool(np.all(((f & KERNEL) != 0) | (f == 0)))

    def element_flags(self, t: torch.Tensor) -> np.ndarray | None:
        """The flags of each element of ``t`` in row-major order (None: too large to follow)."""
        if t.layout != torch.strided or t.numel() > MAX_ELEMENTS:
            return None
        return self.shadow.read(element_addresses(t), t.element_size())

    def mark_elements(self, t: torch.Tensor, flags: np.ndarray) -> None:
        """A host write of each element's own flags into ``t`` (row-major order)."""
        if t.numel() == 0:
            return
        self.storage_region(t)
        self.shadow.write(element_addresses(t), t.element_size(), flags)

    def base_of(self, t) -> tuple:
        """The tensor a launch argument's pointer comes from: the input whose bytes hold it
        (by key), or else its own storage ("scratch")."""
        start = t.data_ptr()
        for key, lo, hi in self.named:
            if lo <= start < hi or (lo == hi == start):
                return (lo, hi, key)
        try:
            storage = t.untyped_storage()
            return (storage.data_ptr(), storage.data_ptr() + storage.nbytes(), "scratch")
        except Exception:  # noqa: BLE001
            return (start, start, "scratch")

    # -- the output
    def report(self, y: torch.Tensor) -> dict | None:
        """How many of the output's elements the kernels did not store, stored from
        foreign data, or stored nonzero from no input (plain JSON); None when the
        record itself failed (``error`` says how)."""
        if self.error:
            return None
        try:
            return self._report(y)
        except Exception as e:  # noqa: BLE001 - the record's fault, never the call's
            self.fail(e)
            return None

    def _report(self, y: torch.Tensor) -> dict:
        with _disable_current_modes():
            n = y.numel()
            out = {"elements": n, "unwritten": 0, "foreign": 0, "inputless": 0}
            if n == 0:
                return out
            if n > MAX_ELEMENTS:
                out["unchecked"] = n
                return out
            f = self.shadow.read(element_addresses(y), y.element_size())
            kernel = (f & KERNEL) != 0
            values = y.detach().reshape(-1)
            nonzero = values.numpy() if values.dtype == torch.bool else \
                ((values != 0) & torch.isfinite(values)).numpy()   # NaN and inf are wrong anyway
            data = (f & VALUE) != 0
            # Not the kernels' but written with data by the host (untouched memory, an allocation
            # or a zero fill the kernels skipped, is left to the check of the values).
            out["unwritten"] = int((~kernel & data).sum())
            out["foreign"] = int((kernel & ((f & FOREIGN) != 0)).sum())
            out["inputless"] = int((kernel & ~data & nonzero).sum())
            return out

    # -- patching
    def fail(self, e: BaseException) -> None:
        """The record's own bookkeeping failed: the call goes on untouched, and the record says it is off."""
        if not self.error:
            self.error = f"{type(e).__name__}: {e}"[:300]

    def install(self) -> None:
        import triton.runtime.interpreter as interp

        _classes()
        B, G, R = interp.InterpreterBuilder, interp.GridExecutor, interp.ReduceScanOpInterface
        me = self
        rules: dict = {}   # (owner, name) -> rule(out, *args, **kw), run after the original

        def generic(out, self, *args, **kw):
            if out is not None:
                inputs = _handles(list(args) + list(kw.values()), [])
                shape = np.shape(out.data) if isinstance(out, _TH) else ()
                _set(out, _union([_flags(h) for h in inputs], shape), _pointer_base(inputs))

        def constant(out, self, *args, **kw):
            _set(out, 0)

        for name in dir(B):
            if name.startswith("_") or name in SPECIAL or not callable(getattr(B, name, None)):
                continue
            fn = getattr(B, name)
            if name in CONSTANTS:
                rules[B, name] = constant
            elif name.startswith(("create_", "get_")) or name in LEAVES:
                code = getattr(fn, "__code__", None)
                delegates = code is not None and fn.__name__ == "<lambda>" and \
                    any(leaf in code.co_names for leaf in LEAVES)
                if name.startswith("get_") and name.endswith("_ty"):
                    continue   # types, not values
                if not delegates:
                    rules[B, name] = generic

        def ternary_op(out, self, lhs, rhs, other, op):
            chosen = (rhs, other) if op is np.where else (lhs, rhs, other)   # a condition chooses
            _set(out, _union([_flags(h) for h in chosen], np.shape(out.data)), _pointer_base(chosen))

        def masked_load(out, self, ptrs, mask, *rest, **kw):
            _set(out, me._loaded(ptrs, mask, rest[0] if rest else kw.get("other")))

        def masked_store(out, self, ptrs, value, mask, *rest, **kw):
            me._stored(ptrs, mask, _flags(value))

        def atomic_rmw(out, self, rmwOp, ptr, val, mask, *rest, **kw):
            old = me._loaded(ptr, mask, None)    # the shadow still holds what was there
            _set(out, old)
            replaced = "XCHG" in str(rmwOp)
            me._stored(ptr, mask, _union([_flags(val)] if replaced else [_flags(val), old], np.shape(ptr.data)))

        def atomic_cas(out, self, ptr, cmp, val, *rest, **kw):
            old = me._loaded(ptr, None, None)
            _set(out, old)
            me._stored(ptr, None, _union([_flags(val), _flags(cmp), old], np.shape(ptr.data)))

        def dot(out, self, a, b, d, *rest, **kw):
            _set(out, me._dot_flags(a, b, d, np.shape(out.data)))

        def dot_scaled(out, self, lhs, lhs_scale, lhs_format, rhs, *rest, **kw):
            extra = _handles([lhs_scale, *rest], [])
            _set(out, _union([me._dot_flags(lhs, rhs, None, np.shape(out.data))] +
                             [_uniform(_flags(h)) for h in extra], np.shape(out.data)))

        def reshape(out, self, arg, shape, *rest, **kw):
            f = _flags(arg)
            _set(out, f.reshape(np.shape(out.data)) if isinstance(f, np.ndarray) and f.size == out.data.size
                 else _uniform(f), _pointer_base([arg]))

        def trans(out, self, arg, perm):
            f = _flags(arg)
            _set(out, np.transpose(np.broadcast_to(f, np.shape(arg.data)), perm) if isinstance(f, np.ndarray) else f,
                 _pointer_base([arg]))

        def expand_dims(out, self, arg, axis):
            f = _flags(arg)
            _set(out, np.expand_dims(np.broadcast_to(f, np.shape(arg.data)), axis) if isinstance(f, np.ndarray)
                 else f, _pointer_base([arg]))

        def broadcast(out, self, arg, shape):
            _set(out, _union([_flags(arg)], np.shape(out.data)), _pointer_base([arg]))

        def pair(stack):
            def rule(out, self, lhs, rhs):
                fl, fr = _flags(lhs), _flags(rhs)
                if isinstance(fl, int) and isinstance(fr, int) and fl == fr:
                    f = fl
                else:
                    f = stack(np.broadcast_to(fl, np.shape(lhs.data)), np.broadcast_to(fr, np.shape(rhs.data)))
                _set(out, _compact(f), _pointer_base([lhs, rhs]))
            return rule

        def split(out, self, val):
            a, b = out
            f = _flags(val)
            if isinstance(f, np.ndarray):
                f = np.broadcast_to(f, np.shape(val.data))
                _set(a, _compact(f[..., 0]), _pointer_base([val]))
                _set(b, _compact(f[..., 1]), _pointer_base([val]))
            else:
                _set(a, f, _pointer_base([val]))
                _set(b, f, _pointer_base([val]))

        def gather(out, self, src, indices, axis):
            f = _flags(src)
            if isinstance(f, np.ndarray):
                f = np.take_along_axis(np.broadcast_to(f, np.shape(src.data)), indices.data, axis=axis)
            _set(out, _compact(f), _pointer_base([src]))

        def reduce_or_scan(out, self, input):
            tensors = input if isinstance(input, tuple) else (input,)
            flags = _union([_flags(t.handle) for t in tensors], np.shape(tensors[0].handle.data))
            for r in out if isinstance(out, tuple) else (out,):
                if not hasattr(r, "handle"):
                    continue
                if isinstance(flags, int):
                    f = flags
                elif self.axis is None:
                    f = _uniform(flags)
                elif isinstance(self, interp.ScanOps):   # element i depends on 0..i along the axis
                    g = np.flip(flags, self.axis) if self.reverse else flags
                    g = np.bitwise_or.accumulate(g, axis=self.axis)
                    f = np.flip(g, self.axis) if self.reverse else g
                else:
                    f = np.bitwise_or.reduce(flags, axis=self.axis, keepdims=getattr(self, "keep_dims", False))
                if isinstance(f, np.ndarray) and np.shape(f) != np.shape(r.handle.data):
                    f = _uniform(f)
                _set(r.handle, _compact(np.asarray(f, dtype=np.uint8)) if isinstance(f, np.ndarray) else f)

        def materialize(out, self, *args, **kw):
            _set(out[0], 0, _pointer_base([self.base]))

        def descriptor_gather(out, self, desc, x_offsets, y_offset, type):
            rows = [me._loaded(*desc.materialize_pointers([_TH(np.asarray(x), x_offsets.dtype), y_offset]), None)
                    for x in x_offsets.data]
            shape = np.shape(out.data)
            _set(out, _compact(np.stack([np.broadcast_to(r, shape[1:]) for r in rows])) if rows else 0)

        def descriptor_scatter(out, self, desc, value, x_offsets, y_offset):
            f = _flags(value)
            for i, x in enumerate(x_offsets.data):   # the rows were stored through handles of no flags
                ptrs, mask = desc.materialize_pointers([_TH(np.asarray(x), x_offsets.dtype), y_offset])
                me._stored(ptrs, mask, f[i] if isinstance(f, np.ndarray) else f)

        def implicit_cvt(out, arg):
            h = getattr(out, "handle", None)
            if isinstance(h, _TH):
                h._pf = 0
                if hasattr(arg, "data_ptr"):
                    h._pb = me.base_of(arg)

        def patch_lang(scope, fn):
            import triton.language as tl

            def transposed(t):   # tensor.T: the interpreter builds it outside the builder
                h = t.handle
                handle = _TH(np.transpose(h.data), h.dtype)
                try:
                    f = _flags(h)
                    _set(handle, np.transpose(np.broadcast_to(f, np.shape(h.data))) if isinstance(f, np.ndarray)
                         else f, getattr(h, "_pb", None))
                except Exception as e:  # noqa: BLE001 - the record's fault, never the call's
                    me.fail(e)
                shape = list(t.type.shape)
                shape[-1], shape[-2] = shape[-2], shape[-1]
                return tl.core.tensor(handle, tl.core.block_type(t.dtype, shape))

            scope.set_attr(tl.tensor, "T", property(transposed))

        rules.update({
            (B, "ternary_op"): ternary_op, (B, "create_masked_load"): masked_load,
            (B, "create_masked_store"): masked_store, (B, "create_atomic_rmw"): atomic_rmw,
            (B, "create_atomic_cas"): atomic_cas, (B, "create_dot"): dot, (B, "create_reshape"): reshape,
            (B, "create_trans"): trans, (B, "create_expand_dims"): expand_dims, (B, "create_broadcast"): broadcast,
            (B, "create_cat"): pair(lambda a, b: np.concatenate([a, b])),
            (B, "create_join"): pair(lambda a, b: np.stack([a, b], axis=-1)), (B, "create_split"): split,
            (B, "create_gather"): gather, (R, "apply"): reduce_or_scan,
            (interp.BlockPointerHandle, "materialize_pointers"): materialize,
            (interp.TensorDescHandle, "materialize_pointers"): materialize,
            (B, "create_descriptor_gather"): descriptor_gather, (B, "create_descriptor_scatter"): descriptor_scatter,
            (B, "create_dot_scaled"): dot_scaled})
        rules = {key: rule for key, rule in rules.items() if hasattr(*key)}   # a Triton without one runs none

        def after(key, rule):
            original = getattr(*key)

            def wrapped(*args, **kw):
                out = original(*args, **kw)
                if not me.error:
                    try:
                        rule(out, *args, **kw)
                    except Exception as e:  # noqa: BLE001 - the record's fault, never the call's
                        me.fail(e)
                return out
            return wrapped

        def call(self, *args, **kwargs):
            fn = getattr(self, "fn", None)
            saved = me.own
            try:
                me.own = str(getattr(fn, "__module__", "") or "").startswith(me.own_prefix)
                for t in _tensors(list(args) + list(kwargs.values()), []):
                    me.storage_region(t)
            except Exception as e:  # noqa: BLE001 - the record's fault, never the call's
                me.fail(e)
            try:
                return original_call(self, *args, **kwargs)
            finally:
                me.own = saved

        original_call = G.__call__
        patches = {key: after(key, rule) for key, rule in rules.items()}
        patches[interp, "_implicit_cvt"] = after((interp, "_implicit_cvt"), implicit_cvt)
        patches[interp, "_patch_lang"] = after((interp, "_patch_lang"), patch_lang)
        patches[G, "__call__"] = call
        self._saved = [(owner, name, vars(owner).get(name, _ABSENT)) for owner, name in patches]
        for (owner, name), fn in patches.items():
            setattr(owner, name, fn)
        self._mode = _HostWrites(self)
        self._mode.__enter__()

    def restore(self) -> None:
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
        while self._saved:
            owner, name, fn = self._saved.pop()
            if fn is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, fn)

    def __enter__(self):
        self.install()
        return self

    def __exit__(self, *exc):
        self.restore()

    # -- the rules for memory
    def _live(self, ptrs, mask):
        data = np.asarray(ptrs.data)
        if mask is None:
            return data, None
        m = mask.data if hasattr(mask, "data") and not isinstance(mask, np.ndarray) else mask
        return data, np.broadcast_to(np.asarray(m, dtype=bool), data.shape)

    def _loaded(self, ptrs, mask, other):
        """The flags of a load's values: the shadow's where the lane is live, ``other``'s elsewhere."""
        data, live = self._live(ptrs, mask)
        nbytes = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        if live is None:
            return _compact(self.shadow.read(data, nbytes).reshape(data.shape) & VALUE)
        flags = np.zeros(data.shape, dtype=np.uint8)
        if live.any():
            flags[live] = self.shadow.read(data[live], nbytes) & VALUE
        if not live.all() and other is not None:
            o = _flags(other)
            o = np.broadcast_to(o, data.shape) if isinstance(o, np.ndarray) else o
            flags[~live] = o[~live] if isinstance(o, np.ndarray) else o
        return _compact(flags)

    def _stored(self, ptrs, mask, value_flags) -> None:
        data, live = self._live(ptrs, mask)
        nbytes = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        flags = value_flags if isinstance(value_flags, int) else np.broadcast_to(value_flags, data.shape)
        stamp = KERNEL if self.own else FOREIGN   # another package's kernel is not the submission's
        if live is not None:
            data = data[live]
            flags = flags[live] if isinstance(flags, np.ndarray) else flags
        flags = (flags & VALUE) | stamp
        self.shadow.write(data, nbytes, flags if isinstance(flags, int) else flags.astype(np.uint8))

    @staticmethod
    def _dot_flags(a, b, d, shape):
        fa, fb = _flags(a), _flags(b)
        parts = []
        if isinstance(fa, np.ndarray):   # row i of the result sums over row i of a
            fa = np.bitwise_or.reduce(np.broadcast_to(fa, np.shape(a.data)), axis=-1)[..., :, None]
        if isinstance(fb, np.ndarray):   # column j over column j of b
            fb = np.bitwise_or.reduce(np.broadcast_to(fb, np.shape(b.data)), axis=-2)[..., None, :]
        parts += [fa, fb]
        if d is not None:
            parts.append(_flags(d))
        return _union(parts, shape)
