"""Shared by the project's tests: devices, random problems, GPU skip marker."""

from __future__ import annotations

import pytest
import torch

from grader.references import dds_reference, w4a16_reference, w8a8_reference  # noqa: F401
from grader.harness.inputs import make_inputs

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
needs_gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (full-size shapes and timing)")


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
