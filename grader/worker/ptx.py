"""What a kernel's PTX says about its speed: read from the compiler's own code for the target.

    read(ptx) -> {...}      plain JSON: one trip of the busiest innermost loop, and the whole kernel

The compile check (compile.py) holds the PTX of every kernel variant a run
launched; the speed estimate (grader/estimate.py) needs what no interpreter
run can show, because it is decided by the compiler: how wide each global
load and store is, whether the loop's loads are copied asynchronously
(``cp.async``, TMA) or wait in registers, what is staged through shared
memory, how many instructions one trip issues and which ones, and how many
passes through the load/store unit each memory instruction costs a warp.

The last needs the addresses of the 32 lanes of a warp. They are computed
here by evaluating the kernel's integer arithmetic for the lanes of its
first warp (``%tid.x`` = 0..31, program 0), in program order, through the
first trip of each loop: pointer parameters are far-apart aligned bases,
integer parameters a large round value (a row stride, as far as a warp can
tell), and every loaded value is the same for all lanes (an index a gather
reads). What cannot be evaluated (floating point, a register whose value
depends on an instruction not modelled here) makes that instruction's
lanes unknown, and an access with unknown lanes is counted as if its lanes
were contiguous: the count is never more pessimistic than the code proves.

- A global access costs one pass ("wavefront") per distinct 128-byte line
  its lanes touch: 16-byte vectors of 32 adjacent lanes take 4, a 2-byte
  load whose lanes sit in 32 different rows takes 32.
- A shared-memory access costs one pass per 128 bytes, more where lanes of
  one phase hit different words of the same bank (a bank conflict).

This file runs in the untrusted worker (the compile check's child) and
depends on the standard library only. Nothing here raises: a PTX it cannot
read gives {}.
"""

from __future__ import annotations

import functools
import math
import operator
import re
import struct
from collections import Counter

LANES = 32
LINE = 128                 # bytes: a global access costs one pass per line its lanes touch
BANKS, BANK_BYTES = 32, 4
POINTER_BASE = 1 << 40     # pointer parameter i is at (i + 1) * POINTER_BASE: no two share a line
INT_PARAM = 4096           # every integer parameter: a stride that puts rows in different lines
MAX_EVALUATED = 200_000    # instructions whose lanes are evaluated; past that, lanes are unknown

# PTX instructions that ptxas expands into many machine instructions (about as
# many issue slots as listed); everything else takes one.
ISSUE = (("div.rn.", 12), ("div.full.", 2), ("div.approx.", 2), ("rcp.rn.", 10), ("sqrt.rn.", 12),
         ("div.s", 20), ("div.u", 20), ("rem.", 20), ("ex2.", 2), ("lg2.", 2), ("sin.", 2), ("cos.", 2),
         ("rsqrt.", 2), ("rcp.approx", 2))
# Instructions that run as a long dependent chain with a branch to a slow path: a warp waits
# through each one. By what they are, in the words the report uses.
SERIAL = (("div.rn.", "correctly rounded float division"), ("rcp.rn.", "correctly rounded float division"),
          ("sqrt.rn.", "correctly rounded square root"), ("div.s", "integer division"),
          ("div.u", "integer division"), ("rem.", "integer modulo"))
FREE = ("mov.", "bar.", "fence.", "cp.async.commit", "cp.async.wait", "wgmma.fence", "wgmma.commit",
        "wgmma.wait", "mbarrier.", "prefetch.", "@", "{", "}", "ret", "bra", "//")
_LOAD = re.compile(r"^(ld\.global|ld\.volatile\.global|ld\.relaxed\.gpu\.global|ld\.acquire\.gpu\.global|atom\.global)")
_ASYNC = re.compile(r"^cp\.async\.(cg|ca)\.shared")
_BULK = re.compile(r"^cp\.async\.bulk")
_STORE = re.compile(r"^(st\.global|st\.volatile\.global|st\.relaxed\.gpu\.global|st\.release\.gpu\.global|red\.global)")
_SHARED = re.compile(r"^(ld\.shared|st\.shared|ldmatrix|stmatrix|atom\.shared|red\.shared)")
_REG = re.compile(r"%[a-z]+\d+")
_LABEL = re.compile(r"^(\$L__BB\d+_\d+):")
_TYPE = re.compile(r"^[bsuf](8|16|32|64)$")


