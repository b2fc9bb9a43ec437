"""The worker: import one kernel file of the submission and call it, nothing else.

    python -m _grader_worker.main CMD_FD REPLY_FD FDS_SOCKET PACKAGE MODULE ENTRY

It runs inside the sandbox, next to the submission, so nothing it says is
believed: the harness owns the inputs (in a shared arena), reads the outputs
out of that arena itself, checks them against its own references, and keeps
the clock. Commands arrive as JSON lines on CMD_FD; each gets one JSON line
back on REPLY_FD:

    {"op": "map", "arena": A, "handle": {...}}              -> {"ok": true}
                 (a GPU arena: its memory's descriptor arrives on FDS_SOCKET)
    {"op": "call", "arena": A, "args": [...], "out": spec}  -> {"ok": true, "evidence": {...}}
                                                               | {"ok": false, "error": "...", "returned": "..."}
    {"op": "prepare", "arena": A, "calls": [{"args", "out"}, ...]}
                                                            -> {"ok": true, "graph": bool, "note": "..."}
    {"op": "run"}                                           -> {"ok": true}   (after the device is idle)
    {"op": "compile", "budget_s": s, "cache_dir": path, "known": {key: result}, "gpu_only": bool}
                                                            -> {"ok": true, "compile": [row, ...]}
    {"op": "movement", "arena": A, "args": [...], "out": spec} -> {"ok": true, "movement": {...}}
    {"op": "capture", "cases": [{"test", "args", "probe"}], "names": [...], "budget_s": s}
                                                            -> {"ok": true, "capture": {"cases": {...}}}

``call`` is a correctness call: the kernel's result is copied into ``out``.
In the CPU interpreter its loads and stores are also bounds-checked
(movement.py, ``confine``): a lane outside every tensor the call knows is
masked off and counted, and the evidence says how many bytes.
``prepare`` warms a timed batch up and captures it in a CUDA graph when the
submission allows it (``run`` then replays it; otherwise it calls eagerly).
``movement`` (CPU interpreter only) is a call whose loads, stores and dots
are counted (movement.py); the counts are feedback, never a score.
``capture`` (CPU interpreter only) calls the kernel at each case's GPU shape
on uninitialised inputs with the launches intercepted (capture.py): they are
recorded for the compile check under ``gpu:<test>``, and for a case with
``probe`` a few programs of each are run and counted (feedback for the speed
estimate, never a score).
The evidence (Triton launches, PyTorch ops) can only cost the submission
points: docs/integrity.md.
"""

from __future__ import annotations

import importlib
import json
import mmap
import os
import socket
import sys
import time
import traceback
import warnings

import numpy as np
import torch

from . import capture as capture_mode
from . import compile as compile_check
from . import vmm
from .evidence import LaunchRecorder, OpRecorder
from .graphs import capture
from .layout import build, view
from .movement import Movement, tensor_range

MAX_ERROR_CHARS = 12000  # the harness looks for the submission's frame in it


def _traceback() -> str:
    """The current traceback, its head and tail kept if it is long (the root cause comes first)."""
    text = traceback.format_exc()
    half = MAX_ERROR_CHARS // 2
    return text if len(text) <= MAX_ERROR_CHARS else text[:half] + "\n...\n" + text[-half:]


