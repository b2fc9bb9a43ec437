"""The interpreter's bounds check of a checked call (CPU): a load or store outside
every tensor the call knows is masked off, counted and named, so that what
passes on a laptop does not fault (or read another tensor) on the GPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from grader.worker.movement import Movement, tensor_range
from tests.fakes import grade_files

ROOT = Path(__file__).resolve().parent.parent
STUDENT = ROOT / "tests" / "fixtures" / "student"


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr, MASK_LOAD: tl.constexpr, MASK_STORE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASK_LOAD:
        v = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    else:
        v = tl.load(x_ptr + offs)
    if MASK_STORE:
        tl.store(y_ptr + offs, v, mask=offs < n)
    else:
        tl.store(y_ptr + offs, v)


def _run(n, block, mask_load, mask_store):
    # x and y live inside one larger buffer, between canaries: what the check
    # must not let through is a read or write of those neighbours.
    buf = torch.full((3 * 64,), -7.0)
    x, y = buf[8:8 + n], buf[64 + 8:64 + 8 + n]
    x.copy_(torch.arange(n, dtype=torch.float32))
    with Movement([("x", *tensor_range(x)), ("y", *tensor_range(y))], confine=True) as m:
        _copy[(triton.cdiv(n, block),)](x, y, n, BLOCK=block, MASK_LOAD=mask_load, MASK_STORE=mask_store)
    return buf, x, y, m.outside()


def test_masked_kernel_stays_inside():
    buf, x, y, outside = _run(10, 16, True, True)
    assert outside == {"loads": 0, "stores": 0, "kernel": ""}
    assert torch.equal(y, x) and (buf[:8] == -7).all() and (buf[64 + 18:] == -7).all()


@pytest.mark.parametrize("mask_load, mask_store, loads, stores", [(False, True, 6 * 4, 0), (True, False, 0, 6 * 4),
                                                                  (False, False, 6 * 4, 6 * 4)])
def test_lanes_outside_are_counted_and_never_touch_memory(mask_load, mask_store, loads, stores):
    buf, x, y, outside = _run(10, 16, mask_load, mask_store)
    assert outside == {"loads": loads, "stores": stores, "kernel": "_copy"}
    assert torch.equal(y, x)                               # the lanes inside did their work
    assert (buf[64 + 18:64 + 24] == -7).all()              # the six lanes past y wrote nothing


def test_the_check_restores_the_interpreter():
    import triton.runtime.interpreter as interp
    before = interp.InterpreterBuilder.create_masked_load
    _run(10, 16, False, True)
    assert interp.InterpreterBuilder.create_masked_load is before
    assert np.all(_run(10, 16, True, True)[2].numpy() == np.arange(10))


# ----------------------------------------------------------------------------- through the grader

@pytest.mark.slow
def test_a_load_past_the_weight_fails_even_when_the_output_is_right(tmp_path):
    src = (STUDENT / "w8a8_unmasked_weight_load.py").read_text()
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    cases = [t for t in result.tests if t.kind == "correctness"]
    failed = [t for t in cases if t.status == "failed"]
    assert failed, [t.message for t in cases]
    for t in failed:
        assert t.message.startswith("the output is right, but kernel _w8a8_kernel loaded "), t.message
        assert "outside every tensor it was given" in t.message
    assert result.tasks[0].status == "ok"


@pytest.mark.slow
def test_a_store_past_the_output_is_named_not_a_crash(tmp_path):
    src = (STUDENT / "dds_unmasked_store.py").read_text()
    result = grade_files(tmp_path, {"dds": src}, ["dds"])
    failed = [t for t in result.tests if t.status == "failed"]
    assert failed and all("kernel _dds_kernel stored " in t.message for t in failed), \
        [t.message for t in result.tests]
    assert not any("crashed" in t.message for t in result.tests)


@pytest.mark.slow
def test_the_naive_kernels_stay_inside(tmp_path):
    sub = tmp_path / "naive"
    shutil.copytree(ROOT / "calibration" / "naive", sub)
    result = grade_files(tmp_path, {t: (sub / f"{t}.py").read_text() for t in ("w8a8", "w4a16", "dds")},
                         ["w8a8", "w4a16", "dds"])
    assert all(t.status == "passed" for t in result.tests if t.kind == "correctness"), \
        [t.message for t in result.tests if t.status != "passed"]
