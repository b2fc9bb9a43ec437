"""Output provenance on the host: what PyTorch writes during a checked call.

    _HostWrites(provenance)   a PyTorch dispatch mode; entered by Provenance.install

A host write during the call updates the shadow (provenance_flags.py):
allocations and zeros written carry nothing, copies and conversions carry
their sources' flags element by element (``KERNEL`` included), anything else
the host computes is ``FOREIGN``. The interpreter's own copies of a launch's
arguments, and Triton's benchmark, are not the submission's writes and are
skipped.

This file runs in the untrusted worker and depends on torch, triton and numpy only.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from .provenance_flags import _ABSENT, FOREIGN, KERNEL, MAX_ELEMENTS, VALUE, _tensors, _union

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
    """Keeps the shadow of what the host writes during the call (see the module docstring)
    for ``owner``, the Provenance whose shadow it is."""

    def __init__(self, owner):
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
