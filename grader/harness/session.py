"""One worker process for one task: start it in the sandbox, talk to it, end it.

The harness writes commands (trusted JSON) and reads one reply line per
command. A reply is the only thing the worker can say, so it is read with a
deadline and a size cap, parsed defensively and checked against a schema:
a reply that breaks the rules ends the session as a crash of the worker,
never as an exception in the grader.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from .. import toolchain
from ..submission import Submission, stage
from . import osfacts, sandbox

LOG_TAIL_BYTES = 16 * 1024
MAX_REPLY_BYTES = 4 << 20   # a CPU call's program (worker/shapes.py) carries its constants
PASS_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
            "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH", "NVIDIA_VISIBLE_DEVICES", "LANG", "LC_ALL",
            # a batch grading several students at once limits each one's thread pools
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# The fields a reply may have, and their types; anything else is a broken reply.
REPLY_SCHEMA = {"ok": bool, "error": str, "returned": str, "graph": bool, "note": str, "evidence": dict,
                "compile": list, "movement": dict, "checks_off": dict, "capture": dict, "program": dict,
                "started": bool, "kind": str}
# The harness's own check of the worker's threads, libraries and processes (osfacts.py): its
# name in the reports' "checks off" lines (grader/worker/fence.py's CHECKS describes it).
FACTS_CHECK = "threads and libraries"
# One row of the compile check (grader/worker/compile.py), as the report uses it.
COMPILE_ROW = {"kernel": str, "file": str, "line": int, "status": str, "error": str, "registers": int,
               "spills": int, "shared_bytes": int, "launchable": bool, "why_not": str, "warning": str,
               "note": str, "launches": int, "variant": str, "tests": list, "cpu_tests": list, "ids": list,
               "num_warps": int, "num_stages": int, "loop": dict, "key": str, "ok": bool, "checked": bool}
# What grader/worker/ptx.py read in a variant's PTX ("loop"): counts, counts by name
# ({"2": 80} loads of 2 bytes), and the heaviest instruction kinds ([[kind, slots], ...]).
COMPILE_LOOP_KEYS = ("instructions", "serial", "mma", "wgmma", "loads", "async_loads", "load_chain", "loops",
                     "kernel_instructions", "kernel_serial", "load_bytes", "async_bytes", "tma", "staged",
                     "shared_stores", "shared_loads", "wavefronts", "kernel_wavefronts", "lanes_known")
COMPILE_LOOP_MAPS = ("load_widths", "async_widths", "store_widths", "serial_kinds", "narrow_loads")
MAX_LOOP_NAMES = 8
MAX_COMPILE_ROWS = 30
EVIDENCE_SCHEMA = {"own_launches": int, "foreign_launches": list, "library_matmuls": list,
                   "oversized_ops": list, "torch_elements": int, "torch_sites": list}
# Evidence only some calls have: absent means "not measured", never zero.
OPTIONAL_EVIDENCE = {"host_reads": int}
TRACE_SCHEMA = {"own": int, "copies": int, "torch_ops": list, "foreign": list}   # worker/trace.py
MAX_TEXT = 12000
# The data-movement counts (grader/worker/movement.py): feedback the worker
# reports about itself. Every count is an int in [0, MAX_COUNT].
MOVEMENT_COUNTS = ("flops", "programs", "launch_count")
MOVEMENT_ROW = {"kernel": str, "grid": list, "programs": int, "loaded": int, "stored": int, "flops": int}
MAX_MOVEMENT_ROWS = 20
MAX_MOVEMENT_TENSORS = 16
MAX_COUNT = 10 ** 18


class WorkerGone(Exception):
    """The worker died, hung past its deadline, or broke the reply protocol.

    ``kind`` says which, as data (the reports and the class CSV read it):
    timeout, crashed, exited_early, worker_ended (the sandbox ended it: a
    limit), protocol_error (a reply that breaks the rules, or none read)."""

    def __init__(self, reason: str, kind: str = "protocol_error"):
        super().__init__(reason)
        self.kind = kind


class _TailReader(threading.Thread):
    """Drains the worker's stdout/stderr, keeping only the last LOG_TAIL_BYTES."""

    def __init__(self, pipe):
        super().__init__(daemon=True)
        self.pipe, self.tail = pipe, deque()

    def run(self):
        size = 0
        for chunk in iter(lambda: self.pipe.read(65536), b""):
            self.tail.append(chunk)
            size += len(chunk)
            while size - len(self.tail[0]) >= LOG_TAIL_BYTES:
                size -= len(self.tail.popleft())

    def text(self) -> str:
        return b"".join(self.tail)[-LOG_TAIL_BYTES:].decode("utf-8", "replace")


