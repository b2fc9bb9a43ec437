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

The record is cut into four files: this one (``Provenance``: the record's
memory, the output's report, the patches installed and undone),
provenance_flags.py (the flags and the memory shadow), provenance_rules.py
(each interpreter operation's rule) and provenance_host.py (the host's
writes, a PyTorch dispatch mode).

Every private name patched here is listed in fence.py ("output provenance").
This file runs in the untrusted worker and depends on torch, triton and numpy only.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils._python_dispatch import _disable_current_modes

from . import provenance_flags
from .hooks import Hooks
from .provenance_flags import (
    FOREIGN,
    INPUT,
    KERNEL,
    MAX_ELEMENTS,
    VALUE,
    Shadow,
    _compact,
    _flags,
    _tensors,
    _uniform,
    _union,
    element_addresses,
)
from .provenance_host import _HostWrites
from .provenance_rules import value_rules


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
        self._hooks = Hooks()
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

        provenance_flags._classes()
        G = interp.GridExecutor
        me = self
        rules = value_rules(me, interp)   # (owner, name) -> rule(out, *args, **kw), run after the original

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
        patches[G, "__call__"] = call
        self._hooks.install(patches)
        self._mode = _HostWrites(self)
        self._mode.__enter__()

    def restore(self) -> None:
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
        self._hooks.restore()

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
