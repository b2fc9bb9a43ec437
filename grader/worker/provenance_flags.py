"""The flags of output provenance, and where they are kept: on every interpreter value
(per element) and in a shadow of memory (per byte).

    INPUT     the value comes from the call's inputs
    FOREIGN   it comes from somewhere else (memory nobody wrote during the call, a
              host computation, a fill with a nonzero number, Python numbers)
    KERNEL    the submission's own kernels stored it during the call

A value's flags ride on its interpreter handle (``_pf``: one int while every
element is alike, else a uint8 array of its shape), with the tensor its
pointers were derived from (``_pb``). ``Shadow`` holds the flags of every byte
the call can reach, region by region. provenance.py says what the flags
prove; provenance_rules.py and provenance_host.py say how each operation of a
kernel and of the host moves them.

This file runs in the untrusted worker and depends on torch, triton and numpy only.
"""

from __future__ import annotations

import numpy as np
import torch

INPUT, FOREIGN, KERNEL = 1, 2, 4
VALUE = INPUT | FOREIGN
MIXED = ("mixed",)            # a pointer derived from more than one tensor: bounds fall back to "any tensor"
MAX_ELEMENTS = 1 << 24        # outputs larger than this are not checked element by element
_ABSENT = object()             # no such argument (a host op's), no attribute of its own (a patched class)


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
