"""The compile check's rows: one plain-JSON dict per kernel variant, and what fills them.

compile.py records the launches and runs the check; this module holds what a
row is and how one is made, for the parent and the child (compile_child.py)
alike:

    limits_for(target)        the target GPU's resource limits
    _Variant                  one distinct launch as recorded (compile.py fills it)
    _pick, _descriptions      which variants are compiled (at most MAX_VARIANTS
                              groups), and how each reads in the table
    _row, _apply              a row, and a compile result judged against the limits
                              (does the variant launch, does it spill)
    _fit                      the rows cut to fit one reply line
    _cache_key, _read_cached, _write_cached   results kept between runs
    _clip, _relative, _def_line   text, file and line as the report shows them

This file runs in the untrusted worker (and in the compile child) and depends
on the standard library only (triton, lazily, for the cache key).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re

MAX_VARIANTS = 30      # variants compiled (and rows returned) per check
MAX_TEXT = 2000        # characters per string in a row
MAX_JSON_BYTES = 48000  # all rows of one check, as JSON: they travel in one reply line

# Per compute capability: the most dynamic shared memory one block may opt in
# to (CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability"), registers per thread and per block (= per SM), threads per block.
_SHARED = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448, 100: 232448, 103: 232448, 120: 101376}
_REGISTERS_PER_THREAD = 255
_REGISTERS_PER_BLOCK = 65536
_THREADS_PER_BLOCK = 1024

GPU_LABEL = "gpu:"     # a label of a launch at a test's GPU shape (capture.py); others are CPU-shape calls


def limits_for(target: str) -> dict:
    """Resource limits of ``target`` ("cuda:90"): shared_bytes, registers_per_thread,
    registers_per_block, threads_per_block."""
    cc = int(target.split(":")[1])
    return {"shared_bytes": _SHARED.get(cc, _SHARED[90]), "registers_per_thread": _REGISTERS_PER_THREAD,
            "registers_per_block": _REGISTERS_PER_BLOCK, "threads_per_block": _THREADS_PER_BLOCK}


def _clip(text, n: int = MAX_TEXT) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= n else text[: n - 15] + " ...(truncated)"


def _kib(n: int) -> str:
    return f"{n / 1024:.0f} KiB"


class _Variant:
    """One distinct launch as compile.py records it: the kernel, its specialization and options."""
    __slots__ = ("key", "group", "module", "qualname", "name", "file", "line", "signature", "constexprs",
                 "attrs", "options", "launches", "error", "describe", "details", "aligned", "id", "labels",
                 "warps", "stages")

    def label(self, label) -> None:
        if label and label not in self.labels:
            self.labels.append(label)


def _row(**fields) -> dict:
    row = {"kernel": "?", "file": "", "line": 0, "variant": "", "launches": 0, "checked": False, "ok": True,
           "status": "skipped", "error": "", "registers": None, "spills": None, "shared_bytes": None,
           "launchable": None, "why_not": "", "warning": "", "note": "", "tests": [], "cpu_tests": [],
           "ids": [], "num_warps": None, "num_stages": None, "loop": {}, "key": ""}
    row.update(fields)
    return row


def _def_line(fn) -> int:
    """Line of the ``def`` of ``fn`` (co_firstlineno is the first decorator's)."""
    import inspect

    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return getattr(getattr(fn, "__code__", None), "co_firstlineno", 0)
    for i, text in enumerate(lines):
        if re.match(r"\s*(async\s+)?def\s", text):
            return start + i
    return start


def _relative(path: str, root: str | None) -> str:
    if root:
        try:
            rel = os.path.relpath(path, root)
            if not rel.startswith(".."):
                return rel.replace(os.sep, "/")
        except ValueError:
            pass
    return os.path.basename(path)


def _pick(variants: list[_Variant], gpu_only: bool = False) -> tuple[list[list[_Variant]], int, int]:
    """Variants grouped (same compile up to divisibility hints), at most MAX_VARIANTS
    groups: every kernel's first group before any kernel's second. Also the
    number of groups left out, and (``gpu_only``) of groups no GPU shape launches."""
    groups: dict[str, list[_Variant]] = {}
    for v in variants:
        groups.setdefault(v.group, []).append(v)
    # A variant a GPU shape launches is compiled with its own specialization (its
    # divisibility hints are the GPU's); launches of the CPU shapes that differ
    # from it only in those hints join it rather than compile again.
    split: dict[str, list[_Variant]] = {}
    cpu_only = 0
    for key, members in groups.items():
        gpu = [m for m in members if any(lab.startswith(GPU_LABEL) for lab in m.labels)]
        if not gpu:
            if gpu_only:
                cpu_only += 1
            else:
                split[key] = members
            continue
        for m in gpu:
            split[m.key] = [m]
        best = max(gpu, key=lambda m: m.aligned)
        split[best.key] += [m for m in members if m not in gpu]
    groups = split
    by_kernel: dict[tuple, list] = {}
    for members in groups.values():
        by_kernel.setdefault((members[0].file, members[0].line), []).append(members)
    order, rank = [], 0
    while len(order) < len(groups):
        for lists in by_kernel.values():
            if rank < len(lists):
                order.append(lists[rank])
        rank += 1
    return order[:MAX_VARIANTS], max(0, len(order) - MAX_VARIANTS), cpu_only


def _descriptions(reps: list[_Variant]) -> list[str]:
    """Each variant's constexprs and launch options, plus, where two variants of
    one kernel would read alike, the argument types or specializations that differ."""
    out = []
    for v in reps:
        alike = [w for w in reps if w is not v and (w.file, w.line, w.describe) == (v.file, v.line, v.describe)]
        extra = [d for name, d in v.details.items() if any(w.details.get(name) != d for w in alike)]
        out.append("; ".join(x for x in (v.describe, ", ".join(extra)) if x))
    return out


def _cache_key(rep: _Variant, target: str, sources: str, root: str | None) -> str:
    """Same Triton, target, package sources and variant: same result. Paths are made
    relative (every run stages the submission in a new folder)."""
    import triton

    text = repr((triton.__version__, target, sources, _relative(rep.file, root), rep.line, rep.qualname,
                 sorted(rep.signature.items()), sorted(map(repr, rep.constexprs.items())),
                 sorted(map(repr, rep.options.items())), sorted(map(repr, rep.attrs.items()))))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _sources_digest(root: str | None) -> str:
    h = hashlib.sha256()
    if root and os.path.isdir(root):
        for dirpath, _, files in sorted(os.walk(root)):
            for f in sorted(files):
                if f.endswith(".py"):
                    with contextlib.suppress(OSError), open(os.path.join(dirpath, f), "rb") as fh:
                        h.update(f.encode() + b"\0" + fh.read())
    return h.hexdigest()


def _fit(rows: list[dict], limit: int = MAX_JSON_BYTES) -> list[dict]:
    """Rows small enough for one reply: an error already shown for an earlier
    variant of the same kernel is referred to, and long strings are cut."""
    shown = {}
    for i, row in enumerate(rows):
        for k in ("error", "why_not", "warning", "note", "variant"):
            row[k] = _clip(row[k])
        key = (row["file"], row["line"], row["error"])
        if row["error"] and key in shown:
            lines = row["error"].splitlines()
            final = next((ln for ln in lines[1:] if ln[:1].strip() and not ln.startswith("File ")), "")
            row["error"] = "\n".join([lines[0], final[:300], f"(the same error as for {rows[shown[key]]['variant']})"])
        elif row["error"]:
            shown[key] = i
    budget = MAX_TEXT
    while len(json.dumps(rows)) > limit and budget > 100:
        budget //= 2
        for row in rows:
            for k in ("error", "note", "variant", "why_not", "warning"):
                row[k] = _clip(row[k], budget)
    return rows


def _apply(row: dict, res: dict, lim: dict) -> None:
    """Fill ``row`` from a child's result and judge whether the variant launches."""
    status = res.get("status", "internal")
    row.update(checked=True, status=status, ok=status == "ok", error=res.get("error", ""),
               registers=res.get("registers"), spills=res.get("spills"), shared_bytes=res.get("shared_bytes"),
               loop=res.get("loop") or {})
    if status != "ok":
        row["launchable"] = False
        row["why_not"] = "it does not compile" if status == "error" else "the compile check could not compile it"
        return
    why = []
    shared, regs, warps = res.get("shared_bytes"), res.get("registers"), res.get("num_warps") or 4
    if shared is not None and shared > lim["shared_bytes"]:
        why.append(f"needs {_kib(shared)} ({shared} bytes) of shared memory; the target allows "
                   f"{_kib(lim['shared_bytes'])} ({lim['shared_bytes']} bytes)")
    threads = 32 * warps
    if threads > lim["threads_per_block"]:
        why.append(f"{threads} threads per block; the target allows {lim['threads_per_block']}")
    if regs is not None:
        per_block = -(-regs // 8) * 8 * threads  # registers are allocated 8 per thread at a time
        if per_block > lim["registers_per_block"]:
            why.append(f"{regs} registers x {threads} threads = {per_block} registers per block; "
                       f"the target has {lim['registers_per_block']}")
    row["launchable"] = not why
    row["why_not"] = "; ".join(why)
    if res.get("spills"):
        row["warning"] = (f"{res['spills']} bytes of registers spilled to local memory "
                          f"({regs} registers per thread): slow, but it runs")
    notes = [row["note"], res.get("note", "")]
    if not res.get("final"):
        notes.append("registers not measured: ptxas did not run within the time budget")
    row["note"] = "; ".join(n for n in notes if n)


def _read_cached(path: str):
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError):
        return None
    return res if isinstance(res, dict) and res.get("status") in ("ok", "error") else None


def _write_cached(path: str, res: dict) -> None:
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(res, f)
        os.replace(tmp, path)
