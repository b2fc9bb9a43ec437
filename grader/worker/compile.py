"""Compile every Triton kernel a CPU run launched, for the course's GPU, without a GPU.

In the CPU interpreter (TRITON_INTERPRET=1) a kernel runs as Python, so code
that Triton's compiler rejects (a module global that is not a
``tl.constexpr(...)``, an unsupported construct, a keyword the launcher does
not know) passes there and fails on the GPU. This module closes that gap:

    record(fn, args, kwargs, result)  the worker's launch hook (evidence.py);
                                      remembers each distinct launch
    check(target="cuda:90")            compiles what was recorded with Triton's
                                      real compiler and its bundled ptxas; one
                                      plain-JSON dict per kernel variant

A variant is what Triton's JIT would compile on the GPU for that launch: the
kernel, its argument types and specializations (computed by Triton's own
binder for the target backend), the constexpr values and the launch options
(num_warps, num_stages...). Variants that differ only in the divisibility
hints of their integer and pointer arguments are compiled once (the most
aligned one, the closest to the GPU shapes); their results stand for all.

Compiling happens in child processes with TRITON_INTERPRET unset: there the
submission imports as it does on a GPU (``@triton.jit`` gives real
JITFunctions, nested helpers and ``triton.language`` included), and a
compiler that crashes or hangs takes only the child with it. Each variant is
compiled up to PTX first (every compile error, and the shared memory the
launch needs), then assembled by ptxas (registers, spills) while the time
budget lasts. Each variant's PTX is read for the speed estimate (ptx.py: the
widths of its loads and stores, its asynchronous copies, the instructions of
one loop trip and what its memory accesses cost a warp). On a GPU run
``record`` keeps what the real launches reported and ``check`` returns that
instead.

This file runs in the untrusted worker and depends on torch and triton only.
Nothing here raises into the caller: failures become a variant's error.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
import traceback

if __package__:
    from . import ptx as ptx_reader
else:   # run as a script (a child started without its package): ptx.py sits beside it, on sys.path
    import importlib

    ptx_reader = importlib.import_module("ptx")

MAX_VARIANTS = 30      # variants compiled (and rows returned) per check
MAX_TEXT = 2000        # characters per string in a row
MAX_ERROR_LINES = 15
MAX_JSON_BYTES = 48000  # all rows of one check, as JSON: they travel in one reply line
DEFAULT_BUDGET_S = 60.0

# Per compute capability: the most dynamic shared memory one block may opt in
# to (CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability"), registers per thread and per block (= per SM), threads per block.
_SHARED = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448, 100: 232448, 103: 232448, 120: 101376}
_REGISTERS_PER_THREAD = 255
_REGISTERS_PER_BLOCK = 65536
_THREADS_PER_BLOCK = 1024

ROW_KEYS = ("kernel", "file", "line", "variant", "launches", "checked", "ok", "status", "error",
            "registers", "spills", "shared_bytes", "launchable", "why_not", "warning", "note",
            "tests", "cpu_tests", "ids", "num_warps", "num_stages", "loop", "key")
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


# ---------------------------------------------------------------------------
# Recording (in the worker, on every launch)
# ---------------------------------------------------------------------------

class _JitRef:
    """A @triton.jit function passed as a constexpr argument, by where it is defined."""

    def __init__(self, module: str, qualname: str, file: str, line: int):
        self.module, self.qualname, self.file, self.line = module, qualname, file, line

    def __repr__(self):
        return self.qualname


def _source_fn(fn):
    """The Python function behind a JITFunction / InterpretedFunction / Autotuner /
    Heuristics (each keeps what it wraps in ``.fn``), or None."""
    for _ in range(8):
        inner = getattr(fn, "fn", None)
        if inner is None:
            return fn if callable(fn) and hasattr(fn, "__code__") else None
        fn = inner
    return None


def _portable(value):
    """``value`` with @jit functions replaced by _JitRef, so it can be pickled to the child."""
    if isinstance(value, tuple):
        return tuple(_portable(v) for v in value)
    if isinstance(value, list):
        return [_portable(v) for v in value]
    src = _source_fn(value) if hasattr(value, "fn") else None
    if src is not None:
        return _JitRef(src.__module__, src.__qualname__, src.__code__.co_filename, src.__code__.co_firstlineno)
    return value


class _Variant:
    __slots__ = ("key", "group", "module", "qualname", "name", "file", "line", "signature", "constexprs",
                 "attrs", "options", "launches", "error", "describe", "details", "aligned", "id", "labels",
                 "warps", "stages")

    def label(self, label) -> None:
        if label and label not in self.labels:
            self.labels.append(label)


class CompileCheck:
    """Remembers the distinct launches of a run and compiles them for a target GPU."""

    def __init__(self, target: str = "cuda:90"):
        self.target = target
        self.variants: dict[str, _Variant] = {}   # key -> variant, in order of first launch
        self.gpu_rows: dict[int, tuple] = {}       # id(compiled kernel) -> (row, module, kernel) on a GPU
        self._binders: dict = {}                   # source function -> (JITFunction, binder, backend, line)
        self.record_errors: list[str] = []
        self._seen: dict = {}                      # (function, specialization, options) -> variant key
        self.label: str | None = None              # the test the launches being recorded belong to
        self.last_id: int | None = None            # the id of the variant the last recorded launch has

    # -- the launch hook ------------------------------------------------------
    def record(self, fn, args, kwargs, result=None) -> None:
        """Remember one launch of ``fn`` (a JITFunction or InterpretedFunction).

        Called by the worker's launch hook with the launch's positional args and
        its keyword args (``grid`` and ``warmup`` included), after the launch;
        ``result`` is what ``run`` returned (None if it raised). Never raises.
        """
        try:
            if kwargs.get("warmup"):
                return
            if _is_interpreted(fn):
                self._record_interpreted(fn, args, kwargs)
            elif result is not None and hasattr(result, "metadata"):
                self._record_gpu(fn, result)
        except Exception as e:  # noqa: BLE001 - a launch must never fail because of the check
            if len(self.record_errors) < 5:
                self.record_errors.append(f"{type(e).__name__}: {e}"[:300])

    def _binder(self, fn):
        src = _source_fn(fn)
        entry = self._binders.get(src)
        if entry is None:
            from triton.compiler import make_backend
            from triton.runtime import jit

            options = {k: v for k, v in (getattr(fn, "kwargs", None) or {}).items() if v is not None}
            jf = jit.JITFunction(src, **options)
            backend = make_backend(_gpu_target(self.target))
            binder = jit.create_function_from_signature(jf.signature, jf.params, backend)
            entry = self._binders[src] = (jf, binder, backend, _def_line(src))
        return entry

    def _record_interpreted(self, fn, args, kwargs) -> None:
        from triton import knobs

        src = _source_fn(fn)
        kwargs = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
        # What JITFunction.run adds before binding (each where this Triton has it).
        kwargs.setdefault("debug", bool((getattr(fn, "kwargs", None) or {}).get("debug")) or knobs.runtime.debug)
        for name in ("instrumentation_mode", "fpsan_homomorphic_casts"):
            if hasattr(knobs.compilation, name):
                kwargs.setdefault(name, getattr(knobs.compilation, name))
        v = _Variant()
        v.module, v.qualname, v.name = src.__module__, src.__qualname__, src.__name__
        v.file, v.line = src.__code__.co_filename, 0
        v.launches, v.error, v.labels, v.warps, v.stages = 1, None, [], None, None
        v.id = len(self.variants)
        self.last_id = None
        try:
            jf, binder, backend, v.line = self._binder(fn)
            bound, specialization, options = binder(*args, **kwargs)
            # A launch seen before costs only the binder (Triton's own, per launch on a GPU too).
            seen = (src, repr(specialization), repr(sorted(options.items(), key=str)))
            if seen in self._seen:
                old = self.variants[self._seen[seen]]
                old.launches += 1
                old.label(self.label)
                self.last_id = old.id
                return
            options, signature, constexprs, attrs = jf._pack_args(backend, kwargs, bound, specialization, options)
        except Exception as e:  # noqa: BLE001 - what the GPU's launcher would raise too
            v.line = v.line or _def_line(src)
            key = f"{v.file}:{v.line}:{type(e).__name__}:{e}"
            if key in self.variants:
                self.variants[key].launches += 1
                self.variants[key].label(self.label)
                self.last_id = self.variants[key].id
                return
            v.key = v.group = key
            v.label(self.label)
            self.last_id = v.id
            v.signature, v.constexprs, v.attrs, v.options, v.describe, v.details, v.aligned = {}, {}, {}, {}, "", {}, 0
            v.error = _launch_error(e, v)
            self.variants[key] = v
            return
        v.signature, v.attrs = dict(signature), dict(attrs)
        v.constexprs = {k: _portable(val) for k, val in constexprs.items()}
        # The launch's own options: the child's backend parses them for the target it compiles for.
        v.options = {k: val for k, val in kwargs.items() if k not in signature}
        parsed = options.__dict__
        launch_opts = {k: parsed.get(k) for k in ("num_warps", "num_stages", "num_ctas", "maxnreg")
                       if parsed.get(k) is not None}
        v.group = repr((v.file, v.line, v.qualname, sorted(signature.items()), sorted(constexprs.items(), key=str),
                        sorted(options.__dict__.items(), key=str)))
        v.key = v.group + repr(sorted(attrs.items()))
        v.aligned = sum(1 for a in attrs.values() if a)
        v.warps, v.stages = launch_opts.get("num_warps"), launch_opts.get("num_stages")
        declared = {p.name for p in jf.params if p.is_constexpr}
        top = {p[0]: val for p, val in constexprs.items() if len(p) == 1}
        consts = [f"{name}={top[i]!r}" for i, name in enumerate(signature) if name in declared and i in top]
        if launch_opts.get("num_ctas") == 1:
            del launch_opts["num_ctas"]
        v.describe = ", ".join(consts + [f"{k}={val}" for k, val in launch_opts.items()])
        # How the other arguments were specialized: shown where two variants would read alike.
        v.details = {name: (f"{name}={top[i]!r}" if i in top else f"{name}: {ty}")
                     for i, (name, ty) in enumerate(signature.items()) if name not in declared}
        self._seen[seen] = v.key
        old = self.variants.get(v.key)
        if old is not None:
            old.launches += 1
            old.label(self.label)
            self.last_id = old.id
            return
        v.label(self.label)
        self.last_id = v.id
        self.variants[v.key] = v

    def _record_gpu(self, fn, kernel) -> None:
        entry = self.gpu_rows.get(id(kernel))
        if entry is not None:
            entry[0]["launches"] += 1
            return
        src = _source_fn(fn)
        md = kernel.metadata
        regs, spills = getattr(kernel, "n_regs", None), getattr(kernel, "n_spills", None)
        code = getattr(src, "__code__", None)
        row = _row(kernel=getattr(src, "__name__", "?"), file=getattr(code, "co_filename", ""),
                   line=_def_line(src) if src else 0, launches=1, checked=True, ok=True, status="ok",
                   registers=regs, spills=spills, shared_bytes=getattr(md, "shared", None), launchable=True,
                   variant=f"num_warps={getattr(md, 'num_warps', '?')}, num_stages={getattr(md, 'num_stages', '?')}",
                   note="from the launch on this GPU")
        if spills:
            row["warning"] = f"{spills} bytes of registers spilled to local memory"
        self.gpu_rows[id(kernel)] = (row, getattr(src, "__module__", ""), kernel)  # the kernel keeps its id

    def reset(self) -> None:
        """Forget every recorded launch (the compile results of a check are not kept)."""
        self.variants.clear()
        self.gpu_rows.clear()
        self._seen.clear()
        self.last_id = None

    # -- the check ------------------------------------------------------------
    def check(self, target: str | None = None, limits: dict | None = None, budget_s: float = DEFAULT_BUDGET_S,
              jobs: int | None = None, root: str | None = None, cache_dir: str | None = None,
              known: dict | None = None, gpu_only: bool = False) -> list[dict]:
        """Compile every recorded variant for ``target``; one plain-JSON row per variant.

        target     "cuda:<compute capability>", default the one given at construction (sm_90)
        limits     overrides of ``limits_for(target)``
        budget_s   wall-clock budget: variants not compiled by then get ``checked: False``
        jobs       compiler processes at once (default: the usable cores, at most 4)
        root       folder that row "file" paths are relative to (default: the kernel's package)
        cache_dir  optional writable folder to keep results in between runs (keyed by
                   the Triton version, the target, the package's sources and the variant)
        known      results already compiled elsewhere, by that same key (each row's "key")
        gpu_only   compile only the variants some test's GPU shape launches (labelled
                   GPU_LABEL + test: capture.py); the others are counted in one note row

        Row keys: kernel, file, line (of the ``def``), variant (constexprs and launch
        options), launches, checked, ok, status ("ok" | "error": the compiler rejects the
        kernel, as it would on the GPU | "internal": the check itself failed | "skipped"),
        error (the student's file:line, source line and the compiler's message), registers,
        spills, shared_bytes, launchable, why_not, warning (spills), note.
        On a GPU run: the resources of the kernels that really launched. Never raises.
        """
        started = time.monotonic()
        target = target or self.target
        try:
            if self.gpu_rows and not self.variants:
                rows = []
                for row, module, _ in list(self.gpu_rows.values())[:MAX_VARIANTS]:
                    rows.append({**row, "file": _relative(row["file"], root or _package_root(module))})
                return rows
            lim = {**limits_for(target), **(limits or {})}
            return _check(self, target, lim, started + budget_s, jobs, root, cache_dir, known or {}, gpu_only)
        except Exception as e:  # noqa: BLE001 - the worker must get rows, never an exception
            return [_row(kernel="?", ok=False, status="internal", checked=False,
                         error=_clip(f"compile check failed: {type(e).__name__}: {e}\n{traceback.format_exc()}"))]


def _row(**fields) -> dict:
    row = {"kernel": "?", "file": "", "line": 0, "variant": "", "launches": 0, "checked": False, "ok": True,
           "status": "skipped", "error": "", "registers": None, "spills": None, "shared_bytes": None,
           "launchable": None, "why_not": "", "warning": "", "note": "", "tests": [], "cpu_tests": [],
           "ids": [], "num_warps": None, "num_stages": None, "loop": {}, "key": ""}
    row.update(fields)
    return row


def _is_interpreted(fn) -> bool:
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover
        return False
    return isinstance(fn, InterpretedFunction)


def _gpu_target(target: str):
    from triton.backends.compiler import GPUTarget

    backend, cc = target.split(":")
    return GPUTarget(backend, int(cc), 32)


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


def _launch_error(e: Exception, v: _Variant) -> str:
    """The error a launch raises before compiling (bad keyword, unsupported argument type)."""
    return _clip(f"launching {v.name} (defined at {os.path.basename(v.file)}:{v.line}) fails before it compiles:\n"
                 f"{type(e).__name__}: {e}")


# ---------------------------------------------------------------------------
# The check (in the worker): pick variants, run children, build rows
# ---------------------------------------------------------------------------

def _package_root(module: str) -> str | None:
    top = sys.modules.get(module.split(".")[0])
    path = getattr(top, "__path__", None)
    if path:
        return list(path)[0]
    f = getattr(top, "__file__", None)
    return os.path.dirname(f) if f else None


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


def _check(cc: CompileCheck, target: str, lim: dict, deadline: float, jobs, root, cache_dir, known: dict,
           gpu_only: bool) -> list[dict]:
    variants = list(cc.variants.values())
    if not variants:
        return []
    root = root or _package_root(variants[0].module)
    chosen, left_out, cpu_only = _pick(variants, gpu_only)
    rows: list[dict] = []
    todo: list[dict] = []  # jobs for the children
    sources = _sources_digest(root)
    reps = [max(members, key=lambda m: m.aligned) for members in chosen]  # the most aligned: closest to the GPU
    describe = _descriptions(reps)
    for i, members in enumerate(chosen):
        rep = reps[i]
        labels = [lab for m in members for lab in m.labels]
        row = _row(kernel=rep.name, file=_relative(rep.file, root), line=rep.line, variant=_clip(describe[i], 300),
                   launches=sum(m.launches for m in members), ids=[m.id for m in members],
                   tests=list(dict.fromkeys(lab[len(GPU_LABEL):] for lab in labels if lab.startswith(GPU_LABEL))),
                   cpu_tests=list(dict.fromkeys(lab for lab in labels if not lab.startswith(GPU_LABEL))),
                   num_warps=rep.warps, num_stages=rep.stages)
        if len(members) > 1 and not row["tests"]:
            row["note"] = f"{len(members)} specializations of these arguments; compiled the most aligned one"
        rows.append(row)
        if rep.error:
            row.update(checked=True, ok=False, status="error", error=rep.error, launchable=False,
                       why_not="the launch fails before the kernel compiles")
            continue
        job = {"id": i, "module": rep.module, "qualname": rep.qualname, "name": rep.name, "file": rep.file,
               "line": rep.line, "signature": rep.signature, "constexprs": rep.constexprs, "attrs": rep.attrs,
               "options": rep.options, "target": target, "root": root}
        row["key"] = _cache_key(rep, target, sources, root)
        if isinstance(known.get(row["key"]), dict) and known[row["key"]].get("status") in ("ok", "error"):
            _apply(row, {**known[row["key"]], "final": True}, lim)
            continue
        if cache_dir:
            job["cache"] = os.path.join(cache_dir, row["key"] + ".json")
            cached = _read_cached(job["cache"])
            if cached is not None:
                _apply(row, cached, lim)
                row["note"] = (row["note"] + "; " if row["note"] else "") + "from the compile cache"
                continue
        todo.append(job)
    results = _run_children(todo, deadline, jobs) if todo else {}
    for job in todo:
        row = rows[job["id"]]
        res = results.get(job["id"])
        if res is None:
            row.update(checked=False, ok=True, status="skipped",
                       note="; ".join(n for n in ("not compiled: the compile check's time budget ran out",
                                                  row["note"]) if n))
            continue
        _apply(row, res, lim)
        if cache_dir and res.get("final") and res.get("status") in ("ok", "error"):
            _write_cached(job["cache"], res)
    if left_out:
        rows.append(_row(kernel="...", note=f"{left_out} more kernel variants were launched and not compiled "
                                            f"(at most {MAX_VARIANTS} per check)"))
    if cpu_only:
        rows.append(_row(kernel="...", note=f"{cpu_only} more kernel variant(s) ran at the CPU shapes only; not "
                                            "compiled (the GPU shapes launch the variants above instead)"))
    if cc.record_errors:
        rows.append(_row(kernel="?", note=_clip("some launches could not be recorded, so not compiled: "
                                                                   + "; ".join(cc.record_errors), 600)))
    return _fit(rows)


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


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _child_env() -> dict:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the child compiles as a GPU run would
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _child_argv(jobfile: str, outfile: str) -> list[str]:
    spec = globals().get("__spec__")
    if spec is not None and spec.name and spec.name != "__main__":
        return [sys.executable, "-m", spec.name, jobfile, outfile]
    return [sys.executable, os.path.abspath(__file__), jobfile, outfile]


def _run_children(todo: list[dict], deadline: float, jobs) -> dict[int, dict]:
    """Compile ``todo`` in up to ``jobs`` child processes; results by job id.

    A child that dies mid-variant (a compiler crash) costs that variant only:
    the rest of its share goes to a fresh child. At ``deadline`` every child is
    killed and whatever it had finished is kept."""
    n = max(1, min(jobs or min(_cores(), 4), len(todo)))
    shares = [todo[i::n] for i in range(n)]
    results: dict[int, dict] = {}
    work = tempfile.mkdtemp(prefix="compile-check-")
    running = []  # (proc, share, outfile, logfile)
    env = _child_env()
    serial = 0

    def start(share):
        nonlocal serial
        serial += 1
        jobfile = os.path.join(work, f"jobs{serial}.pkl")
        outfile = os.path.join(work, f"out{serial}.jsonl")
        with open(jobfile, "wb") as f:
            pickle.dump(share, f)
        log = open(os.path.join(work, f"log{serial}.txt"), "wb")
        proc = subprocess.Popen(_child_argv(jobfile, outfile), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd=work, start_new_session=True)
        log.close()
        running.append((proc, share, outfile, log.name))

    def collect(share, outfile, logname, rc):
        started, done = [], {}
        with contextlib.suppress(OSError), open(outfile) as f:
            for line in f:
                with contextlib.suppress(ValueError):
                    msg = json.loads(line)
                    if msg.get("event") == "start":
                        started.append(msg["id"])
                    elif msg.get("event") == "result":
                        done[msg["id"]] = {**done.get(msg["id"], {}), **msg}
        results.update(done)
        if rc is None:
            return []
        rest = [j for j in share if j["id"] not in done]
        if rc != 0 and rest:
            # The child died: the variant it was on is the cause; the others get a new child.
            crashed = [i for i in started if i not in done][:1] or [rest[0]["id"]]
            results[crashed[0]] = {"status": "internal", "error": _clip(
                f"compile check failed: the compiler process ended ({_exit_reason(rc)}) while compiling "
                f"this variant\n{_tail(logname)}")}
            rest = [j for j in rest if j["id"] != crashed[0]]
        return rest

    try:
        for share in shares:
            start(share)
        while running:
            time.sleep(0.05)
            for item in list(running):
                proc, share, outfile, logname = item
                rc = proc.poll()
                if rc is None:
                    continue
                running.remove(item)
                rest = collect(share, outfile, logname, rc)
                if rest and time.monotonic() < deadline:
                    start(rest)
            if time.monotonic() >= deadline:
                break
    finally:
        for proc, share, outfile, logname in running:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, 9)
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)
            collect(share, outfile, logname, None)
        with contextlib.suppress(OSError):
            import shutil
            shutil.rmtree(work, ignore_errors=True)
    return results


def _exit_reason(rc: int) -> str:
    if rc < 0:
        import signal
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-rc).name}"
        return f"signal {-rc}"
    return f"exit status {rc}"


def _tail(path: str, n: int = 8) -> str:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        lines = f.read()[-4000:].decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-n:])
    return ""


# ---------------------------------------------------------------------------
# The child: import the submission as a GPU run would and compile
# ---------------------------------------------------------------------------

class _PTXReady(Exception):
    """Raised in place of ptxas to stop triton.compile once the PTX exists."""


def _child_main(jobfile: str, outfile: str) -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    with open(jobfile, "rb") as f:
        share = pickle.load(f)
    out = open(outfile, "a", buffering=1)

    def emit(**msg):
        out.write(json.dumps(msg) + "\n")
        out.flush()

    import triton
    from triton import knobs
    from triton.backends.nvidia import compiler as nv

    original = nv.CUDABackend.make_cubin

    def stop_at_ptx(self, src, metadata, opt, capability):
        raise _PTXReady(self, src, metadata, opt, capability)

    nv.CUDABackend.make_cubin = stop_at_ptx
    ready = []  # (job, backend, ptx, metadata, options, capability)
    for job in share:
        emit(event="start", id=job["id"])
        res = _front_end(job, triton)
        if isinstance(res, tuple):
            ready.append((job, *res))
            shared = res[2].get("shared") if isinstance(res[2], dict) else None
            emit(event="result", id=job["id"], status="ok", shared_bytes=shared,
                 num_warps=getattr(res[3], "num_warps", None), note="", loop=ptx_reader.read(res[1]))
        else:
            emit(event="result", id=job["id"], final=True, **res)
    nv.CUDABackend.make_cubin = original
    knobs.nvidia.dump_ptxas_log = True
    limit = _SHARED.get(int(share[0]["target"].split(":")[1]), _SHARED[90]) if share else 0
    for job, backend, ptx, metadata, opt, capability in ready:
        if (metadata.get("shared") or 0) > limit:
            emit(event="result", id=job["id"], final=True, note="not assembled: it cannot launch anyway")
            continue
        emit(event="start", id=job["id"])
        emit(event="result", id=job["id"], final=True,
             **_assemble(backend, ptx, metadata, opt, capability, original))
    out.close()


def _find_kernel(job):
    """The JITFunction for ``job`` in the freshly imported module (by file and def line)."""
    import importlib

    from triton.runtime.jit import JITFunction

    module = importlib.import_module(job["module"])
    obj = module
    for part in job["qualname"].split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    candidates = [obj] + list(vars(module).values())
    for c in candidates:
        jf = c
        for _ in range(8):
            if isinstance(jf, JITFunction) or not hasattr(jf, "fn"):
                break
            jf = jf.fn
        if isinstance(jf, JITFunction) and jf.fn.__code__.co_filename == job["file"] and \
                jf.fn.__name__ == job["name"] and _def_line(jf.fn) == job["line"]:
            return jf
    return None


def _resolve(value):
    if isinstance(value, tuple):
        return tuple(_resolve(v) for v in value)
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    if type(value).__name__ == "_JitRef":  # the child runs this file as __main__
        jf = _find_kernel({"module": value.module, "qualname": value.qualname, "file": value.file,
                           "name": value.qualname.split(".")[-1], "line": _def_line_of(value)})
        if jf is None:
            raise LookupError(f"the @triton.jit function {value.qualname} passed as a constexpr")
        return jf
    return value


def _def_line_of(ref: _JitRef) -> int:
    try:
        with open(ref.file) as f:
            lines = f.read().splitlines()
    except OSError:
        return ref.line
    for i in range(ref.line - 1, min(len(lines), ref.line + 50)):
        if re.match(r"\s*(async\s+)?def\s", lines[i]):
            return i + 1
    return ref.line


@contextlib.contextmanager
def _captured_fd2():
    """Collect what C++ code writes to stderr (MLIR diagnostics) while compiling."""
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        box = []
        try:
            yield box
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            box.append(tmp.read()[-8000:].decode("utf-8", "replace"))


def _front_end(job: dict, triton):
    """Compile ``job`` up to PTX: (backend, ptx, metadata, options, capability) or a result dict."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    try:
        jf = _find_kernel(job)
        if jf is None:
            return {"status": "skipped", "note": "not compiled: the kernel is not a module-level @triton.jit "
                                                 "function (defined inside a function?)"}
        constexprs = {k: _resolve(v) for k, v in job["constexprs"].items()}
        backend_name, cc = job["target"].split(":")
        target = GPUTarget(backend_name, int(cc), 32)
        src = ASTSource(jf, job["signature"], constexprs, job["attrs"])
    except Exception as e:  # noqa: BLE001
        return {"status": "internal", "error": _clip(f"compile check failed: {type(e).__name__}: {e}")}
    stderr = []
    try:
        with _captured_fd2() as stderr, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            kernel = triton.compile(src, target=target, options=job["options"])
    except _PTXReady as r:
        return r.args
    except OSError as e:
        return {"status": "internal", "error": _clip(f"compile check failed: {type(e).__name__}: {e}")}
    except Exception as e:  # noqa: BLE001 - the compiler rejects the kernel: the GPU run would fail too
        return {"status": "error", "error": _describe(e, job, stderr[0] if stderr else "")}
    # A finished compile (from Triton's cache): resources from the cubin itself.
    return _from_cubin(kernel)


def _from_cubin(kernel) -> dict:
    md = kernel.metadata
    regs = None
    try:
        import triton
        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(kernel.asm["cubin"])
            f.flush()
            text = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, timeout=60).stdout
        m = re.search(r"REG:(\d+)", text)
        regs = int(m.group(1)) if m else None
    except Exception:  # noqa: BLE001
        pass
    text = kernel.asm.get("ptx", "") if hasattr(kernel, "asm") else ""
    return {"status": "ok", "shared_bytes": getattr(md, "shared", None), "registers": regs, "spills": None,
            "num_warps": getattr(md, "num_warps", None), "note": "",
            "loop": ptx_reader.read(text.decode() if isinstance(text, bytes) else text)}


def _assemble(backend, ptx, metadata, opt, capability, make_cubin) -> dict:
    """ptxas on the PTX, as Triton runs it: registers and spills from its log."""
    buf = io.StringIO()
    try:
        with _captured_fd2(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            make_cubin(backend, ptx, metadata, opt, capability)
    except OSError as e:
        return {"status": "internal", "error": _clip(f"compile check failed: ptxas: {type(e).__name__}: {e}")}
    except Exception as e:  # noqa: BLE001 - ptxas rejects the PTX: so would the GPU run
        text = str(e)
        return {"status": "error", "error": _clip("ptxas failed on this kernel:\n" +
                                                  "\n".join(text.splitlines()[:MAX_ERROR_LINES]))}
    log = buf.getvalue()
    regs = re.search(r"Used (\d+) registers", log)
    stores = re.search(r"(\d+) bytes spill stores", log)
    loads = re.search(r"(\d+) bytes spill loads", log)
    spills = None
    if stores or loads:
        spills = max(int(stores.group(1)) if stores else 0, int(loads.group(1)) if loads else 0)
    return {"registers": int(regs.group(1)) if regs else None, "spills": spills}


# -- compile errors in the student's terms -----------------------------------

def _jit_sources(root: str | None) -> dict[str, tuple]:
    """Source text -> (file, def line, name) of every @triton.jit function of the
    submission's modules (those under ``root``)."""
    from triton.runtime.jit import JITFunction

    found = {}
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None) or ""
        if not root or not os.path.abspath(f).startswith(os.path.abspath(root) + os.sep):
            continue
        for obj in list(vars(mod).values()):
            for _ in range(8):
                if isinstance(obj, JITFunction) or not hasattr(obj, "fn"):
                    break
                obj = obj.fn
            if isinstance(obj, JITFunction):
                with contextlib.suppress(Exception):
                    found[obj.src] = (obj.fn.__code__.co_filename, _def_line(obj.fn), obj.fn.__name__)
    return found


def _locate(src: str, sources: dict, root: str | None):
    """(file, def line, name) of the function whose source is ``src``."""
    if src in sources:
        return sources[src]
    first = src.strip().splitlines()[0].strip() if src and src.strip() else ""
    name = re.match(r"def\s+(\w+)", first)
    if not (root and name):
        return None
    for dirpath, _, files in os.walk(root):
        for fname in files:
            if not fname.endswith(".py"):
                continue
            path = os.path.join(dirpath, fname)
            with contextlib.suppress(OSError, UnicodeDecodeError), open(path) as fh:
                for i, line in enumerate(fh.read().splitlines()):
                    if line.strip() == first:
                        return path, i + 1, name.group(1)
    return None


def _describe(exc: BaseException, job: dict, stderr: str) -> str:
    """The compiler's error as the student needs it: the innermost place in the
    submission's files (file, line, source line, caret), the final exception,
    and where that place was called from."""
    from triton.compiler.errors import CompilationError

    root = job.get("root")
    chain, e = [], exc
    while e is not None and all(e is not c for c in chain) and len(chain) < 50:
        chain.append(e)
        e = e.__cause__ or e.__context__
    sources = _jit_sources(root)
    frames = []  # (file, line, name, source line, caret line) from outermost to innermost
    for c in chain:
        if not isinstance(c, CompilationError) or c.src is None or not hasattr(c.node, "lineno"):
            continue
        where = _locate(c.src, sources, root)
        if where is None:
            continue
        file, def_line, name = where
        src_lines = c.src.split("\n")
        text = src_lines[c.node.lineno - 1] if 0 < c.node.lineno <= len(src_lines) else ""
        caret = " " * getattr(c.node, "col_offset", 0) + "^"
        frames.append((file, def_line + c.node.lineno - 1, name, text, caret))
    final = chain[-1]
    if isinstance(final, CompilationError):
        msg = final.error_message or "compilation error"
        kind = type(final).__name__
    else:
        msg, kind = str(final), type(final).__name__
    lines = []
    if frames:
        file, line, name, text, caret = frames[-1]
        indent = len(text) - len(text.lstrip())
        lines += [f'File "{_relative(file, root)}", line {line}, in {name}', "    " + text.strip(),
                  "    " + caret[indent:] if len(caret) > indent else "    ^"]
    else:
        loc = _mlir_location(stderr + "\n" + msg, root)
        if loc:
            lines.append(loc)
    lines += f"{kind}: {msg}".splitlines()
    if not frames and stderr.strip():
        diag = [ln for ln in stderr.splitlines() if "error" in ln.lower()][:3]
        lines += diag
    body = lines[:MAX_ERROR_LINES]
    for file, line, name, _, _ in reversed(frames[:-1]):
        if len(body) >= MAX_ERROR_LINES + 3:
            break
        body.append(f'  called from "{_relative(file, root)}", line {line}, in {name}')
    return _clip("\n".join(body))


def _mlir_location(text: str, root: str | None) -> str | None:
    """'File "w8a8.py", line N' from an MLIR diagnostic that points into the submission."""
    for m in re.finditer(r'([^\s"():]+\.py)"?:(\d+):(\d+)', text):
        path = m.group(1)
        if root and os.path.abspath(path).startswith(os.path.abspath(root) + os.sep):
            line = int(m.group(2))
            src = ""
            with contextlib.suppress(OSError, IndexError), open(path) as f:
                src = f.read().splitlines()[line - 1].strip()
            return f'File "{_relative(path, root)}", line {line}\n    {src}'
    return None


# ---------------------------------------------------------------------------
# Module-level recorder used by the worker
# ---------------------------------------------------------------------------

_DEFAULT = CompileCheck()


def record(fn, args, kwargs, result=None) -> None:
    """The worker's launch hook: see CompileCheck.record."""
    _DEFAULT.record(fn, args, kwargs, result)


def check(target: str = "cuda:90", limits: dict | None = None, budget_s: float = DEFAULT_BUDGET_S,
          jobs: int | None = None, root: str | None = None, cache_dir: str | None = None,
          known: dict | None = None, gpu_only: bool = False) -> list[dict]:
    """Compile what the worker's launches recorded: see CompileCheck.check."""
    return _DEFAULT.check(target, limits, budget_s, jobs, root, cache_dir, known, gpu_only)


def reset() -> None:
    _DEFAULT.reset()


def label(name: str | None) -> None:
    """Name the test the next launches belong to (None: no test)."""
    _DEFAULT.label = name


def last_id() -> int | None:
    """The id of the variant the last recorded launch has (None if it was not recorded)."""
    return _DEFAULT.last_id


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])
