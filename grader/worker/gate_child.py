"""The gate's child: Triton's front end for sm_90 on each variant it is sent (gate.py).

    python -m <worker package>.gate_child

Reads length-prefixed pickled jobs (compile.py's, one variant each) on stdin and
answers each with one JSON line: {"status": "ok", "visited": [...]} once the
kernel is Triton IR (what the code generator visited: compiled_sites.py), or
{"status": "error", "error": "..."} with the compiler's message in the
student's terms. Runs with TRITON_INTERPRET unset: the kernel file imports as
on a GPU. Nothing past the IR is built here (compile_child.py does that).

This file runs in the sandboxed executor's child and depends on triton only.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import struct
import sys

from . import compiled_sites, kernels_only
from .compile_child import _captured_fd2, _describe, _find_kernel, _resolve
from .compile_rows import _clip


class _IRReady(Exception):
    """Raised in place of the stage after Triton IR: the front end accepted the kernel."""


def _front_end(job: dict, triton) -> dict:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    try:
        jf = _find_kernel(job)
        if jf is None:
            return {"status": "error", "error": f"{job['name']} is not a module-level @triton.jit function: "
                                                "define kernels at the top level of the file"}
        constexprs = {k: _resolve(v) for k, v in job["constexprs"].items()}
        backend_name, cc = job["target"].split(":")
        src = ASTSource(jf, job["signature"], constexprs, job["attrs"])
        target = GPUTarget(backend_name, int(cc), 32)
    except Exception as e:  # noqa: BLE001
        return {"status": "error", "error": _clip(f"the kernel could not be set up for compiling: "
                                                  f"{type(e).__name__}: {e}")}
    stderr, visited = [], set()
    try:
        with _captured_fd2() as stderr, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()), compiled_sites.record(visited):
            triton.compile(src, target=target, options=job["options"])
    except _IRReady:
        return {"status": "ok", "visited": sorted(visited, key=repr)}
    except Exception as e:  # noqa: BLE001 - the compiler refuses the kernel: so would the GPU
        return {"status": "error", "error": _describe(e, job, stderr[0] if stderr else "")}
    return {"status": "error", "error": "the compiler's front end was not run (the grader's gate)"}


def main() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    replies = os.fdopen(int(sys.argv[1]), "w")
    import triton
    from triton.backends.nvidia import compiler as nv

    def stop(*_args, **_kwargs):
        raise _IRReady()

    nv.CUDABackend.make_ttgir = staticmethod(stop)
    triton.knobs.compilation.always_compile = True   # a cached kernel would skip the front end and its record
    source, loaded = sys.stdin.buffer, set()
    while True:
        head = source.read(4)
        if len(head) < 4:
            return
        job = pickle.loads(source.read(struct.unpack("<I", head)[0]))
        if job["module"] not in loaded:   # the kernels alone, as the executor has them (kernels_only.py)
            package, _, name = job["module"].rpartition(".")
            try:
                kernels_only.load(package, name)
            except Exception as e:  # noqa: BLE001 - said in the verdict
                replies.write(json.dumps({"status": "error", "error": f"the kernel file's kernels could not be "
                                          f"loaded: {type(e).__name__}: {e}"}) + "\n")
                replies.flush()
                continue
            loaded.add(job["module"])
        replies.write(json.dumps(_front_end(job, triton)) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
