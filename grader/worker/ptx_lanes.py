"""The lanes of a kernel's first warp: the address each lane of a memory instruction
reaches, and what that access costs the warp.

    _Lanes(code, _params(lines)).run(order).cost   {line: (wavefronts, lanes known)}

The PTX reader (ptx.py) counts how many passes through the load/store unit
each memory instruction costs a warp, which needs the addresses of the 32
lanes of a warp. They are computed here by evaluating the kernel's integer
arithmetic for the lanes of its first warp (``%tid.x`` = 0..31, program 0),
in program order, through the first trip of each loop: pointer parameters
are far-apart aligned bases, integer parameters a large round value (a row
stride, as far as a warp can tell), and every loaded value is the same for
all lanes (an index a gather reads). What cannot be evaluated (floating
point, a register whose value depends on an instruction not modelled here)
makes that instruction's lanes unknown, and an access with unknown lanes is
counted as if its lanes were contiguous: the count is never more pessimistic
than the code proves.

- A global access costs one pass ("wavefront") per distinct 128-byte line
  its lanes touch: 16-byte vectors of 32 adjacent lanes take 4, a 2-byte
  load whose lanes sit in 32 different rows takes 32.
- A shared-memory access costs one pass per 128 bytes, more where lanes of
  one phase hit different words of the same bank (a bank conflict).

This file runs in the untrusted worker (the compile check's child) and
depends on the standard library only.
"""

from __future__ import annotations

import functools
import math
import operator
import re
import struct

from .ptx_parse import _ASYNC, _BULK, _LOAD, _REG, _SHARED, _STORE, _TYPE, _address, _dests_and_sources, _int, _width

LANES = 32
LINE = 128                 # bytes: a global access costs one pass per line its lanes touch
BANKS, BANK_BYTES = 32, 4
MAX_EVALUATED = 200_000    # instructions whose lanes are evaluated; past that, lanes are unknown

POINTER_BASE = 1 << 40     # pointer parameter i is at (i + 1) * POINTER_BASE: no two share a line
INT_PARAM = 4096           # every integer parameter: a stride that puts rows in different lines


def _params(lines: list[str]) -> dict[str, int]:
    """The value each kernel parameter stands for: pointers far apart, integers INT_PARAM."""
    out = {}
    for line in lines:
        if ".param" not in line:
            continue
        m = re.search(r"([\w$]+_param_(\d+))\s*,?\s*$", line.split("//", 1)[0])
        if m:
            out[m.group(1)] = (int(m.group(2)) + 1) * POINTER_BASE if ".ptr" in line else INT_PARAM
    return out


_MASKS = {8: 0xFF, 16: 0xFFFF, 32: 0xFFFFFFFF, 64: (1 << 64) - 1}


def _signed(v: int, bits: int) -> int:
    v &= _MASKS[bits]
    return v - (1 << bits) if v >> (bits - 1) else v