def _outside(value) -> dict:
    """The interpreter's bounds check of one call (worker/movement.py ``outside``): bytes
    loaded and stored outside their tensor, the first kernel, and the key of that tensor."""
    if not isinstance(value, dict) or not isinstance(value.get("kernel", ""), str) \
            or not isinstance(value.get("tensor", ""), str):
        raise WorkerGone("the worker sent malformed evidence (field 'outside')")
    out = {"kernel": value.get("kernel", "")[:200], "tensor": value.get("tensor", "")[:40]}
    for key in ("loads", "stores"):
        n = value.get(key, 0)
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_COUNT:
            raise WorkerGone("the worker sent malformed evidence (field 'outside')")
        out[key] = n
    return out


def _race(value) -> dict:
    """The interpreter's race record of one call (worker/races.py): the kernel, the tensor
    ("out", "scratch", or "" for "too many"), the kind ("store", "load", or "too many": more
    bytes touched than the record holds), two programs' grid coordinates and the byte offset."""
    bad = WorkerGone("the worker sent malformed evidence (field 'race')")
    if not isinstance(value, dict) or not isinstance(value.get("kernel"), str) \
            or value.get("tensor") not in ("out", "scratch", "") \
            or value.get("kind") not in ("store", "load", "too many"):
        raise bad
    out = {"kernel": value["kernel"][:200], "tensor": value["tensor"], "kind": value["kind"]}
    byte = value.get("byte")
    if not isinstance(byte, int) or isinstance(byte, bool) or not 0 <= byte <= MAX_COUNT:
        raise bad
    out["byte"] = byte
    for key in ("program", "other"):
        v = value.get(key)
        if not isinstance(v, list) or len(v) not in (0, 3) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= MAX_COUNT for i in v):
            raise bad
        out[key] = list(v)
    return out


def _checks_off(value) -> dict:
    """{check: why} from the worker (fence.py's check names), type-checked and capped."""
    if not isinstance(value, dict) or len(value) > 10 or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise WorkerGone("the worker sent malformed data (field 'checks_off')")
    return {k[:40]: v[:400] for k, v in value.items()}


def _trace(value) -> dict:
    """The kernel trace of one call (worker/trace.py ``classify``), type- and range-checked."""
    if not isinstance(value, dict):
        raise WorkerGone("the worker sent malformed evidence (field 'trace')")
    out = {}
    for key, kind in TRACE_SCHEMA.items():
        v = value.get(key, kind())
        if not isinstance(v, kind) or isinstance(v, bool) or (kind is int and not 0 <= v <= MAX_COUNT):
            raise WorkerGone("the worker sent malformed evidence (field 'trace')")
        out[key] = [str(x)[:200] for x in v[:10]] if kind is list else v
    return out


