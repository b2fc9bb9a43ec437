"""Output provenance in the interpreter: how each operation of a kernel moves the flags.

    value_rules(provenance, interp) -> {(owner, name): rule(out, *args, **kw)}

Provenance.install wraps each of these interpreter methods and functions so
that its rule runs after the original, on what it returned: a load takes the
flags of the shadow (masked-off lanes from ``other``), constants and ranges
carry none, an element-wise result the union of its operands', ``tl.dot``
the union over the row and the column it sums, a reduction the union over
its axis, ``tl.where`` its two branches' (not its condition's); a store
writes the value's flags into the shadow. Every value-making method of the
builder without a rule of its own gets the element-wise one, by name; the
methods named here are listed in fence.py ("output provenance").

This file runs in the untrusted worker and depends on triton and numpy only.
"""

from __future__ import annotations

import numpy as np

from .provenance_flags import _compact, _flags, _handles, _pointer_base, _set, _uniform, _union

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


def value_rules(me, interp) -> dict:
    """The rule of every patched interpreter method, by (owner, name), for the
    Provenance ``me`` (its shadow: loads and stores) and the module ``interp``
    (triton.runtime.interpreter). A builder method this Triton lacks gets none; the
    module functions ``_implicit_cvt`` and ``_patch_lang`` are always wrapped."""
    B, R = interp.InterpreterBuilder, interp.ReduceScanOpInterface
    _TH = interp.TensorHandle
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
    rules[interp, "_implicit_cvt"] = implicit_cvt
    rules[interp, "_patch_lang"] = patch_lang
    return rules