class Worker:
    def __init__(self, fn, launches: LaunchRecorder, device: str, fds: socket.socket, files: set[str] = frozenset()):
        self.fn, self.launches, self.device, self.fds = fn, launches, device, fds
        self.files = set(files)   # the kernel file: where a load's line is looked up
        self.arenas: dict = {}
        self.batch = None  # (calls, graph or None)

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def map(self, msg: dict) -> dict:
        h = msg["handle"]
        self.arenas.pop(msg["arena"], None)   # a reused name: the old mapping goes first
        if h["kind"] == "fd":   # CPU: shared memory whose descriptor arrives on the socket
            _, fds, _, _ = socket.recv_fds(self.fds, 1, 1)
            if len(fds) != 1:
                raise RuntimeError("expected one file descriptor for an arena")
            try:
                buf = torch.frombuffer(mmap.mmap(fds[0], h["nbytes"]), dtype=torch.uint8)
            finally:
                os.close(fds[0])
        else:
            buf = vmm.receive(self.fds, h["nbytes"])
        self.arenas[msg["arena"]] = buf
        return {"ok": True}

    def _call(self, arena, call: dict):
        args = [build(arena, a) for a in call["args"]]
        out = view(arena, call["out"])
        return args, out

    def call(self, msg: dict) -> dict:
        args, out = self._call(self.arenas[msg["arena"]], msg)
        self.launches.reset()
        ops = OpRecorder()
        bounds = self._bounds(args, msg["args"])
        # Deterministic mode fills fresh allocations (torch.empty) with NaN, so
        # output the kernel never stores shows up as NaN, not as stale memory.
        deterministic = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True, warn_only=True)
        compile_check.label(msg.get("label"))
        try:
            with ops:
                y = self.fn(*args)
            self.sync()
        except BaseException:  # sys.exit() in one case loses that case only
            return {"ok": False, "error": _traceback(),
                    "evidence": self._evidence(ops, args, out, bounds)}
        finally:
            compile_check.label(None)
            torch.use_deterministic_algorithms(deterministic)
            if bounds is not None:
                bounds.restore()
        problem = _unusable(y, out)
        if problem:
            return {"ok": False, "returned": problem, "evidence": self._evidence(ops, args, out, bounds)}
        out.copy_(y)
        self.sync()
        return {"ok": True, "evidence": self._evidence(ops, args, out, bounds)}

    def _bounds(self, args, specs):
        """The interpreter's bounds check for one call (CPU), installed; None on a GPU
        or where this Triton's interpreter cannot be instrumented."""
        if self.device != "cpu":
            return None
        bounds = Movement(_named(args, specs), confine=True)
        try:
            bounds.install()
        except Exception:  # noqa: BLE001 - a Triton whose interpreter differs: no bounds check
            bounds.restore()
            return None
        return bounds

    def _evidence(self, ops: OpRecorder, args, out, bounds=None) -> dict:
        sizes = [a.numel() for a in args if isinstance(a, torch.Tensor) and a.layout == torch.strided]
        limit = 2 * max(sizes + [out.numel()])
        evidence = {"own_launches": self.launches.own(), "foreign_launches": self.launches.foreign()[:10],
                    "library_matmuls": ops.library_matmuls()[:10], "oversized_ops": ops.oversized(limit)[:10],
                    "torch_elements": ops.computed}
        if bounds is not None:
            evidence["outside"] = bounds.outside()
        return evidence

    def movement(self, msg: dict) -> dict:
        """One call with its data movement counted (in the interpreter only)."""
        if self.device != "cpu":
            return {"ok": False, "error": "data movement is counted in the Triton interpreter only"}
        arena = self.arenas[msg["arena"]]
        args, out = self._call(arena, msg)
        counter = Movement(_named(args, msg["args"]))
        try:
            counter.install()
        except Exception as e:  # a Triton whose interpreter differs: no counts, said so
            counter.restore()
            return {"ok": False, "error": f"the interpreter could not be instrumented: {type(e).__name__}: {e}"}
        try:
            y = self.fn(*args)
        except BaseException:
            return {"ok": False, "error": _traceback()}
        finally:
            counter.restore()
        problem = _unusable(y, out)
        if problem:
            return {"ok": False, "returned": problem}
        out.copy_(y)
        return {"ok": True, "movement": counter.report(output=y)}

    def prepare(self, msg: dict) -> dict:
        arena = self.arenas[msg["arena"]]
        calls = [self._call(arena, c) for c in msg["calls"]]

        def batch():
            for args, out in calls:
                out.copy_(self.fn(*args))

        # The timed calls are recorded like the checked ones: a kernel that
        # behaves differently while timed or captured shows it here.
        self.launches.reset()
        ops = OpRecorder()
        with ops:
            batch()  # compiles every variant the batch needs
        self.sync()
        graph, note = None, ""
        try:
            graph = capture(batch, recorder=ops)
        except Exception as e:  # e.g. a host synchronisation inside the call
            graph, note = None, f"{type(e).__name__}: {e}"[:500]
            self.sync()
        self.batch = (batch, graph)
        args, out = calls[0]
        return {"ok": True, "graph": graph is not None, "note": note,
                "evidence": self._evidence(ops, args, out)}

    def compile(self, msg: dict) -> dict:
        """Compile every kernel variant launched so far for the course's GPU (in the
        interpreter), or report the real launches' resources (on a GPU)."""
        rows = compile_check.check(target=msg.get("target", "cuda:90"), budget_s=msg.get("budget_s", 60),
                                   cache_dir=msg.get("cache_dir"), known=msg.get("known"),
                                   gpu_only=bool(msg.get("gpu_only")))
        return {"ok": True, "compile": rows}

    def capture(self, msg: dict) -> dict:
        """What the kernel launches at each case's GPU shape (see the module docstring)."""
        if self.device != "cpu":
            return {"ok": False, "error": "launches are captured in the CPU interpreter only"}
        deadline = time.monotonic() + float(msg.get("budget_s", 60))
        out = {}
        for case in msg["cases"]:
            out[case["test"]] = self._capture_case(case, msg["names"], deadline)
        return {"ok": True, "capture": {"cases": out}}

    def _capture_case(self, case: dict, names: list, deadline: float) -> dict:
        try:
            args = [capture_mode.build(d) for d in case["args"]]
        except Exception as e:  # noqa: BLE001 - e.g. no memory for a full-size input
            return {"error": f"the inputs could not be built: {type(e).__name__}: {e}"[:500]}
        cap = capture_mode.Capture(probe=bool(case.get("probe")), files=self.files,
                                   budget_s=max(0.0, deadline - time.monotonic()))
        recorder = self.launches.on_launch

        def on_launch(fn, a, kw, result):
            compile_check.record(fn, a, kw, result)
            if cap.launches and "variant" not in cap.launches[-1]:
                cap.launches[-1]["variant"] = compile_check.last_id()

        self.launches.on_launch = on_launch
        compile_check.label(compile_check.GPU_LABEL + case["test"])
        y = None
        try:
            with cap, warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")   # arithmetic on uninitialised memory
                y = self.fn(*args)
        except BaseException:  # the wrapper fails at this shape: what it would do on the GPU too
            return {"error": _traceback()[-3000:], **cap.report(capture_mode.named_ranges(args, names))}
        finally:
            compile_check.label(None)
            self.launches.on_launch = recorder
        return cap.report(capture_mode.named_ranges(args, names), y)

    def run(self, msg: dict) -> dict:
        batch, graph = self.batch
        if graph is not None:
            graph.replay()
        else:
            batch()
        self.sync()
        return {"ok": True}