def _validate(reply) -> dict:
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise WorkerGone("the worker sent a malformed reply")
    clean = {}
    for key, value in reply.items():
        kind = REPLY_SCHEMA.get(key)
        if kind is None or not isinstance(value, kind):
            raise WorkerGone(f"the worker sent a malformed reply (field {key!r})")
        clean[key] = value[:MAX_TEXT] if isinstance(value, str) else value
    if "evidence" in clean:
        ev = {}
        for key, kind in EVIDENCE_SCHEMA.items():
            value = clean["evidence"].get(key, kind())
            if not isinstance(value, kind) or isinstance(value, bool):
                raise WorkerGone(f"the worker sent malformed evidence (field {key!r})")
            ev[key] = [str(v)[:200] for v in value[:10]] if isinstance(value, list) else value
        for key, kind in OPTIONAL_EVIDENCE.items():
            if key in clean["evidence"]:
                value = clean["evidence"][key]
                if not isinstance(value, kind) or isinstance(value, bool) or not 0 <= value <= MAX_COUNT:
                    raise WorkerGone(f"the worker sent malformed evidence (field {key!r})")
                ev[key] = value
        if "outside" in clean["evidence"]:
            ev["outside"] = _outside(clean["evidence"]["outside"])
        if "race" in clean["evidence"]:
            ev["race"] = _race(clean["evidence"]["race"])
        if "trace" in clean["evidence"]:
            ev["trace"] = _trace(clean["evidence"]["trace"])
        if "checks_off" in clean["evidence"]:
            ev["checks_off"] = _checks_off(clean["evidence"]["checks_off"])
        clean["evidence"] = ev
    if "checks_off" in clean:
        clean["checks_off"] = _checks_off(clean["checks_off"])
    if "compile" in clean:
        clean["compile"] = [_compile_row(r) for r in clean["compile"][:MAX_COMPILE_ROWS]]
    if "movement" in clean:
        clean["movement"] = _movement(clean["movement"])
    if "capture" in clean:
        clean["capture"] = clean_capture(clean["capture"])
    return clean


def _count(value, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_COUNT:
        raise WorkerGone(f"the worker sent malformed data movement ({what})")
    return value


def _movement(m: dict) -> dict:
    """The data-movement counts, type- and range-checked, capped; other fields dropped."""
    out = {key: _count(m.get(key, 0), key) for key in MOVEMENT_COUNTS}
    tensors = m.get("tensors", {})
    if not isinstance(tensors, dict) or len(tensors) > MAX_MOVEMENT_TENSORS:
        raise WorkerGone("the worker sent malformed data movement (tensors)")
    out["tensors"] = {}
    for key, value in tensors.items():
        if not isinstance(value, list) or len(value) != 2 or len(key) > 40:
            raise WorkerGone("the worker sent malformed data movement (tensors)")
        out["tensors"][key] = [_count(v, "tensors") for v in value]
    rows = m.get("launches", [])
    if not isinstance(rows, list):
        raise WorkerGone("the worker sent malformed data movement (launches)")
    out["launches"] = []
    for row in rows[:MAX_MOVEMENT_ROWS]:
        if not isinstance(row, dict):
            raise WorkerGone("the worker sent malformed data movement (launches)")
        clean = {}
        for key, kind in MOVEMENT_ROW.items():
            value = row.get(key, kind())
            if not isinstance(value, kind):
                raise WorkerGone(f"the worker sent malformed data movement (launches: {key})")
            if kind is int:
                value = _count(value, f"launches: {key}")
            elif key == "grid":
                if len(value) != 3:
                    raise WorkerGone("the worker sent malformed data movement (launches: grid)")
                value = [_count(v, "launches: grid") for v in value]
            else:
                value = value[:100]
            clean[key] = value
        out["launches"].append(clean)
    return out


def _compile_row(row) -> dict:
    """The fields of a compile-check row the report shows, type-checked; others dropped."""
    if not isinstance(row, dict):
        raise WorkerGone("the worker sent a malformed compile check row")
    out = {}
    for key, kind in COMPILE_ROW.items():
        value = row.get(key)
        if value is None:
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise WorkerGone(f"the worker sent a malformed compile check row (field {key!r})")
        if kind is list:
            value = [v[:200] if isinstance(v, str) else v for v in value[:MAX_COMPILE_ROWS * 4]
                     if isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10 ** 6)]
        elif kind is dict:
            value = _loop(value)
        out[key] = value[:2000] if isinstance(value, str) else value
    return out


