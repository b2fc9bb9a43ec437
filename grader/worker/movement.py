"""Count what a Triton kernel moves, in the CPU interpreter (TRITON_INTERPRET=1).

    with Movement(named_ranges) as m:   # patches the interpreter, restores it on exit
        y = kernel_wrapper(...)
    m.report(output=y)                   # plain JSON

    with Movement(named_ranges, confine=True) as m:   # a checked call's bounds check
        y = kernel_wrapper(...)
    m.outside()                          # bytes loaded and stored outside every known tensor

While installed, every launch is counted: its grid, the bytes each
``tl.load`` and ``tl.store`` touched (one element per lane whose mask is
true: masked-off lanes are not counted), atomics as one read and one write
per lane, and ``tl.dot`` FLOPs (2 M N K per dot); an autotuner's trial
launches (``Autotuner._bench``) are not counted. Bytes are attributed by
address: to the named ranges the caller gives (the call's inputs), to the
returned output, to other tensors the launches were given ("scratch"), or
to nothing known ("other").

With ``confine``, a lane whose element lies outside the tensor its pointer
was derived from is masked off before the interpreter touches memory, and
counted: an out-of-bounds load or store (a missing mask, a wrong stride)
becomes a count the harness can name instead of a read of whatever lies
there, or a crash of the interpreter. A lane must lie inside one of the
known tensors (the named ranges and the storages the launches were given);
the arena keeps guard bytes between the inputs, so a read just past the end
of x lands outside every tensor and is named after x (the tensor it read
past). A jump far enough to land inside another argument is not caught here
(the guards' NaN shows it in the output instead).

The counts come from the interpreter's builder (``InterpreterBuilder``:
``create_masked_load``, ``create_masked_store``, the atomics, ``create_dot``;
plain, descriptor and atomic loads and stores all end in the masked ones) and
from ``GridExecutor.__call__`` (one launch). They assume no cache: a byte
loaded twice counts twice. Every private name patched here is listed in
fence.py.

This file runs in the untrusted worker and depends on torch, triton and numpy only.
"""

from __future__ import annotations

import numpy as np

from .hooks import Hooks
from .races import Races, linear

MAX_LAUNCHES = 20          # launch rows kept (all launches are counted in the totals)
MAX_TEXT = 100


