"""What a kernel's PTX says about its speed: read from the compiler's own code for the target.

    read(ptx) -> {...}      plain JSON: one trip of the busiest innermost loop, and the whole kernel

The compile check (compile.py) holds the PTX of every kernel variant a run
launched; the speed estimate (grader/estimate.py) needs what no interpreter
run can show, because it is decided by the compiler: how wide each global
load and store is, whether the loop's loads are copied asynchronously
(``cp.async``, TMA) or wait in registers, what is staged through shared
memory, how many instructions one trip issues and which ones, and how many
passes through the load/store unit each memory instruction costs a warp.
The last needs the addresses of the 32 lanes of a warp: ptx_lanes.py
evaluates the kernel's integer arithmetic for the lanes of its first warp
and prices each memory instruction. The instructions themselves are parsed
by ptx_parse.py.

This file runs in the untrusted worker (the compile check's child) and
depends on the standard library only. Nothing here raises: a PTX it cannot
read gives {}.
"""

from __future__ import annotations

import re
from collections import Counter

from .ptx_lanes import _Lanes, _params
from .ptx_parse import (
    _ASYNC,
    _BULK,
    _LABEL,
    _LOAD,
    _REG,
    _SHARED,
    _STORE,
    FREE,
    ISSUE,
    SERIAL,
    _dests_and_sources,
    _int,
    _kind,
    _parse,
    _width,
)


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
    narrow_loads    the source lines of synchronous loads of at most 4 bytes a lane
                    ({"w8a8.py:52": 8}: the PTX's .loc lines), most first
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
        source = _source_lines(lines)
        loops = cfg.loops()
        inner = [body for head, body in loops.items()
                 if not any(other != head and other in body for other in loops)]
        stats = [_body(code, cfg.lines_of(body), lanes, source) for body in inner]
        out = max(stats, key=lambda st: st["instructions"], default={})
        whole = _body(code, cfg.program_order(), lanes, source)
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



_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')


def _source_lines(lines: list[str]) -> list[str]:
    """For each PTX line, the kernel source line it was compiled from ("w8a8.py:52"), from the
    .loc directives before it, or "" where none was given."""
    files = {m[1]: m[2].rsplit("/", 1)[-1][:40] for m in map(_FILE.match, lines) if m}
    where, out = "", []
    for line in lines:
        m = _LOC.match(line)
        if m:
            where = f"{files.get(m[1], '?')}:{m[2]}" if m[2] != "0" else where
        out.append(where)
    return out


# ---------------------------------------------------------------------------
# The kernel's blocks and loops
# ---------------------------------------------------------------------------

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

def _body(code: list, span: list[int], lanes: _Lanes, source: list[str]) -> dict:
    instr = serial = mma = wgmma = loads = asyncs = tma = 0
    shared_st = shared_ld = staged = 0
    wavefronts = known = mem = 0
    load_w, async_w, store_w, narrow = Counter(), Counter(), Counter(), Counter()
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
            if _width(op) <= 4 and source[i]:
                narrow[source[i]] += 1
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
            "narrow_loads": dict(narrow.most_common(8)),
            "shared_stores": shared_st, "shared_loads": shared_ld, "wavefronts": wavefronts,
            "lanes_known": round(known / mem, 2) if mem else 1.0}


def _keyed(c: Counter) -> dict:
    return {str(k): v for k, v in sorted(c.items())}