def _is_count(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= MAX_COUNT


def _loop(loop: dict) -> dict:
    """A row's ``loop`` (COMPILE_LOOP_KEYS, COMPILE_LOOP_MAPS, "top"), others dropped."""
    out = {k: loop[k] for k in COMPILE_LOOP_KEYS if _is_count(loop.get(k))}
    for k in COMPILE_LOOP_MAPS:
        if isinstance(loop.get(k), dict):
            out[k] = {str(name)[:60]: n for name, n in list(loop[k].items())[:MAX_LOOP_NAMES] if _is_count(n)}
    if isinstance(loop.get("top"), list):
        out["top"] = [[str(t[0])[:60], t[1]] for t in loop["top"][:MAX_LOOP_NAMES]
                      if isinstance(t, list) and len(t) == 2 and isinstance(t[0], str) and _is_count(t[1])]
    return out


# ---------------------------------------------------------------------------
# The launch capture's reply (grader/harness/capture.py), checked
# ---------------------------------------------------------------------------

MAX_CAPTURE_CASES = 64
MAX_CAPTURE_LAUNCHES = 12
MAX_CAPTURE_TENSORS = 16
_NUMBERS = ("lanes_read", "lanes_written", "sectors_read", "sectors_written", "lines_read", "lines_written",
            "rows_read", "rows_written")
_LAUNCH_NUMBERS = ("dots", "alu", "steps", "max_steps", "outer_steps", "probe_s")
_LAUNCH_INTS = ("programs", "sampled", "signatures", "outside")


class _Malformed(Exception):
    pass


def _capture_number(value, what: str, integer: bool = False):
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool) or not 0 <= value <= MAX_COUNT or value != value:
        raise _Malformed(what)
    return value


def _capture_text(value, n: int) -> str:
    if not isinstance(value, str):
        raise _Malformed("text")
    return value[:n]


def _capture_launch(rec) -> dict:
    if not isinstance(rec, dict):
        raise _Malformed("launch")
    grid = rec.get("grid")
    if not isinstance(grid, list) or len(grid) != 3:
        raise _Malformed("grid")
    out = {"kernel": _capture_text(rec.get("kernel", "?"), 100),
           "grid": [_capture_number(g, "grid", True) for g in grid]}
    for key in _LAUNCH_INTS:
        if key in rec:
            out[key] = _capture_number(rec[key], key, True)
    for key in _LAUNCH_NUMBERS:
        if key in rec:
            out[key] = _capture_number(rec[key], key)
    for key in ("complete", "ran", "trial"):
        if key in rec:
            out[key] = bool(rec[key])
    if rec.get("variant") is not None:
        out["variant"] = _capture_number(rec["variant"], "variant", True)
    if "alternatives" in rec:
        alts = rec["alternatives"]
        if not isinstance(alts, list):
            raise _Malformed("alternatives")
        out["alternatives"] = [_capture_number(a, "alternatives", True) for a in alts[:MAX_CAPTURE_LAUNCHES]]
    if "probe_error" in rec:
        out["probe_error"] = _capture_text(rec["probe_error"], 300)
    if "config" in rec:
        out["config"] = _capture_text(rec["config"], 200)
    flops = rec.get("dot_flops", {})
    if not isinstance(flops, dict) or len(flops) > 8:
        raise _Malformed("dot_flops")
    out["dot_flops"] = {_capture_text(k, 20): _capture_number(v, "dot_flops") for k, v in flops.items()}
    tensors = rec.get("tensors", {})
    counts = rec.get("counts", {})
    if not isinstance(tensors, dict) or not isinstance(counts, dict) or len(tensors) > MAX_CAPTURE_TENSORS \
            or len(counts) > MAX_CAPTURE_TENSORS:
        raise _Malformed("tensors")
    out["tensors"] = {}
    for key, t in tensors.items():
        if not isinstance(t, dict):
            raise _Malformed("tensors")
        out["tensors"][_capture_text(key, 60)] = {"name": _capture_text(t.get("name", "?"), 60),
                                          "bytes": _capture_number(t.get("bytes", 0), "bytes", True)}
    out["counts"] = {}
    for key, c in counts.items():
        if not isinstance(c, dict):
            raise _Malformed("counts")
        entry = {k: _capture_number(c[k], k) for k in _NUMBERS if k in c}
        if "shared_at" in c:
            entry["shared_at"] = _capture_number(c["shared_at"], "shared_at", True)
        out["counts"][_capture_text(key, 60)] = entry
    return out


