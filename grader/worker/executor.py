"""The executor: carry out a CPU call's program on the real inputs, in the interpreter.

    python -m _grader_worker.executor CMD_FD REPLY_FD FDS_SOCKET PACKAGE MODULE [OFF]

On the CPU the worker (main.py) calls the submission's wrapper on shape-only
tensors and writes down what it did (shapes.py): allocations, copies, casts and
kernel launches. This process, sandboxed like the worker and started beside it,
holds the arena with the real inputs and carries the program out:

- every step is checked against what a program may hold (the op lists of
  shapes.py, tensors inside the storages the program made, kernels defined in
  the kernel file): the program comes from the untrusted worker;
- each launch's kernel is compiled by the grading Triton for the GPU (its
  front end, gate.py) before the interpreter runs it, so the interpreter never
  runs a kernel body the GPU's compiler refuses (plain Python in a kernel);
- the interpreter runs with the bounds check (movement.py); the result is
  copied into the arena's output slot.

Nothing this process learns goes back to the worker: its replies reach the
harness only, which keeps errors (they may quote values) for the report.
Commands and replies are JSON lines, as for the worker:

    {"op": "map", "arena": A, "handle": {...}}             -> {"ok": true}
    {"op": "execute", "arena": A, "args": [...], "out": spec, "program": P, "choice": k}
                                                           -> {"ok": true, "evidence": {...}} | {"ok": false, ...}
    {"op": "movement", ... as execute}                     -> {"ok": true, "movement": {...}}
    {"op": "release", "arena": A}                          -> {"ok": true}

This file runs in the sandbox. It never imports the kernel file: it builds its
kernels alone from the file's syntax tree (kernels_only.py), so no host code of
the submission runs beside the inputs. It depends on torch, triton and numpy only.
"""

from __future__ import annotations

import base64
import json
import math
import mmap
import os
import socket
import sys
import traceback

import torch

from . import compiled_sites, kernels_only
from . import gate as gate_mod
from .layout import DTYPES, build, view
from .movement import Movement, tensor_range
from .shapes import SHAPE_OPS, STEP_OPS, VIEW_OPS

MAX_ERROR_CHARS = 12000


class ProgramError(ValueError):
    """A program that breaks the rules of what a program may hold (a broken or forged worker)."""