def read(ptx: str) -> dict:
    """Per thread, what one trip of the kernel's busiest innermost loop executes, and
    the whole kernel's totals (a loop is a natural loop of the kernel's block graph;
    without one, only the totals, and the kernel's ``top`` and ``serial_kinds``):

    instructions    issue slots (an instruction ptxas expands into many counts as that
                    many: ISSUE)
    serial          instructions a warp waits through as a long chain (SERIAL), and
                    serial_kinds: how many of each kind
    top             the instruction kinds that take most issue slots: [[kind, slots], ...]
    mma, wgmma      tensor-core instructions (wgmma: Hopper's warp-group ones)
    loads           synchronous global loads; load_widths: their count per width in bytes
                    ({"2": 80} is 80 scalar 2-byte loads), load_bytes: bytes they bring
    async_loads     copies into shared memory the software pipeline issues trips ahead
                    (cp.async, TMA); async_widths, async_bytes as for loads; tma: TMA copies
    load_chain      the longest chain of synchronous loads whose address needs the data of
                    another load of the same trip (a gather through an index loaded in the loop)
    store_widths    global stores per width in bytes
    staged          shared-memory stores of data a synchronous global load of the same trip
                    brought into registers (the round trip cp.async avoids)
    shared_stores, shared_loads   shared-memory instructions (ldmatrix, stmatrix included)
    wavefronts      per warp, passes through the load/store unit: global accesses one per
                    128-byte line their lanes touch, shared ones one per 128 bytes and per
                    bank conflict; lanes_known: share of the memory instructions whose lane
                    addresses were evaluated (the others count as contiguous)

    and ``kernel_instructions``, ``kernel_serial``, ``kernel_wavefronts``: the same over the
    whole kernel, each instruction once."""
    try:
        lines = ptx.splitlines()
        code = [_parse(line) for line in lines]
        cfg = _Graph(lines, code)
        lanes = _Lanes(code, _params(lines)).run(cfg.program_order())
        loops = cfg.loops()
        inner = [body for head, body in loops.items()
                 if not any(other != head and other in body for other in loops)]
        stats = [_body(code, cfg.lines_of(body), lanes) for body in inner]
        out = max(stats, key=lambda st: st["instructions"], default={})
        whole = _body(code, cfg.program_order(), lanes)
        if out:
            out["loops"] = len(loops)
        out["kernel_instructions"] = whole["instructions"]
        out["kernel_serial"] = whole["serial"]
        out["kernel_wavefronts"] = whole["wavefronts"]
        if not stats:
            out["top"], out["serial_kinds"] = whole["top"], whole["serial_kinds"]
        return out
    except Exception:  # noqa: BLE001 - statistics are feedback; a PTX they cannot read gives none
        return {}


# ---------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------

def _parse(line: str):
    """(op, operands, guard) of an instruction line, or None."""
    t = line.split("//", 1)[0].strip()
    if not t or t.startswith(("$L", ".", "{", "}")) or t.endswith(":"):
        return None
    guard = None
    m = re.match(r"^@(!?%p\d+)\s+", t)
    if m:
        guard, t = m.group(1), t[m.end():]
    t = t.rstrip(";").strip()
    if not t:
        return None
    parts = t.split(None, 1)
    return parts[0], _operands(parts[1] if len(parts) > 1 else ""), guard