def _storages(value, found: list) -> None:
    """The tensors among a launch argument (tensors, tuples, tensor descriptors)."""
    if hasattr(value, "untyped_storage"):
        found.append(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _storages(v, found)
    elif hasattr(value, "base") and hasattr(value, "block_shape"):  # TensorDescriptor
        _storages(value.base, found)


def tensor_range(t) -> tuple[int, int]:
    """[first byte, past the last byte] that the view ``t`` spans."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    extent = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + extent * t.element_size()


class _Ranges:
    """Sorted, disjoint [start, end) byte ranges, each with a key; first added wins."""

    def __init__(self):
        self.starts = np.zeros(0, dtype=np.uint64)
        self.ends = np.zeros(0, dtype=np.uint64)
        self.keys: list[str] = []

    def add(self, start: int, end: int, key: str) -> None:
        if end <= start:
            return
        i = int(np.searchsorted(self.starts, np.uint64(start), side="right"))
        if i > 0 and int(self.ends[i - 1]) > start:
            return
        if i < len(self.keys) and int(self.starts[i]) < end:
            return
        self.starts = np.insert(self.starts, i, np.uint64(start))
        self.ends = np.insert(self.ends, i, np.uint64(end))
        self.keys.insert(i, key)

    def inside(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        """bool per address: whether its ``nbytes`` lie within one range."""
        if not self.keys:
            return np.zeros(addr.shape, dtype=bool)
        idx = np.searchsorted(self.starts, addr, side="right").astype(np.int64) - 1
        ok = idx >= 0
        ok[ok] = addr[ok] + np.uint64(nbytes) <= self.ends[idx[ok]]
        return ok

    def below(self, addr: int) -> str:
        """The key of the range that starts last at or before ``addr``: the tensor an access just past
        its end was read past ("" if none)."""
        i = int(np.searchsorted(self.starts, np.uint64(addr), side="right")) - 1
        return self.keys[i] if i >= 0 else ""

    def count(self, addr: np.ndarray, nbytes: int, into: dict) -> None:
        """Add ``nbytes`` per address in ``addr`` to ``into[key]`` (key None: no range)."""
        if addr.size == 0:
            return
        lo, hi = addr.min(), addr.max()
        i = int(np.searchsorted(self.starts, lo, side="right")) - 1
        if i >= 0 and hi < self.ends[i]:   # the usual case: one tensor
            key = self.keys[i]
            into[key] = into.get(key, 0) + int(addr.size) * nbytes
            return
        idx = np.searchsorted(self.starts, addr, side="right").astype(np.int64) - 1
        inside = idx >= 0
        inside[inside] = addr[inside] < self.ends[idx[inside]]
        hits = np.bincount(idx[inside], minlength=len(self.keys))
        for j in np.flatnonzero(hits):
            into[self.keys[j]] = into.get(self.keys[j], 0) + int(hits[j]) * nbytes
        missed = int(addr.size - inside.sum())
        if missed:
            into[None] = into.get(None, 0) + missed * nbytes


class Movement:
    """Counts loads, stores and dots of every interpreted launch while installed."""

    def __init__(self, named: list[tuple[str, int, int]], confine: bool = False, memory: bool = True,
                 races: bool = False):
        """``named``: (key, first byte, past the last byte) of each tensor to name;
        ``confine``: mask off and count the lanes outside every known tensor;
        ``memory``: count loads and stores (False: leave them alone);
        ``races``: record the first cross-program race of the tensors the launches were
        given (races.py; needs ``memory``)."""
        self.confine, self.memory = confine, memory
        self.races = Races() if races and memory else None
        self.first_outside = ""  # the kernel of the first out-of-bounds access
        self.first_tensor = ""   # the key of the tensor its pointer came from ("" if not known)
        self.outside_loads = self.outside_stores = 0   # bytes the live lanes touched outside their tensor
        self.ranges = _Ranges()
        for key, start, end in named:
            self.ranges.add(start, end, key)
        self.read: dict = {}
        self.written: dict = {}
        self.flops = 0
        self.launches: list[dict] = []
        self.launch_count = 0
        self.programs = 0
        self._keep = []          # storages of the launches' tensors: alive, so no address is reused
        self._storage_keys: dict[int, str] = {}
        self._current: dict | None = None
        self._hooks = Hooks()
        self._paused = 0         # inside an autotuner's benchmark: its trial launches are not the call's

    # ----------------------------------------------------------------- counting
    def _count(self, ptrs, mask, into: dict):
        """(bytes the live lanes touch, the mask to use instead of ``mask`` or None, bytes
        the live lanes touch outside their tensor)."""
        ty = ptrs.get_element_ty()
        nbytes = max(1, ty.primitive_bitwidth // 8)
        data = np.asarray(ptrs.data)
        live = None if mask is None else np.broadcast_to(np.asarray(mask.data, dtype=bool), data.shape)
        addr = (data.reshape(-1) if live is None else data[live]).astype(np.uint64, copy=False)
        self.ranges.count(addr, nbytes, into)
        confined, outside = None, 0
        if self.confine and addr.size:
            # Inside some tensor the call knows; the inputs lie apart in the arena, guard bytes between them.
            where = data.astype(np.uint64, copy=False)
            inside = self.ranges.inside(where, nbytes)
            wanted = inside if live is None else inside | ~live
            if not wanted.all():
                if not self.first_outside and self._current is not None:
                    self.first_outside = self._current["kernel"]
                    first = int(where.reshape(-1)[np.flatnonzero(~wanted.reshape(-1))[0]])
                    self.first_tensor = self.ranges.below(first)   # the tensor read or written past
                confined = inside if live is None else inside & live
                outside = int((~wanted).sum()) * nbytes
        return int(addr.size) * nbytes, confined, outside

    def _masked(self, mask, confined, shape):
        """A mask handle with only the lanes ``confined`` keeps (an interpreter TensorHandle)."""
        import triton.language as tl
        import triton.runtime.interpreter as interp

        dtype = mask.dtype if mask is not None else tl.int1
        return interp.TensorHandle(np.ascontiguousarray(np.broadcast_to(confined, shape)), dtype)

    def _load(self, ptrs, mask):
        """Count a load; the mask to load with (``mask`` unless lanes were confined)."""
        if self._paused:
            return mask
        moved, confined, outside = self._count(ptrs, mask, self.read)
        self.outside_loads += outside
        if self._current is not None:
            self._current["loaded"] += moved
        return mask if confined is None else self._masked(mask, confined, np.shape(ptrs.data))

    def _store(self, ptrs, mask):
        if self._paused:
            return mask
        moved, confined, outside = self._count(ptrs, mask, self.written)
        self.outside_stores += outside
        if self._current is not None:
            self._current["stored"] += moved
        return mask if confined is None else self._masked(mask, confined, np.shape(ptrs.data))

    def _race(self, ptrs, mask, store: bool, changed=None) -> None:
        """Tell the race record which elements of the launches' own tensors the current program
        loaded or stored (``changed``: per lane, whether the store changed the element), and
        any store into the call's inputs."""
        if self.races is None or self._paused or self._current is None:
            return
        import triton.runtime.interpreter as interp

        data = np.asarray(ptrs.data)
        lanes = np.ones(data.shape, dtype=bool) if mask is None else \
            np.broadcast_to(np.asarray(mask.data, dtype=bool), data.shape)
        addr = data[lanes].astype(np.uint64, copy=False)
        if addr.size == 0 or not self.ranges.keys:
            return
        kinds = np.zeros(addr.shape, dtype=np.int8)    # 0 load; for a store: 1 changed, 2 the same
        if store:
            kinds[:] = 2
            if changed is not None:
                kinds[np.broadcast_to(changed, data.shape)[lanes]] = 1
        nbytes = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        b = interp.interpreter_builder
        program = linear(b.grid_idx, b.grid_dim)
        idx = np.searchsorted(self.ranges.starts, addr, side="right").astype(np.int64) - 1
        for j in np.unique(idx[idx >= 0]):
            key = self.ranges.keys[j]
            start, end = int(self.ranges.starts[j]), int(self.ranges.ends[j])
            here = (idx == j) & (addr < np.uint64(end))
            if not key.startswith("storage:"):   # the call's inputs: read-only
                if store and here.any():
                    self.races.input_store(key, program, tuple(b.grid_dim))
                continue
            for code, kind in ((0, "load"), (1, "store"), (2, "same")):
                mine = addr[here & (kinds == code)]
                if mine.size:
                    self.races.access(key, start, mine, nbytes, program, kind)

    def _dot(self, a, b):
        if self._paused:
            return
        a_shape, b_shape = np.shape(a.data), np.shape(b.data)
        k = a_shape[-1] if a_shape else 1
        n = b_shape[-1] if b_shape else 1
        flops = 2 * int(np.prod(a_shape[:-1], dtype=np.int64)) * int(k) * int(n)
        self.flops += flops
        if self._current is not None:
            self._current["flops"] += flops

    # ------------------------------------------------------------------ patching
    def install(self) -> None:
        import triton.runtime.autotuner as autotuner
        import triton.runtime.interpreter as interp

        B, G, A = interp.InterpreterBuilder, interp.GridExecutor, autotuner.Autotuner
        me = self
        patches: dict = {}   # (class, name) -> replacement

        if self.memory:
            # The cache hints after the mask (cache_modifier, eviction_policy) pass through untouched.
            def masked_load(self, ptrs, mask, other=None, cache_modifier=None, eviction_policy=None,
                            is_volatile=False):
                mask = me._load(ptrs, mask)
                if me.races is not None:
                    if is_volatile:
                        me.races.synchronised()
                    me._race(ptrs, mask, store=False)
                return orig[B, "create_masked_load"](self, ptrs, mask, other, cache_modifier, eviction_policy,
                                                     is_volatile)

            def masked_store(self, ptrs, value, mask, *rest, **kw):
                mask = me._store(ptrs, mask)
                if me.races is not None:
                    old = orig[B, "create_masked_load"](self, ptrs, mask, None, None, None, False)
                    bf16 = str(ptrs.get_element_ty()) == "bf16"
                    me._race(ptrs, mask, store=True, changed=_changed(old.data, value.data, bf16))
                return orig[B, "create_masked_store"](self, ptrs, value, mask, *rest, **kw)

            def atomic_rmw(self, rmwOp, ptr, val, mask, *rest, **kw):
                me._load(ptr, mask)
                mask = me._store(ptr, mask)
                if me.races is not None and (mask is None or np.asarray(mask.data).any()):
                    me.races.synchronised()   # its result can order programs (the last to arrive reduces)
                return orig[B, "create_atomic_rmw"](self, rmwOp, ptr, val, mask, *rest, **kw)

            def atomic_cas(self, ptr, *rest, **kw):
                me._load(ptr, None)
                me._store(ptr, None)
                if me.races is not None:
                    me.races.synchronised()   # a compare-and-swap can take a lock
                return orig[B, "create_atomic_cas"](self, ptr, *rest, **kw)

            patches.update({(B, "create_masked_load"): masked_load, (B, "create_masked_store"): masked_store,
                            (B, "create_atomic_rmw"): atomic_rmw, (B, "create_atomic_cas"): atomic_cas})

        if not self.confine:   # the movement table counts dots; the bounds check needs none
            def dot(self, a, b, *rest, **kw):
                me._dot(a, b)
                return orig[B, "create_dot"](self, a, b, *rest, **kw)

            def dot_scaled(self, lhs, lhs_scale, lhs_format, rhs, *rest, **kw):
                me._dot(lhs, rhs)
                return orig[B, "create_dot_scaled"](self, lhs, lhs_scale, lhs_format, rhs, *rest, **kw)

            patches[B, "create_dot"] = dot
            if hasattr(B, "create_dot_scaled"):   # a Triton whose interpreter has no dot_scaled runs none
                patches[B, "create_dot_scaled"] = dot_scaled

        if self.races is not None:
            # One rounding, in float64: numpy's float32 matmul rounds a row by its place in the tile, so
            # two programs computing one element in different places would store values a few bits apart
            # (overlapping clamped tiles); this way they store the same, and the race record compares values
            # element by element (_changed), with no tolerance a kernel could stretch.
            def exact_dot(self, a, b, d, *rest, **kw):
                if not all(np.asarray(t.data).dtype in _EXACT_DOT for t in (a, b, d)):
                    return orig[B, "create_dot"](self, a, b, d, *rest, **kw)
                wide = np.matmul(np.asarray(a.data, np.float64), np.asarray(b.data, np.float64))
                return interp.TensorHandle((wide + np.asarray(d.data, np.float64)).astype(d.data.dtype),
                                           d.dtype.scalar)

            patches[B, "create_dot"] = exact_dot

        def bench(self, *args, **kwargs):
            me._paused += 1
            try:
                return orig[A, "_bench"](self, *args, **kwargs)
            finally:
                me._paused -= 1

        def call(self, *args, **kwargs):
            if me._paused:
                return orig[G, "__call__"](self, *args, **kwargs)
            me._begin(self, args, kwargs)
            try:
                return orig[G, "__call__"](self, *args, **kwargs)
            finally:
                me._end()

        patches.update({(G, "__call__"): call, (A, "_bench"): bench})
        # Look every original up first: a Triton that lacks one changes nothing.
        orig = {(cls, name): getattr(cls, name) for cls, name in patches}
        self._hooks.install(patches)

    def restore(self) -> None:
        self._hooks.restore()

    def __enter__(self):
        self.install()
        return self

    def __exit__(self, *exc):
        self.restore()

    def _begin(self, executor, args, kwargs) -> None:
        found: list = []
        _storages(args, found)
        _storages(list(kwargs.values()), found)
        for t in found:
            try:
                storage = t.untyped_storage()
            except Exception:  # noqa: BLE001 - not a tensor after all
                continue
            start = storage.data_ptr()
            if start not in self._storage_keys:
                self._storage_keys[start] = f"storage:{start}"
                self._keep.append(storage)
                self.ranges.add(start, start + storage.nbytes(), f"storage:{start}")
        fn = getattr(executor, "fn", None)
        self._current = {"kernel": str(getattr(fn, "__name__", "?"))[:MAX_TEXT], "grid": [0, 0, 0],
                         "programs": 0, "loaded": 0, "stored": 0, "flops": 0}
        if self.races is not None:
            self.races.begin(self._current["kernel"])

    def _end(self) -> None:
        import triton.runtime.interpreter as interp

        row, self._current = self._current, None
        if row is None:
            return
        grid = [int(g) for g in getattr(interp.interpreter_builder, "grid_dim", (0, 0, 0))]
        if self.races is not None:
            self.races.end(tuple(grid))
        row["grid"] = grid
        row["programs"] = grid[0] * grid[1] * grid[2]
        self.launch_count += 1
        self.programs += row["programs"]
        if len(self.launches) < MAX_LAUNCHES:
            self.launches.append(row)

    # ------------------------------------------------------------------- result
    def outside(self) -> dict:
        """Bytes the live lanes loaded and stored outside the tensor their pointer was
        derived from (or, where that is not known, outside every known tensor), the
        first kernel that did, and the key of that tensor ("" when not known; all
        zero and "" for a kernel that stays inside)."""
        return {"loads": int(self.outside_loads), "stores": int(self.outside_stores),
                "kernel": self.first_outside[:MAX_TEXT], "tensor": self.first_tensor[:MAX_TEXT]}

    def race(self, output=None) -> dict:
        """The first cross-program race of the launches (races.py), its tensor named "out" (the
        storage of ``output``) or "scratch"; {} when none, or when not recorded."""
        if self.races is None or not self.races.found:
            return {}
        out_key = None
        if output is not None and hasattr(output, "untyped_storage"):
            out_key = self._storage_keys.get(output.untyped_storage().data_ptr())
        found = self.races.found
        if found["kind"] == "input":   # the key of a call's input: its argument's place ("0", "1.values")
            return dict(found)
        return {**found, "tensor": "out" if found["tensor"] == out_key else "scratch" if found["tensor"] else ""}

    def report(self, output=None) -> dict:
        """Totals as plain JSON. Byte keys: the named ranges' keys, "out" (the
        storage of ``output``), "scratch" (other tensors the launches got),
        "other" (no tensor known)."""
        out_key = None
        if output is not None and hasattr(output, "untyped_storage"):
            out_key = self._storage_keys.get(output.untyped_storage().data_ptr())

        def fold(counts: dict) -> dict:
            folded = {}
            for key, n in counts.items():
                if key is None:
                    key = "other"
                elif key == out_key:
                    key = "out"
                elif key.startswith("storage:"):
                    key = "scratch"
                folded[key] = folded.get(key, 0) + n
            return folded

        read, written = fold(self.read), fold(self.written)
        tensors = {k: [read.get(k, 0), written.get(k, 0)] for k in sorted(set(read) | set(written))}
        return {"tensors": tensors, "flops": self.flops, "programs": self.programs,
                "launch_count": self.launch_count, "launches": self.launches}


# The element types whose dots exact_dot computes in float64 (the interpreter holds bfloat16 as uint16 bits and
# fp8 as bytes: those, and integer dots, which are exact already, keep the interpreter's own).
_EXACT_DOT = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _changed(old, new, bf16: bool = False) -> np.ndarray:
    """Per lane, whether storing ``new`` over ``old`` changes the element. Integers: any bit.
    Floats: more than two units of the element's own last place apart (elementwise numpy
    functions may round a lane differently by its place in the array, by a unit; exact_dot
    leaves dots none), +0 and -0 the same, a NaN over a NaN no change, a number over a NaN (a
    fresh allocation) one. Element by element: no value elsewhere in the tile widens it.
    ``bf16``: the interpreter holds bfloat16 as its 16 bits in uint16."""
    old = np.asarray(old)
    new = np.broadcast_to(np.asarray(new), old.shape)
    if new.dtype != old.dtype:
        new = new.astype(old.dtype)
    if bf16 and old.dtype == np.uint16:
        values_old, values_new = _bf16_values(old), _bf16_values(new)
    elif np.issubdtype(old.dtype, np.floating):
        values_old, values_new = old, new
    else:
        return old != new
    apart = np.abs(_ordinal(old) - _ordinal(new))    # units of the last place between the two
    finite = np.isfinite(values_old) & np.isfinite(values_new)
    same_special = (np.isnan(values_old) & np.isnan(values_new)) | (~finite & (values_old == values_new))
    return ~((finite & (apart <= 2)) | same_special)


def _ordinal(x: np.ndarray) -> np.ndarray:
    """The float bit patterns of ``x`` (any width) as integers in the floats' order, +0 and -0 both 0:
    adjacent floats differ by one."""
    bits = x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])
    top = bits.dtype.type(1) << bits.dtype.type(8 * x.dtype.itemsize - 1)
    magnitude = (bits & ~top).astype(np.int64)
    return np.where(bits & top, -magnitude, magnitude)


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (uint16)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