def _named(args, specs) -> list[tuple[str, int, int]]:
    """(key, first byte, past the last byte) of a call's input tensors: "0", "1",
    ... by argument, a BSR argument's parts as "<i>.crow", "<i>.col", "<i>.values"."""
    named = []
    for i, (a, spec) in enumerate(zip(args, specs)):
        if "tensor" in spec:
            named.append((str(i), *tensor_range(a)))
        else:
            parts = (("crow", a.crow_indices()), ("col", a.col_indices()), ("values", a.values()))
            named += [(f"{i}.{name}", *tensor_range(p)) for name, p in parts]
    return named


def _unusable(y, out: torch.Tensor) -> str | None:
    """Why ``y`` cannot be the output, in words, or None."""
    if not isinstance(y, torch.Tensor):
        return f"returned {type(y).__name__}, expected a torch.Tensor"
    if y.layout != torch.strided:
        return f"returned a {y.layout} tensor, expected a dense (strided) tensor"
    if y.dtype != out.dtype:
        return f"output dtype is {y.dtype}, expected {out.dtype}"
    if tuple(y.shape) != tuple(out.shape):
        return f"output shape is {tuple(y.shape)}, expected {tuple(out.shape)}"
    if y.device != out.device:
        return f"output is on {y.device}, expected {out.device}"
    return None


def main(argv: list[str]) -> None:
    cmd_fd, reply_fd, fds_fd, package, module_name, entry = int(argv[0]), int(argv[1]), int(argv[2]), *argv[3:6]
    commands = os.fdopen(cmd_fd, "rb")
    replies = os.fdopen(reply_fd, "wb", buffering=0)

    def reply(obj: dict) -> None:
        replies.write((json.dumps(obj) + "\n").encode())

    launches = LaunchRecorder(own_prefix=package + ".", on_launch=compile_check.record)
    launches.install()
    try:
        module = importlib.import_module(f"{package}.{module_name}")
        fn = getattr(module, entry)
    except BaseException:
        reply({"ok": False, "error": _traceback()})
        return
    reply({"ok": True})
    device = "cuda" if os.environ.get("TRITON_INTERPRET", "0") in ("", "0") else "cpu"
    worker = Worker(fn, launches, device, socket.socket(fileno=fds_fd),
                    files={f for f in (getattr(module, "__file__", "") or "",) for f in (f, os.path.realpath(f)) if f})
    for line in commands:
        msg = json.loads(line)
        try:
            reply(getattr(worker, msg["op"])(msg))
        except BaseException:
            reply({"ok": False, "error": _traceback()})


if __name__ == "__main__":
    main(sys.argv[1:])
