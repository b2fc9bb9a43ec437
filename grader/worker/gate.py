"""The executor's gate: a launch runs in the interpreter only if the GPU's compiler accepts its kernel.

In the interpreter a kernel body is plain Python: code that Triton's compiler
refuses (a call of a function that is not ``@triton.jit``, Python on a
tensor's values) would run there with the real inputs at hand. Before the
executor runs a launch, its variant (the kernel, its argument types and
specializations, its constexprs: compile.py's record) is put through Triton's
front end for sm_90 in a child process that imports the kernel file as a GPU
run does (TRITON_INTERPRET unset): ``ast_to_ttir``, where the compiler turns
the kernel's Python into Triton IR and refuses what it cannot. A launch whose
variant the front end refuses raises ``NotCompiled`` with the compiler's
message in the student's terms; an admitted one says what the compiler
visited and which arguments it took as compile-time values, so that the
interpreter runs the launch as it was compiled (compiled_sites.py); the whole compile (PTX, ptxas, resources) is
compile.py's, later, as before. One child serves every launch of the
executor; verdicts are kept per variant. The child builds the kernel file's
kernels alone (kernels_only.py), as the executor does: no host code of the
submission runs there either, and its replies come on a pipe of their own.

This file runs in the sandboxed executor; it depends on triton only.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import struct
import subprocess
import sys
import time
from typing import NamedTuple

from . import compiled_sites
from .compile import CompileCheck
from .compile_rows import _clip

TARGET = "cuda:90"
BUDGET_S = 120.0   # one variant's front end; a kernel that takes longer is refused, and says why


class NotCompiled(RuntimeError):
    """The GPU's compiler refuses the kernel a launch names: the interpreter does not run it."""


class Admitted(NamedTuple):
    """What the interpreter may run of an admitted launch (compiled_sites.py)."""
    visited: frozenset        # the nodes the compiler's code generator visited for its variant
    compile_time: tuple       # the arguments the compiler took as compile-time values


class Gate:
    def __init__(self, target: str = TARGET):
        self.check = CompileCheck(target)
        # variant group -> (None, what the compiler visited) if accepted, (the error, None) if not
        self.verdicts: dict[str, tuple[str | None, frozenset | None]] = {}
        self.child: subprocess.Popen | None = None
        self.replies = -1   # the read end of the child's reply pipe

    def admit(self, fn, kwargs: dict) -> Admitted:
        """What the interpreter may run of ``fn`` launched with ``kwargs``, if that compiles for the
        target; raise NotCompiled if not."""
        self.check.record(fn, (), dict(kwargs))
        variant = next((v for v in self.check.variants.values() if v.id == self.check.last_id), None)
        if variant is None:
            raise NotCompiled(f"the launch of {getattr(fn, '__name__', '?')} could not be compiled for the GPU: "
                              + "; ".join(self.check.record_errors[-1:]))
        if variant.error:
            raise NotCompiled(variant.error)
        if variant.group not in self.verdicts:
            self.verdicts[variant.group] = self._front_end(variant)
        error, visited = self.verdicts[variant.group]
        if error:
            raise NotCompiled(f"{variant.name} does not compile for the GPU (sm_90), so it is not run:\n{error}")
        top = {path[0] for path in variant.constexprs if isinstance(path, tuple) and len(path) == 1}
        return Admitted(visited, tuple(name for i, name in enumerate(variant.signature) if i in top))

    def _front_end(self, v) -> tuple[str | None, frozenset | None]:
        job = {"id": v.id, "module": v.module, "qualname": v.qualname, "name": v.name, "file": v.file,
               "line": v.line, "signature": v.signature, "constexprs": v.constexprs, "attrs": v.attrs,
               "options": v.options, "target": self.check.target, "root": _root(v.module)}
        try:
            result = self._ask(job)
        except (OSError, EOFError, ValueError, TimeoutError) as e:
            self._stop()
            return f"the grader could not compile it ({type(e).__name__}: {e})", None
        if result.get("status") == "ok":
            return None, frozenset(compiled_sites.frozen(v) for v in result.get("visited", []))
        return result.get("error") or "the compiler refused it", None

    def _ask(self, job: dict) -> dict:
        if self.child is None or self.child.poll() is not None:
            env = dict(os.environ)
            env.pop("TRITON_INTERPRET", None)
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
            # Replies come on a pipe of their own: nothing the child prints can pass for one.
            self.replies, write_end = os.pipe()
            try:
                self.child = subprocess.Popen([sys.executable, "-m", __package__ + ".gate_child", str(write_end)],
                                              env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL, pass_fds=(write_end,))
            finally:
                os.close(write_end)
        data = pickle.dumps(job)
        self.child.stdin.write(struct.pack("<I", len(data)) + data)
        self.child.stdin.flush()
        deadline = time.monotonic() + BUDGET_S
        fd = self.replies
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"its front end took more than {BUDGET_S:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise EOFError("the compiler's process ended")
                line += chunk
        return json.loads(line)

    def _stop(self) -> None:
        if self.child is not None:
            self.child.kill()
            self.child.wait()
            self.child = None
            os.close(self.replies)


def _root(module: str) -> str | None:
    top = sys.modules.get(module.split(".")[0])
    path = getattr(top, "__path__", None)
    return list(path)[0] if path else None


def clip(text: str) -> str:
    return _clip(text)
