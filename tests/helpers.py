"""Shared by the project's tests: devices, random problems, GPU skip marker."""

from __future__ import annotations

import pytest
import torch

from grader.tasks import get
from grader.tasks.dds import reference as dds_reference  # noqa: F401
from grader.tasks.w4a16 import reference as w4a16_reference  # noqa: F401
from grader.tasks.w8a8 import reference as w8a8_reference  # noqa: F401

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
needs_gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (full-size shapes and timing)")


def make_inputs(task: str, shape, options: dict, seed: int, device: str = "cpu"):
    """(args, extras) of one graded call: the registry's inputs of ``task``."""
    return get(task).make_inputs(shape, options, seed, device)


def problem(task: str, shape, seed: int, **options):
    """Fresh random kernel arguments on DEVICE (the grader's own generator)."""
    return make_inputs(task, shape, options, seed, DEVICE)


_COMPILE = """
import importlib, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
job = json.loads(sys.argv[1])
sys.path.insert(0, job["path"])
fn = getattr(importlib.import_module(job["module"]), job["kernel"])
attrs = {(i,): [["tt.divisibility", 16]] for i in job["aligned"]}
src = ASTSource(fn, job["signature"], job["constexprs"], attrs)
kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=job["options"])
open(job["out"], "w").write(kernel.asm["ptx"])
"""


def compile_ptx(out, module: str, kernel: str, signature: dict, constexprs: dict, aligned: tuple,
                path=None, **options) -> str:
    """The PTX the installed Triton emits for sm_90 for ``module.kernel`` (importable from
    ``path``, default tests/fixtures/compile; pointers and the ``aligned`` arguments
    16-divisible), written to ``out``. Compiled in a child process without
    TRITON_INTERPRET, as the compile check does: the suite runs Triton's interpreter."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = path or Path(__file__).parent / "fixtures" / "compile"
    job = {"path": str(path), "module": module, "kernel": kernel, "signature": signature, "constexprs": constexprs,
           "aligned": list(aligned), "options": options, "out": str(out)}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _COMPILE, json.dumps(job)], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(out).read_text()


def validate_gradescope(results: dict) -> None:
    """Raise jsonschema.ValidationError unless ``results`` uses Gradescope's results.json fields only."""
    import json
    from pathlib import Path

    import jsonschema
    schema = json.loads((Path(__file__).parent / "fixtures" / "gradescope_results.schema.json").read_text())
    jsonschema.validate(results, schema)


# Time limits that tests give the grader scale with how fast this machine runs right now,
# so that no test depends on the speed of the machine it runs on (a busy 2-core CI machine).
REFERENCE_CPU_S = 0.6    # CPU seconds of _LOOP on the project's 2-core machine (idle or busy alike)
_LOOP = 10_000_000


def slowdown() -> float:
    """How many times slower than the project's idle 2-core machine this one runs
    now, at least 1 and at most 20: a fixed single-threaded loop's wall time over
    its CPU time (other work sharing the cores) times its CPU time over
    REFERENCE_CPU_S (a slower core). Measured at each call: load comes and goes."""
    import time
    wall, cpu = time.perf_counter(), time.process_time()
    n = 0
    for i in range(_LOOP):
        n += i
    wall, cpu = time.perf_counter() - wall, max(time.process_time() - cpu, 1e-3)
    return min(20.0, max(1.0, wall / cpu) * max(1.0, cpu / REFERENCE_CPU_S))


def scaled(seconds: float) -> float:
    """``seconds`` (a limit that holds on the idle machine) scaled to this machine now."""
    return seconds * slowdown()