class Storages:
    """sid -> (untyped storage, first byte, bytes): the memory a program's tensors live in.

    Kept across calls: a buffer the wrapper caches between calls is the same memory
    in every call, as it is on a GPU."""

    def __init__(self):
        self.mem: dict[str, tuple] = {}

    def bind_inputs(self, args, specs) -> None:
        for i, (a, spec) in enumerate(zip(args, specs)):
            if "tensor" in spec:
                self._bind_tensor(f"in{i}", a)
            else:
                for k, part in (("crow", a.crow_indices()), ("col", a.col_indices()), ("values", a.values())):
                    self._bind_tensor(f"in{i}.{k}", part)

    def _bind_tensor(self, sid: str, t: torch.Tensor) -> None:
        first, end = tensor_range(t)
        base = t.storage_offset() * t.element_size()
        self.mem[sid] = (t.untyped_storage(), base, max(0, end - first))

    def bind_new(self, sid: str, real: torch.Tensor, ref: dict) -> None:
        if not isinstance(sid, str) or not sid.startswith("s"):
            raise ProgramError(f"bad storage name {sid!r}")   # the inputs' names are the harness's
        size = real.element_size()
        base = real.storage_offset() * size - int(ref["off"]) * size
        self.mem[sid] = (real.untyped_storage(), base, real.untyped_storage().nbytes() - base)

    def tensor(self, ref: dict) -> torch.Tensor:
        try:
            storage, base, nbytes = self.mem[ref["s"]]
            dtype = DTYPES[ref["dtype"]]
            size, stride, off = [int(v) for v in ref["size"]], [int(v) for v in ref["stride"]], int(ref["off"])
        except (KeyError, TypeError, ValueError) as e:
            raise ProgramError(f"a tensor of the program names no memory it made ({e})") from None
        if len(size) != len(stride) or min(size + stride + [off], default=0) < 0:
            raise ProgramError("a tensor of the program has a bad shape")
        isz = torch.empty((), dtype=dtype).element_size()
        start = base + off * isz
        if start % isz:
            raise ProgramError("a tensor of the program is misaligned")
        if all(size):
            last = start + (sum((n - 1) * s for n, s in zip(size, stride)) + 1) * isz
            if off * isz < -base or last > base + nbytes:
                raise ProgramError("a tensor of the program reaches past the memory it was made in")
        t = torch.empty(0, dtype=dtype)
        t.set_(storage, start // isz, size, stride)
        return t


class Replay:
    """One program carried out on the real tensors."""

    def __init__(self, module, storages: Storages, gate: gate_mod.Gate, choice: int):
        self.module, self.storages, self.gate, self.choice = module, storages, gate, choice

    def run(self, steps: list) -> None:
        if not isinstance(steps, list):
            raise ProgramError("a program is a list of steps")
        for step in steps:
            if not isinstance(step, dict):
                raise ProgramError("a step is an object")
            if "op" in step:
                self._op(step)
            elif "launch" in step:
                self._launch(step)
            elif "choice" in step:
                branches = step.get("branches")
                if not isinstance(branches, list) or not branches:
                    raise ProgramError("an autotuned launch without configs")
                self.run(branches[self.choice % len(branches)].get("steps"))
            elif "const" in step:
                self._const(step)
            else:
                raise ProgramError("an unknown step")

    def _const(self, step: dict) -> None:
        data = base64.b64decode(step["data"])
        dtype = DTYPES[step["dtype"]]
        size = [int(v) for v in step["size"]]
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(size) if data else \
            torch.empty(size, dtype=dtype)
        self.storages.bind_new(step["const"], t, {"off": 0})

    def _op(self, step: dict) -> None:
        name, _, overload = str(step["op"]).partition(".")
        if name not in STEP_OPS or name in VIEW_OPS or name in SHAPE_OPS:
            raise ProgramError(f"op {name!r} is not one a wrapper may run")
        packet = getattr(torch.ops.aten, name, None)
        op = getattr(packet, overload or "default", None) if packet is not None else None
        if op is None:
            raise ProgramError(f"no op {step['op']!r}")
        args = self.value(step.get("args", {"list": []}))
        kwargs = {str(k): self.value(v) for k, v in (step.get("kwargs") or {}).items()}
        out = op(*args, **kwargs)
        outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)]
        for o, desc in zip(outs, step.get("out") or []):
            if "new" in desc:
                self.storages.bind_new(desc["new"], o, desc["ref"])

    def _launch(self, step: dict) -> None:
        fn = find_kernel(self.module, step["launch"])
        grid = [int(g) for g in step["grid"]]
        if not 1 <= len(grid) <= 3 or min(grid) < 0:
            raise ProgramError("a bad grid")
        args = {str(k): self.value(v) for k, v in (step.get("args") or {}).items()}
        admitted = self.gate.admit(fn, args)
        # The compiler's compile-time arguments (an int equal to 1, any spelling of a constexpr
        # annotation) reach the interpreter as constants too, not as run-time integers.
        declared = _declared_constexprs(fn)
        for name in admitted.compile_time:
            if name in args and name not in declared and args[name] is not None:
                args[name] = _tl().constexpr(args[name])
        with compiled_sites.launch(admitted.visited):
            fn.run(grid=tuple(grid), warmup=False, **args)

    def value(self, v):
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, dict) and len(v) == 1:
            (kind, x), = v.items()
            if kind == "t":
                return self.storages.tensor(x)
            if kind in ("list", "tuple"):
                items = [self.value(i) for i in x]
                return items if kind == "list" else tuple(items)
            if kind == "float":
                return float(x) if x in ("nan", "inf", "-inf") else math.nan
            if kind == "dtype":
                return DTYPES[x]
            if kind == "device":
                return torch.device("cpu")
            if kind == "memory_format":
                return {"contiguous_format": torch.contiguous_format, "preserve_format": torch.preserve_format,
                        "channels_last": torch.channels_last}[x]
            if kind == "layout":
                return {"strided": torch.strided}[x]
            if kind == "tl_dtype":
                import triton.language as tl
                return tl.dtype(str(x))
            if kind == "jit":
                return find_kernel(self.module, x, helper=True)
            if kind == "descriptor":
                from triton.tools.tensor_descriptor import TensorDescriptor
                return TensorDescriptor(self.storages.tensor(x["base"]), [int(i) for i in x["shape"]],
                                        [int(i) for i in x["strides"]], [int(i) for i in x["block_shape"]],
                                        str(x.get("padding", "zero")))
        raise ProgramError("a value of an unknown kind")


def _tl():
    import triton.language as tl  # the executor imports Triton only once it runs kernels

    return tl