def _operands(text: str) -> list[str]:
    """Split on the commas outside brackets and braces."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur and "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _width(op: str) -> int:
    """Bytes one lane moves: ``ld.global.v4.b32`` 16, ``ld.global.b16`` 2."""
    parts = op.split(".")
    vec = next((int(p[1:]) for p in parts if p in ("v2", "v4", "v8")), 1)
    bits = next((int(m.group(1)) for p in reversed(parts) if (m := _TYPE.match(p))), 32)
    return vec * bits // 8


def _address(operand: str):
    """(register or symbol, byte offset) of ``[ %rd5 + 16 ]``."""
    inner = operand.strip()[1:-1].replace(" ", "")
    m = re.match(r"^([%\w$.]+?)(?:\+(-?(?:0x[0-9a-fA-F]+|\d+)))?$", inner)
    if not m:
        return None, 0
    return m.group(1), int(m.group(2), 0) if m.group(2) else 0


def _kind(op: str) -> str:
    """The words the report uses for an instruction."""
    if _LOAD.match(op):
        return f"{_width(op)}-byte global loads"
    if _STORE.match(op):
        return f"{_width(op)}-byte global stores"
    if _ASYNC.match(op) or _BULK.match(op):
        return "asynchronous copies"
    if _SHARED.match(op):
        return "shared-memory accesses"
    for prefix, name in SERIAL:
        if op.startswith(prefix):
            return name + "s"
    if op.startswith(("wgmma.mma_async", "mma.sync", "wmma.mma")):
        return "tensor-core instructions"
    parts = op.split(".")
    types = [p for p in parts if _TYPE.match(p)]
    ty = types[-1] if types else ""
    if parts[0] in ("setp", "selp", "slct") or "pred" in parts:
        return "compares and selects"
    if parts[0] in ("cvt", "cvta", "prmt"):
        return "conversions"
    if ty.startswith("f") or parts[0] in ("fma", "ex2", "lg2", "rcp", "rsqrt", "sqrt", "sin", "cos", "tanh"):
        return f"fp{ty[1:] or '32'} arithmetic"
    if ty.endswith("64") or parts[0] in ("mul", "mad") and "wide" in parts:
        return "64-bit integer arithmetic (addresses)"
    return "32-bit integer arithmetic"


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


class _Graph:
    """The kernel's basic blocks and their edges. A loop is a natural loop (an edge back to
    a block that dominates its source), whatever order the compiler laid the blocks out in."""

    def __init__(self, lines: list[str], code: list):
        starts, label_at = {0}, {}
        for i, line in enumerate(lines):
            m = _LABEL.match(line)
            if m:
                starts.add(i)
                label_at[m.group(1)] = i
            ins = code[i]
            if ins and (ins[0].startswith("bra") or ins[0] in ("ret", "exit", "trap")):
                starts.add(i + 1)
        self.starts = sorted(s for s in starts if s < len(lines))
        self.ends = [*self.starts[1:], len(lines)]
        index = {s: b for b, s in enumerate(self.starts)}
        self.succ: list[list[int]] = []
        for b, (start, end) in enumerate(zip(self.starts, self.ends)):
            last = next((code[i] for i in range(end - 1, start - 1, -1) if code[i]), None)
            out = []
            if last and last[0].startswith("bra"):
                target = last[1][0].strip() if last[1] else ""
                if target in label_at:
                    out.append(index[label_at[target]])
                if last[2] is not None and b + 1 < len(self.starts):   # a guarded branch falls through too
                    out.append(b + 1)
            elif not (last and last[0] in ("ret", "exit", "trap")) and b + 1 < len(self.starts):
                out.append(b + 1)
            self.succ.append(out)
        self.order = self._reverse_postorder()
        self.rank = {b: r for r, b in enumerate(self.order)}

    def _reverse_postorder(self) -> list[int]:
        seen, post, stack = {0}, [], [(0, iter(self.succ[0]))]
        while stack:
            b, it = stack[-1]
            nxt = next((s for s in it if s not in seen), None)
            if nxt is None:
                post.append(b)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, iter(self.succ[nxt])))
        return post[::-1]

    def program_order(self) -> list[int]:
        """Line indices of every reachable block in reverse postorder: a loop's first trip
        before what follows the loop."""
        return self.lines_of(self.order)

    def lines_of(self, blocks) -> list[int]:
        return [i for b in sorted(blocks, key=self.rank.__getitem__) for i in range(self.starts[b], self.ends[b])]

    def loops(self) -> dict[int, set[int]]:
        """{header block: the blocks of its natural loop}."""
        preds: dict[int, list[int]] = {b: [] for b in self.order}
        for b in self.order:
            for s in self.succ[b]:
                preds[s].append(b)
        idom = {self.order[0]: self.order[0]}
        changed = True
        while changed:   # Cooper, Harvey and Kennedy's iterative dominators
            changed = False
            for b in self.order[1:]:
                done = [p for p in preds[b] if p in idom]
                new = done[0]
                for p in done[1:]:
                    a, c = p, new
                    while a != c:
                        while self.rank[a] > self.rank[c]:
                            a = idom[a]
                        while self.rank[c] > self.rank[a]:
                            c = idom[c]
                    new = a
                if idom.get(b) != new:
                    idom[b] = new
                    changed = True

        def dominates(h: int, b: int) -> bool:
            while b != h:
                if idom[b] == b:
                    return False
                b = idom[b]
            return True

        loops: dict[int, set[int]] = {}
        for u in self.order:
            for h in self.succ[u]:
                if dominates(h, u):
                    body, todo = loops.setdefault(h, {h}), [u]
                    while todo:
                        b = todo.pop()
                        if b not in body:
                            body.add(b)
                            todo.extend(preds[b])
        return loops


# ---------------------------------------------------------------------------
# One loop body (or the whole kernel)
# ---------------------------------------------------------------------------

def _body(code: list, span: list[int], lanes: _Lanes) -> dict:
    instr = serial = mma = wgmma = loads = asyncs = tma = 0
    shared_st = shared_ld = staged = 0
    wavefronts = known = mem = 0
    load_w, async_w, store_w = Counter(), Counter(), Counter()
    kinds, serial_kinds = Counter(), Counter()
    chain_of: dict[str, int] = {}   # register -> synchronous loads its value waited for, in order
    from_global: set[str] = set()   # registers holding what a synchronous global load of this span brought
    longest = 0
    for i in span:
        ins = code[i]
        if ins is None:
            continue
        op, ops, _ = ins
        if op.startswith(FREE) and not op.startswith("mov."):
            continue
        regs = [r for o in ops for r in _REG.findall(o)]
        if op.startswith("mov."):   # the inline-asm loads' default value: no instruction, data flows through
            if len(regs) >= 2 and regs[1] in from_global:
                from_global.add(regs[0])
            elif regs:
                from_global.discard(regs[0])
            continue
        slots = next((w for prefix, w in ISSUE if op.startswith(prefix)), 1)
        instr += slots
        kinds[_kind(op)] += slots
        kind = next((name for prefix, name in SERIAL if op.startswith(prefix)), None)
        if kind:
            serial += 1
            serial_kinds[kind] += 1
        if op.startswith(("wgmma.mma_async", "mma.sync", "wmma.mma")):
            mma += 1
            wgmma += op.startswith("wgmma")
        dests, srcs = _dests_and_sources(op, ops)
        depth = max((chain_of.get(r, 0) for r in srcs), default=0)
        cost = lanes.cost.get(i)
        if cost is not None:
            wavefronts += cost[0]
            known += cost[1]
            mem += 1
        if _LOAD.match(op):
            loads += 1
            load_w[_width(op)] += 1
            depth += 1
            longest = max(longest, depth)
            from_global.update(dests)
        elif _ASYNC.match(op):
            asyncs += 1
            size = _int(ops[2]) if len(ops) > 2 else None
            async_w[size or 16] += 1
        elif _BULK.match(op):
            asyncs += 1
            tma += 1
        elif _STORE.match(op):
            store_w[_width(op)] += 1
        elif _SHARED.match(op):
            if op.startswith(("st.", "stmatrix")):
                shared_st += 1
                staged += any(r in from_global for r in srcs)
            else:
                shared_ld += 1
        for r in dests:
            chain_of[r] = depth
            if not _LOAD.match(op) and r in from_global:
                from_global.discard(r)
    top = [[k, v] for k, v in kinds.most_common(4)]
    return {"instructions": instr, "serial": serial, "serial_kinds": dict(serial_kinds), "top": top,
            "mma": mma, "wgmma": wgmma, "loads": loads, "load_widths": _keyed(load_w),
            "load_bytes": sum(w * n for w, n in load_w.items()), "async_loads": asyncs,
            "async_widths": _keyed(async_w), "async_bytes": sum(w * n for w, n in async_w.items()), "tma": tma,
            "load_chain": longest, "store_widths": _keyed(store_w), "staged": staged,
            "shared_stores": shared_st, "shared_loads": shared_ld, "wavefronts": wavefronts,
            "lanes_known": round(known / mem, 2) if mem else 1.0}


def _keyed(c: Counter) -> dict:
    return {str(k): v for k, v in sorted(c.items())}


def _dests_and_sources(op: str, ops: list[str]) -> tuple[list[str], list[str]]:
    """Registers an instruction writes and reads (stores and copies write memory only)."""
    if not ops:
        return [], []
    if op.startswith(("st.", "stmatrix", "cp.", "red.", "bar", "fence", "wgmma.fence", "prefetch")):
        return [], [r for o in ops for r in _REG.findall(o)]
    dests = _REG.findall(ops[0]) if "[" not in ops[0] else []
    srcs = [r for o in ops[1:] for r in _REG.findall(o)]
    if op.startswith("wgmma.mma_async"):   # the accumulators are read and written
        srcs += dests
    return dests, srcs


def _int(text: str):
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


# ---------------------------------------------------------------------------
# The lanes of the first warp
# ---------------------------------------------------------------------------

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