def clean_capture(reply: dict) -> dict:
    """The capture reply with every field type- and range-checked and bounded; a
    malformed one ends the session as a protocol error, like any other reply."""
    try:
        cases = reply.get("cases", {})
        if not isinstance(cases, dict) or len(cases) > MAX_CAPTURE_CASES:
            raise _Malformed("cases")
        out = {}
        for name, case in cases.items():
            if not isinstance(case, dict):
                raise _Malformed("case")
            launches = case.get("launches", [])
            if not isinstance(launches, list):
                raise _Malformed("launches")
            entry = {"launches": [_capture_launch(r) for r in launches[:MAX_CAPTURE_LAUNCHES]],
                     "dropped": _capture_number(case.get("dropped", 0), "dropped", True)}
            if "error" in case:
                entry["error"] = _capture_text(case["error"], 3000)
            errors = case.get("errors", [])
            if not isinstance(errors, list):
                raise _Malformed("errors")
            entry["errors"] = [_capture_text(e, 300) for e in errors[:5]]
            out[_capture_text(name, 200)] = entry
        return {"cases": out}
    except _Malformed as e:
        raise WorkerGone(f"the worker sent a malformed launch capture (field {e})") from None


def libcuda_dir() -> str | None:
    """The folder of the libcuda this process uses, for the worker's TRITON_LIBCUDA_PATH.

    Without it Triton finds libcuda with ``/sbin/ldconfig -p``, which fails in
    the jail as the student user (seen on an H100 under Ubuntu 24.04).
    """
    import torch
    torch.cuda.init()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(maxsplit=5)[-1].strip()
                if os.path.basename(path).startswith("libcuda.so"):
                    return os.path.dirname(path)
    except OSError:
        pass
    return None