class _Lanes:
    """Evaluates the integer arithmetic of a kernel for the 32 lanes of its first warp,
    in program order (each loop's first trip), and prices every memory instruction:
    ``cost[line] = (wavefronts, lanes known: 1 or 0)``."""

    def __init__(self, code: list, params: dict[str, int]):
        self.code = code
        self.values: dict[str, list | None] = {}
        self.params = params
        self.cost: dict[int, tuple[int, int]] = {}

    def run(self, order: list[int]) -> _Lanes:
        """Evaluate the instructions at the line indices ``order`` (program order)."""
        budget = MAX_EVALUATED
        for i in order:
            ins = self.code[i]
            if ins is None:
                continue
            op, ops, _ = ins
            budget -= 1
            self._price(i, op, ops)
            try:
                if budget > 0:
                    self._step(op, ops)
                else:
                    for r in _dests_and_sources(op, ops)[0]:
                        self.values[r] = None
            except (ValueError, KeyError, IndexError, ZeroDivisionError, TypeError):
                for r in _dests_and_sources(op, ops)[0]:
                    self.values[r] = None
        return self

    # -- values ---------------------------------------------------------------
    def _value(self, operand: str, bits: int = 64):
        o = operand.strip()
        if o.startswith("%"):
            if o in ("%tid.x", "%laneid"):
                return list(range(LANES))
            if o.startswith(("%tid.", "%ctaid.", "%warpid", "%clusterid", "%cluster_ctaid")):
                return [0] * LANES
            if o.startswith(("%ntid.", "%nctaid.", "%cluster_nctaid")):
                return [1] * LANES
            return self.values.get(o)
        if o.startswith(("0f", "0F", "0d", "0D")):
            return None
        n = _int(o)
        if n is not None:
            return [n & _MASKS.get(bits, _MASKS[64])] * LANES
        if re.match(r"^[A-Za-z_$][\w$]*$", o):   # a symbol: shared memory's base, a global
            return [0] * LANES
        return None

    def _set(self, reg: str, vals, bits: int) -> None:
        if reg.startswith("%p"):
            self.values[reg] = None if vals is None else [bool(v) for v in vals]
            return
        self.values[reg] = None if vals is None else [v & _MASKS[bits] for v in vals]

    def _step(self, op: str, ops: list[str]) -> None:
        parts = op.split(".")
        base = parts[0]
        types = [p for p in parts if _TYPE.match(p) or p == "pred"]
        ty = types[-1] if types else "b32"
        bits = int(ty[1:]) if ty != "pred" else 1
        signed = ty.startswith("s")
        dests = _REG.findall(ops[0]) if ops and "[" not in ops[0] else []
        if base == "ld" and "param" in parts:
            name = ops[1].strip()[1:-1].strip()
            self._set(dests[0], [self.params.get(name, 0)] * LANES, bits)
            return
        if base in ("ld", "ldmatrix", "atom", "ldu") or op.startswith(("wgmma", "mma", "cp.", "st.")):
            for r in dests:   # a loaded value: the same for every lane (an index a gather reads)
                self._set(r, [0] * LANES, 64 if r.startswith("%rd") else 32)
            return
        if ty.startswith("f") or ty == "f16x2" or not dests:
            for r in dests:
                self.values[r] = None
            return
        dest = dests[0]
        if base == "mov":
            v = self._value(ops[1], bits)
            if dest.startswith("%p"):
                self._set(dest, v, 1)
            else:
                self._set(dest, v, bits if bits > 1 else 32)
            return
        if base == "cvt":
            return self._convert(dest, ops[1], types)
        if base == "redux":   # a warp-wide reduction: every lane gets the result
            v = self._value(ops[1], bits)
            f = {"add": sum, "or": lambda xs: functools.reduce(operator.or_, xs),
                 "and": lambda xs: functools.reduce(operator.and_, xs),
                 "xor": lambda xs: functools.reduce(operator.xor, xs), "min": min, "max": max}.get(parts[2])
            if v is None or f is None:
                return self._set(dest, None, bits)
            v = [_signed(x, bits) for x in v] if signed else v
            return self._set(dest, [f(v)] * LANES, bits)
        if base in ("popc", "clz", "brev", "bfind"):
            v = self._value(ops[1], bits)
            if v is None:
                return self._set(dest, None, 32)
            v = [x & _MASKS[bits] for x in v]
            f = {"popc": int.bit_count, "clz": lambda x: bits - x.bit_length(),
                 "brev": lambda x: int(f"{x:0{bits}b}"[::-1], 2),
                 "bfind": lambda x: x.bit_length() - 1 if x else 0xFFFFFFFF}[base]
            return self._set(dest, [f(x) for x in v], bits if base == "brev" else 32)
        if base == "setp":
            a, b = self._value(ops[1], bits), self._value(ops[2], bits)
            cmp = parts[1]
            if a is None or b is None or ty.startswith("f"):
                self.values[dest] = None
                return
            if signed:
                a, b = [_signed(x, bits) for x in a], [_signed(x, bits) for x in b]
            else:
                a, b = [x & _MASKS[bits] for x in a], [x & _MASKS[bits] for x in b]
            f = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "lt": lambda x, y: x < y,
                 "le": lambda x, y: x <= y, "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y,
                 "lo": lambda x, y: x < y, "ls": lambda x, y: x <= y, "hi": lambda x, y: x > y,
                 "hs": lambda x, y: x >= y}[cmp]
            self._set(dest, [f(x, y) for x, y in zip(a, b)], 1)
            return
        if base == "selp":
            a, b, p = self._value(ops[1], bits), self._value(ops[2], bits), self._value(ops[3])
            self._set(dest, None if None in (a, b, p) else [x if c else y for x, y, c in zip(a, b, p)], bits)
            return
        if ty == "pred":
            vals = [self._value(o) for o in ops[1:]]
            if None in vals:
                self.values[dest] = None
            elif base == "not":
                self._set(dest, [not x for x in vals[0]], 1)
            else:
                f = {"and": lambda x, y: x and y, "or": lambda x, y: x or y, "xor": lambda x, y: x != y}[base]
                self._set(dest, [f(x, y) for x, y in zip(vals[0], vals[1])], 1)
            return
        if base in ("mul", "mad") and "wide" in parts:
            a, b = self._value(ops[1], bits), self._value(ops[2], bits)
            c = self._value(ops[3], 2 * bits) if base == "mad" else [0] * LANES
            if None in (a, b, c):
                return self._set(dest, None, 2 * bits)
            conv = (lambda x: _signed(x, bits)) if signed else (lambda x: x & _MASKS[bits])
            self._set(dest, [conv(x) * conv(y) + z for x, y, z in zip(a, b, c)], 2 * bits)
            return
        args = [self._value(o, bits) for o in ops[1:]]
        if any(a is None for a in args):
            return self._set(dest, None, bits)
        conv = (lambda x: _signed(x, bits)) if signed else (lambda x: x & _MASKS[bits])
        a = [conv(x) for x in args[0]]
        b = [conv(x) for x in args[1]] if len(args) > 1 else None
        if base == "add":
            r = [x + y for x, y in zip(a, b)]
        elif base == "sub":
            r = [x - y for x, y in zip(a, b)]
        elif base == "mul":
            prod = [x * y for x, y in zip(a, b)]
            r = [p >> bits for p in prod] if "hi" in parts else prod
        elif base == "mad":
            c = [conv(x) for x in args[2]]
            r = [x * y + z for x, y, z in zip(a, b, c)]
        elif base == "shl":
            r = [x << (y & 0xFF) if (y & 0xFF) < bits else 0 for x, y in zip(a, b)]
        elif base == "shr":
            r = [x >> min(y & 0xFF, bits) for x, y in zip(a, b)]
        elif base == "and":
            r = [x & y for x, y in zip(a, b)]
        elif base == "or":
            r = [x | y for x, y in zip(a, b)]
        elif base == "xor":
            r = [x ^ y for x, y in zip(a, b)]
        elif base == "not":
            r = [~x for x in a]
        elif base == "neg":
            r = [-x for x in a]
        elif base == "abs":
            r = [abs(x) for x in a]
        elif base == "min":
            r = [min(x, y) for x, y in zip(a, b)]
        elif base == "max":
            r = [max(x, y) for x, y in zip(a, b)]
        elif base == "div":
            r = [int(x / y) if signed else x // y for x, y in zip(a, b)]
        elif base == "rem":
            r = [x - int(x / y) * y if signed else x % y for x, y in zip(a, b)]
        elif base == "bfe":
            pos, length = args[1], args[2]
            r = []
            for x, p, n in zip(args[0], pos, length):
                field = (x & _MASKS[bits]) >> (p & 0xFF) & ((1 << (n & 0xFF)) - 1)
                if signed and n and field >> ((n & 0xFF) - 1):
                    field -= 1 << (n & 0xFF)
                r.append(field)
        else:
            return self._set(dest, None, bits)
        self._set(dest, r, bits)

    def _convert(self, dest: str, source: str, types: list[str]) -> None:
        """cvt between integer types, and between integers and fp32 bit patterns (the
        bit tricks that find a set bit through a float's exponent)."""
        if len(types) < 2 or types[0] not in ("f32",) and types[0].startswith("f") or \
                types[-1] not in ("f32",) and types[-1].startswith("f"):
            return self._set(dest, None, 32)
        dty, sty = types[0], types[-1]
        sbits = int(sty[1:])
        v = self._value(source, sbits)
        if v is None:
            return self._set(dest, None, 32)
        if sty == "f32":
            v = [struct.unpack("<f", struct.pack("<I", x & _MASKS[32]))[0] for x in v]
            if any(not math.isfinite(x) for x in v):
                return self._set(dest, None, 32)
            v = [int(x) for x in v]   # the rounding modes of cvt.r*i.* differ only for fractions
        elif sty.startswith("s"):
            v = [_signed(x, sbits) for x in v]
        else:
            v = [x & _MASKS[sbits] for x in v]
        if dty == "f32":
            return self._set(dest, [struct.unpack("<I", struct.pack("<f", float(x)))[0] for x in v], 32)
        return self._set(dest, v, int(dty[1:]))

    # -- memory instructions ------------------------------------------------------
    def _price(self, i: int, op: str, ops: list[str]) -> None:
        if _BULK.match(op):
            return   # TMA: one thread issues it, the copy engine moves the bytes
        if _LOAD.match(op) or _STORE.match(op):
            where = next((o for o in ops if o.strip().startswith("[")), None)
            self.cost[i] = self._global(where, _width(op))
        elif _ASYNC.match(op):
            size = _int(ops[2]) if len(ops) > 2 else 16
            self.cost[i] = self._global(ops[1], size or 16)
        elif _SHARED.match(op):
            where = next((o for o in ops if o.strip().startswith("[")), None)
            if op.startswith(("ldmatrix", "stmatrix")):
                n = next((int(p[1:]) for p in op.split(".") if p in ("x1", "x2", "x4")), 1)
                self.cost[i] = self._shared(where, 16, lanes=8 * n)
            else:
                self.cost[i] = self._shared(where, _width(op))

    def _addresses(self, where):
        if where is None:
            return None
        reg, offset = _address(where)
        if reg is None:
            return None
        v = self._value(reg)
        return None if v is None else [x + offset for x in v]

    def _global(self, where, width: int) -> tuple[int, int]:
        addr = self._addresses(where)
        if addr is None:
            return max(1, -(-LANES * width // LINE)), 0
        return len({a // LINE for a in addr}), 1

    def _shared(self, where, width: int, lanes: int = LANES) -> tuple[int, int]:
        """Passes: lanes are served in phases of 128 bytes; in each, a bank holds one word a pass."""
        ideal = max(1, -(-lanes * width // LINE))
        addr = self._addresses(where)
        if addr is None:
            return ideal, 0
        addr = addr[:lanes]
        per_phase = max(1, LINE // width)
        passes = 0
        for start in range(0, lanes, per_phase):
            words: dict[int, set] = {}
            for a in addr[start:start + per_phase]:
                for w in range(a // BANK_BYTES, (a + width - 1) // BANK_BYTES + 1):
                    words.setdefault(w % BANKS, set()).add(w)
            passes += max((len(s) for s in words.values()), default=1)
        return max(ideal, passes), 1