def _declared_constexprs(fn) -> set[str]:
    """The parameters the interpreter itself takes as constexprs (its GridExecutor's rule)."""
    from triton.runtime.jit import _normalize_ty

    return {n for n, ty in getattr(fn.fn, "__annotations__", {}).items() if _normalize_ty(ty) == "constexpr"}


def find_kernel(module, ref: dict, helper: bool = False):
    """The interpreted @triton.jit function of the kernel file that ``ref`` names."""
    from triton.runtime.interpreter import InterpretedFunction

    name, line = str(ref.get("name")), int(ref.get("line", -1))
    seen = []
    for value in vars(module).values():
        for candidate in (value, *(value.values() if isinstance(value, dict) else
                                   value if isinstance(value, (list, tuple)) else ())):
            for _ in range(8):
                if isinstance(candidate, InterpretedFunction) or not hasattr(candidate, "fn"):
                    break
                candidate = candidate.fn
            if isinstance(candidate, InterpretedFunction) and candidate not in seen:
                seen.append(candidate)
    for fn in seen:
        if fn.fn.__name__ != name:
            continue
        lines = {fn.fn.__code__.co_firstlineno}
        try:   # the interpreter's copy (without source it is the original function)
            lines.add(fn.rewrite().__code__.co_firstlineno)
        except Exception as e:  # noqa: BLE001 - the instrumentation failed: the grader's fault, said so
            raise RuntimeError(f"the grader could not prepare {name} (line {line}) for the CPU interpreter "
                               f"({type(e).__name__}: {e}): this is an error of the grader, not of your code; "
                               "please report it with your file") from e
        if line in lines:
            return fn
    where = "a @triton.jit function passed to a kernel" if helper else "a kernel"
    raise ProgramError(f"{where} named {name} (line {line}) is not a module-level @triton.jit function of the "
                       "kernel file: define kernels at the top level of the file (not inside a function)")


def _traceback() -> str:
    text = traceback.format_exc()
    half = MAX_ERROR_CHARS // 2
    return text if len(text) <= MAX_ERROR_CHARS else text[:half] + "\n...\n" + text[-half:]


def _named(args, specs) -> list[tuple[str, int, int]]:
    named = []
    for i, (a, spec) in enumerate(zip(args, specs)):
        if "tensor" in spec:
            named.append((str(i), *tensor_range(a)))
        else:
            parts = (("crow", a.crow_indices()), ("col", a.col_indices()), ("values", a.values()))
            named += [(f"{i}.{name}", *tensor_range(p)) for name, p in parts]
    return named


class Executor:
    def __init__(self, module, fds: socket.socket, package: str, off: set[str]):
        self.module, self.fds, self.off = module, fds, set(off)
        self.arenas: dict = {}
        # One world of memory per autotune config: a buffer kept between calls is written only by the
        # runs of its own config, as when that config is the GPU autotuner's pick from the start.
        self.worlds: dict[int, Storages] = {}
        self.gate = gate_mod.Gate()
        self.failed: dict = {}

    def map(self, msg: dict) -> dict:
        h = msg["handle"]
        self.arenas.pop(msg["arena"], None)
        _, fds, _, _ = socket.recv_fds(self.fds, 1, 1)
        if len(fds) != 1 or h.get("kind") != "fd":
            raise RuntimeError("expected one file descriptor for a CPU arena")
        try:
            self.arenas[msg["arena"]] = torch.frombuffer(mmap.mmap(fds[0], h["nbytes"]), dtype=torch.uint8)
        finally:
            os.close(fds[0])
        return {"ok": True}

    def release(self, msg: dict) -> dict:
        self.arenas.pop(msg["arena"], None)
        return {"ok": True}

    def _carry_out(self, msg: dict, counter_for):
        arena = self.arenas[msg["arena"]]
        args = [build(arena, a) for a in msg["args"]]
        out = view(arena, msg["out"])
        choice = int(msg.get("choice", 0))
        storages = self.worlds.setdefault(choice, Storages())
        storages.bind_inputs(args, msg["args"])
        program = msg["program"]
        counter = counter_for(args, msg["args"])
        deterministic = torch.are_deterministic_algorithms_enabled()
        # Fresh allocations (torch.empty) are NaN: output the kernels never store shows as NaN.
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            if counter is not None:
                counter.install()
            Replay(self.module, storages, self.gate, choice).run(program["steps"])
            y = storages.tensor(program["result"])
        finally:
            torch.use_deterministic_algorithms(deterministic)
            if counter is not None:
                counter.restore()
        if tuple(y.shape) != tuple(out.shape) or y.dtype != out.dtype:
            raise ProgramError("the program's result is not the output the worker described")
        out.copy_(y)
        return counter, y

    def execute(self, msg: dict) -> dict:
        bounds = "bounds check" not in self.off

        def counter_for(args, specs):
            return Movement(_named(args, specs), confine=True, races=True) if bounds else None

        try:
            counter, y = self._carry_out(msg, counter_for)
        except gate_mod.NotCompiled as e:
            return {"ok": False, "kind": "not_compiled", "error": str(e), "evidence": self._evidence(None)}
        except BaseException:  # noqa: BLE001 - one case lost, never the executor
            return {"ok": False, "error": _traceback(), "evidence": self._evidence(None)}
        return {"ok": True, "evidence": self._evidence(counter, y)}

    def movement(self, msg: dict) -> dict:
        if "data movement" in self.off:
            return {"ok": False, "error": "data movement is not counted with this Triton (fence.py)"}
        try:
            counter, y = self._carry_out(msg, lambda args, specs: Movement(_named(args, specs)))
        except BaseException:  # noqa: BLE001
            return {"ok": False, "error": _traceback()}
        # The output is the tensor the wrapper returned (its own allocation here), not the worker's copy.
        return {"ok": True, "movement": counter.report(output=y)}

    def _evidence(self, counter, output=None) -> dict:
        evidence = {}
        if counter is not None:
            evidence["outside"] = counter.outside()
            race = counter.race(output)
            if race:
                evidence["race"] = race
        if self.failed:
            evidence["checks_off"] = dict(self.failed)
        return evidence


