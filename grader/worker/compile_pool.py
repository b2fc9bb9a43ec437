"""The compile check's child processes: each compiles a share of the variants.

    _run_children(todo, deadline, jobs) -> {job id: result}

compile.py hands over the variants to compile (one job dict each); this module
splits them among up to ``jobs`` children (compile_child.py, run as a module of
this package with TRITON_INTERPRET unset), reads what each child reports line
by line, gives the rest of a crashed child's share to a fresh one (the variant
it crashed on gets the crash as its result), and kills every child at the
deadline, keeping what they had finished.

This file runs in the untrusted worker and depends on the standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

from . import compile_child
from .compile_rows import _clip


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
    """compile_child.py run as a module of this package (grader.worker in a checkout,
    the staged worker package in the jail): its siblings import as they do here."""
    return [sys.executable, "-m", compile_child.__name__, jobfile, outfile]


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
