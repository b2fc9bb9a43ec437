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