def _warm_up() -> str:
    """Start what a first program would start lazily (the CPU thread pool at its first parallel
    op, torch's symbolic machinery, the interpreter, the instrumented interpreter), so that
    the harness's look before the import already holds it: "" or what failed (the harness
    then applies no rule to this process's threads and libraries)."""
    try:
        from .evidence import OpRecorder
        from .main import _warm_kernel  # the worker's own tiny kernel
        with OpRecorder():   # imports what torch's symbolic machinery imports at its first use (numpy.random...)
            torch.ones(1 << 20).add_(1.0)
        cell = torch.zeros(16)
        _warm_kernel[(1,)](cell, 16, BLOCK=16)
        counter = Movement([("0", *tensor_range(cell))], confine=True)
        counter.install()
        try:
            _warm_kernel[(1,)](cell, 16, BLOCK=16)
        finally:
            counter.restore()
        return ""
    except Exception as e:  # noqa: BLE001 - said so: the harness leaves the rule off
        return f"the executor's warm-up failed: {type(e).__name__}: {e}"[:300]


def main(argv: list[str]) -> None:
    cmd_fd, reply_fd, fds_fd, package, module_name = int(argv[0]), int(argv[1]), int(argv[2]), *argv[3:5]
    off = {c for c in (argv[5] if len(argv) > 5 else "").split(",") if c}
    commands = os.fdopen(cmd_fd, "rb")
    replies = os.fdopen(reply_fd, "wb", buffering=0)

    def reply(obj: dict) -> None:
        replies.write((json.dumps(obj) + "\n").encode())

    # As the worker does (main.py): warmed up, it waits while the harness reads its threads and
    # libraries from /proc before the import of the kernel file (grader/harness/osfacts.py).
    warm = _warm_up()
    reply({"ok": True, "started": True, **({"note": warm} if warm else {})})
    if not commands.readline():
        return
    try:
        # The kernels alone: no host code of the submission ever runs beside the inputs, and of
        # them only what the GPU's compiler compiled (compiled_sites.py).
        compiled_sites.install(f"{package}.{module_name}" if package else module_name)
        module = kernels_only.load(package, module_name)
    except BaseException:  # noqa: BLE001 - the worker's import reports the student's error
        reply({"ok": False, "error": _traceback()})
        return
    reply({"ok": True})
    executor = Executor(module, socket.socket(fileno=fds_fd), package, off)
    for line in commands:
        msg = json.loads(line)
        op = msg.get("op")
        try:
            if op not in ("map", "execute", "movement", "release"):
                raise ProgramError(f"unknown command {op!r}")
            reply(getattr(executor, op)(msg))
        except BaseException:  # noqa: BLE001
            reply({"ok": False, "error": _traceback()})


if __name__ == "__main__":
    main(sys.argv[1:])
