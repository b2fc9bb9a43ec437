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

The check is cut into four files:

    compile.py        the recorder (the worker's launch hook) and the check:
                      which variants are compiled, which results are known or
                      cached, the rows returned
    compile_rows.py   what a row is: the target's limits, picking and describing
                      variants, judging a result, the results cache, the fit
    compile_pool.py   the child processes: shares, crashes, the deadline
    compile_child.py  the child: compiles one share for the target and says
                      what each compile found

This file runs in the untrusted worker and depends on torch and triton only.
Nothing here raises into the caller: failures become a variant's error.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from .compile_pool import _run_children
from .compile_rows import (
    GPU_LABEL,
    MAX_VARIANTS,
    _apply,
    _cache_key,
    _clip,
    _def_line,
    _descriptions,
    _fit,
    _pick,
    _read_cached,
    _relative,
    _row,
    _sources_digest,
    _Variant,
    _write_cached,
    limits_for,
)

DEFAULT_BUDGET_S = 60.0


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
