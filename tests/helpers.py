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
