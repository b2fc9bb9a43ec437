"""PTX lines parsed: instructions, their operands, and what kind each is.

    _parse(line) -> (op, operands, guard) or None

The PTX reader (ptx.py) and the per-warp address evaluation (ptx_lanes.py)
both read instructions through these: the classes of memory instruction
(global loads and stores, asynchronous copies, TMA, shared memory), how many
bytes one lane moves, an address operand, the registers an instruction
writes and reads, and the words the report uses for an instruction's kind
(with the issue slots and serial chains of the expensive ones).

This file runs in the untrusted worker (the compile check's child) and
depends on the standard library only.
"""

from __future__ import annotations

import re

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
