"""The compile check's child: import the submission as a GPU run would and compile it.

    python -m <worker package>.compile_child JOBFILE OUTFILE

compile_pool.py starts it with TRITON_INTERPRET unset, so the submission
imports as on a GPU (``@triton.jit`` gives real JITFunctions). JOBFILE is a
pickled list of jobs (one variant each: module, kernel, signature,
constexprs, specialization, launch options, target); for each, OUTFILE gets
one JSON line when it starts and one with its result. Each variant is first
compiled up to PTX by Triton's own compiler (every compile error, the shared
memory it needs; ptx.py reads the PTX), then, while the parent's deadline
lasts, assembled by the bundled ptxas (registers, spills). A compile error is
put in the student's terms: the file, line and source line of the
submission's own code, and where it was called from.

This file runs in the untrusted worker's child process and depends on triton only.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile

from . import ptx as ptx_reader
from .compile_rows import _SHARED, _clip, _def_line, _relative

MAX_ERROR_LINES = 15


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
    if type(value).__name__ == "_JitRef":  # compile.py's, unpickled from the job file
        jf = _find_kernel({"module": value.module, "qualname": value.qualname, "file": value.file,
                           "name": value.qualname.split(".")[-1], "line": _def_line_of(value)})
        if jf is None:
            raise LookupError(f"the @triton.jit function {value.qualname} passed as a constexpr")
        return jf
    return value


def _def_line_of(ref) -> int:
    """The ``def`` line of the function a compile.py ``_JitRef`` names (it holds the first decorator's)."""
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


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])