class Session:
    """A running worker for ``kernel_file`` of ``sub``; use as a context manager."""

    def __init__(self, sub: Submission, kernel_file: str, entry: str, device: str,
                 deadline: float, writable: list[Path] = (), sanitizer: str | None = None,
                 checks_off=(), role: str = "worker"):
        """``sanitizer``: a compute-sanitizer binary to run the worker under (GPU;
        a TA's option: every out-of-bounds access is named, at a large cost in speed).
        ``checks_off``: the worker's checks to leave off (fence.py's names: the
        harness's probe found this Triton without what they hook into).
        ``role``: "worker" (calls the wrapper) or "executor" (CPU: carries out the
        worker's programs on the real inputs, worker/executor.py). A CPU worker starts
        its executor beside it (``self.executor``): the arenas go to the executor only."""
        self.device, self._deadline, self.sanitizer, self.role = device, deadline, sanitizer, role
        self.executor: Session | None = None
        self.tmp = sandbox.task_dir("grade-")
        self.scratch = self.tmp / "scratch"
        self.scratch.mkdir()
        self.scratch.chmod(0o777)
        stage(sub, kernel_file, self.tmp / "stage")
        self.started = time.monotonic()
        self.timed_out = False
        self.exit_reason: str | None = None
        self.exit_kind = ""
        cmd_r, self._cmd_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        # GPU arenas travel as file descriptors over this socket (grader/worker/vmm.py).
        self._fds, fds_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        if role == "executor":
            argv = [sys.executable, "-m", "_grader_worker.executor", str(cmd_r), str(reply_w),
                    str(fds_child.fileno()), "submission", kernel_file[:-3], ",".join(sorted(checks_off))]
        else:
            argv = [sys.executable, "-m", "_grader_worker.main", str(cmd_r), str(reply_w),
                    str(fds_child.fileno()), "submission", kernel_file[:-3], entry, ",".join(sorted(checks_off))]
        env = self._env()
        if sanitizer:
            argv = [sanitizer, "--tool", "memcheck", "--print-limit", "20", *argv]
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"   # every tensor its own allocation: overruns show
        gpu = device != "cpu"
        # The grading Triton, when this run put it before the environment's own (grader/toolchain.py).
        side = toolchain.side_path()
        jail = sandbox.Jail(scratch=self.scratch, readonly=[self.tmp / "stage", *([Path(side)] if side else [])],
                            writable=list(writable), env=env, gpu=gpu,
                            pass_fds=(cmd_r, reply_w, fds_child.fileno()))
        try:
            self.proc = sandbox.spawn(argv, jail, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT)
        finally:
            os.close(cmd_r)
            os.close(reply_w)
            fds_child.close()
        os.set_blocking(self._cmd_w, False)   # commands are written against the deadline (_send)
        self._log = _TailReader(self.proc.stdout)
        self._log.start()
        self._pending = b""
        self._hello: dict | None = None
        # The worker's threads, libraries and processes, read from /proc by this process
        # (osfacts.py): before the kernel file is imported and after. ``facts_off``: why
        # they could not be read or compared ("": they were).
        self.watch = osfacts.Watch(self.proc.pid)
        self.before_import = self.after_import = osfacts.Snapshot(libraries_how="", error="not read yet")
        self.facts_off = ""
        if device == "cpu" and role == "worker":
            try:
                self.executor = Session(sub, kernel_file, entry, device, deadline, writable,
                                        checks_off=checks_off, role="executor")
            except BaseException:
                self.close()
                raise

    @property
    def deadline(self) -> float:
        return self._deadline

    @deadline.setter
    def deadline(self, value: float) -> None:
        self._deadline = value
        if self.executor is not None:
            self.executor.deadline = value

    @property
    def hello(self) -> dict:
        """The worker's reply to its import of the kernel file. Read on first use, so that
        several workers can start (import torch, CUDA) side by side. The worker first says
        that it has started (torch, Triton and, on a GPU, CUDA, the kernel trace and what
        an honest run would start lazily, warmed up) and waits: the harness reads its
        threads and libraries, lets it import the kernel file, and reads them again."""
        if self._hello is None:
            started = self._recv()
            if not started.get("started"):
                self._gone("the worker did not say that it had started")
            # A warm-up that failed (its note) would let an honest run start threads later: no rule then.
            self.facts_off = self.watch.find() or started.get("note", "")[:300]
            self.before_import = self.snapshot()
            self._send(b'{"op": "import"}\n')
            self._hello = self._recv()
            self.after_import = self.snapshot()
            self.facts_off = self.facts_off or osfacts.unread(self.before_import, self.after_import)
        return self._hello

    def snapshot(self) -> osfacts.Snapshot:
        """The worker's threads, libraries and processes now, as this process reads them."""
        return self.watch.take()

    def import_changes(self) -> list[str]:
        """What appeared in the worker (and in its executor, which imports the kernel file too)
        while it imported the kernel file (osfacts.changes)."""
        self.hello  # noqa: B018
        found = [] if self.facts_off else osfacts.changes(self.before_import, self.after_import)
        if self.executor is not None:
            try:
                found += [f"{c} (in the executor)" for c in self.executor.import_changes()]
            except WorkerGone:
                pass   # its first execute reports how it ended
        return found

    def changes_since_import(self, libraries: bool = True, processes: bool = True) -> list[str]:
        """What appeared in the worker since the kernel file was imported, read now."""
        self.hello  # noqa: B018
        return [] if self.facts_off else osfacts.changes(self.after_import, self.snapshot(), libraries, processes)

    def _env(self) -> dict:
        env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        env.update(HOME=str(self.scratch), TMPDIR=str(self.scratch), PYTHONNOUSERSITE="1",
                   PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PYTHONSAFEPATH="1",
                   TRITON_CACHE_DIR=str(self.scratch / "triton-cache"),
                   PYTHONPATH=toolchain.worker_pythonpath(str(self.tmp / "stage")))
        if self.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif "TRITON_LIBCUDA_PATH" not in env:
            found = libcuda_dir()
            if found:
                env["TRITON_LIBCUDA_PATH"] = found
        return env

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, msg: dict) -> dict:
        """Send one command, return its validated reply; WorkerGone if there is none."""
        if self.exit_reason:
            raise WorkerGone(self.exit_reason, self.exit_kind)
        self.hello  # noqa: B018  (the import's reply comes before any other)
        self._send((json.dumps(msg) + "\n").encode())
        return self._recv()

    def _send(self, data: bytes) -> None:
        """Write a command within the deadline: a worker that stops reading its
        commands (a full pipe) costs its task, never a hang of the harness."""
        view = memoryview(data)
        while view:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.timed_out = True
                self._gone(f"time limit exceeded after {time.monotonic() - self.started:.0f} s; the worker "
                           "stopped reading its commands and was killed", "timeout")
            _, ready, _ = select.select([], [self._cmd_w], [], min(left, 1.0))
            if not ready:
                continue
            try:
                view = view[os.write(self._cmd_w, view):]
            except BlockingIOError:
                continue
            except OSError:
                self._gone("the worker stopped reading its commands")

    def map(self, name: str, arena) -> dict:
        """Have the worker map ``arena`` under ``name``: its descriptor goes first, over the socket."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.timed_out = True
            self._gone(f"time limit exceeded after {time.monotonic() - self.started:.0f} s; the worker was "
                       "killed", "timeout")
        try:
            self._fds.settimeout(left)   # a worker that stops reading cannot block the harness
            arena.send(self._fds)
        except OSError:
            self._gone("the worker stopped reading its descriptors")
        return self.request({"op": "map", "arena": name, "handle": arena.handle()})

    def _recv(self) -> dict:
        while b"\n" not in self._pending:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.timed_out = True
                self._gone(f"time limit exceeded after {time.monotonic() - self.started:.0f} s; "
                           "the worker was killed", "timeout")
            ready, _, _ = select.select([self._reply_r], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._reply_r, 65536)
            if not chunk:
                self._gone(*self._death())
            self._pending += chunk
            if len(self._pending) > MAX_REPLY_BYTES:
                self._gone("the worker sent an oversized reply")
        line, self._pending = self._pending.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            self._gone("the worker sent a reply that is not JSON")
        try:
            return _validate(reply)
        except WorkerGone as e:
            self._gone(str(e), e.kind)

    def _death(self) -> tuple[str, str]:
        """(why the worker is gone, its kind) once its reply pipe closed."""
        code = self.proc.wait(timeout=10)
        why = self.proc.reason() if hasattr(self.proc, "reason") else None
        if why:
            return f"the worker process ended: {why}", "worker_ended"
        if code is not None and code < 0:
            try:
                return f"the process crashed ({signal.Signals(-code).name})", "crashed"
            except ValueError:
                return f"the process crashed (signal {-code})", "crashed"
        return f"the process exited early with code {code}", "exited_early"

    def _gone(self, reason: str, kind: str = "protocol_error"):
        self.exit_reason, self.exit_kind = reason, kind
        self.close()
        raise WorkerGone(reason, kind)

    def log_tail(self) -> str:
        return self._log.text()

    def sanitizer_errors(self) -> int | None:
        """compute-sanitizer's error count from the worker's output (after close), if it printed one.

        That output is the worker's own: a submission can only make it worse
        for itself by forging it."""
        import re
        found = re.findall(r"ERROR SUMMARY: (\d+) errors?\s*$", self.log_tail(), re.M)
        return int(found[-1]) if found else None

    def close(self) -> None:
        if getattr(self, "_closed", False):
            return
        self._closed = True
        if self.executor is not None:
            self.executor.close()
        if self.sanitizer and self.exit_reason is None:
            # End of input lets the worker exit by itself, so that compute-sanitizer
            # prints its summary; then the whole tree is killed as always.
            try:
                os.close(self._cmd_w)
            except OSError:
                pass
            self._cmd_w = -1   # never close a reused descriptor number below
            self.proc.wait(timeout=30)
        self.proc.kill()
        self.proc.wait(timeout=10)
        self._log.join(timeout=5)
        self._fds.close()
        for fd in (self._cmd_w, self._reply_r):
            if fd < 0:
                continue
            try:
                os.close(fd)
            except OSError:
                pass
        self.seconds = time.monotonic() - self.started
        import shutil
        shutil.rmtree(self.tmp, ignore_errors=True)
