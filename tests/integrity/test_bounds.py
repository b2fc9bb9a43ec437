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

ROOT = Path(__file__).resolve().parents[2]
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
    assert outside == {"loads": 0, "stores": 0, "kernel": "", "tensor": ""}
    assert torch.equal(y, x) and (buf[:8] == -7).all() and (buf[64 + 18:] == -7).all()


@pytest.mark.parametrize("mask_load, mask_store, loads, stores", [(False, True, 6 * 4, 0), (True, False, 0, 6 * 4),
                                                                  (False, False, 6 * 4, 6 * 4)])
def test_lanes_outside_are_counted_and_never_touch_memory(mask_load, mask_store, loads, stores):
    buf, x, y, outside = _run(10, 16, mask_load, mask_store)
    # The first lane outside is named after the tensor it went past: x's load, else y's store.
    assert outside == {"loads": loads, "stores": stores, "kernel": "_copy", "tensor": "x" if loads else "y"}
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
        assert "outside qweight_t, the tensor its pointer was derived from" in t.message, t.message
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


# ----------------------------------------------------------------------------- each access, its own tensor

def _apart(n, mask_load):
    """x and y in one buffer with a gap between them, as the arena lays inputs out (guard bytes
    between tensors): a load past the end of x lands in the gap, inside no tensor."""
    buf = torch.full((2 * n + 64,), -7.0)
    x, y = buf[:n], buf[n + 32:2 * n + 32]
    x.copy_(torch.arange(n, dtype=torch.float32))
    named = [("0", *tensor_range(x)), ("1", *tensor_range(y))]
    with Movement(named, confine=True) as m:
        _copy[(triton.cdiv(n, 16),)](x, y, n - 4, BLOCK=16, MASK_LOAD=mask_load, MASK_STORE=True)
    return m.outside()


def test_a_load_past_the_end_of_x_is_out_of_bounds():
    """A read past the end of x that lands between the arguments (the arena's guard bytes) is
    out of bounds: the lanes are masked off, counted and x is named."""
    outside = _apart(12, mask_load=False)   # 16 lanes over x[0:12]: 4 past its end
    assert outside == {"loads": 4 * 4, "stores": 0, "kernel": "_copy", "tensor": "0"}, outside
    assert _apart(12, mask_load=True) == {"loads": 0, "stores": 0, "kernel": "", "tensor": ""}


@pytest.mark.slow
def test_the_k_tail_of_x_read_without_its_mask_is_named(tmp_path):
    """W4A16 loading the K tail of x without a mask (tests/variants/w4a16_bug_no_k_mask.py):
    its last row reads past the end of x. The output is right, the case fails, and the
    message names x, the tensor the pointer came from."""
    from grader.grade import grade
    from grader.rubric import parse_rubric
    from tests.fakes import rubric_dict
    data = rubric_dict(tasks=("w4a16",))
    data["tests"].append(dict(name="w4a16/k_tail", task="w4a16", kind="correctness", points=2,
                              shape=[9, 64, 136], cpu_shape=[9, 64, 136]))   # K = 2 * 64 + 8
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "w4a16.py").write_text((ROOT / "tests" / "variants" / "w4a16_bug_no_k_mask.py").read_text())
    result = grade(sub, parse_rubric(data), seed=3, tasks=["w4a16"], log=lambda *_: None)
    failed = [t for t in result.tests if t.kind == "correctness" and t.status == "failed"]
    assert [t.name for t in failed] == ["w4a16/k_tail"], [t.message for t in result.tests]
    for t in failed:
        assert t.message.startswith("the output is right, but kernel _w4a16_kernel loaded "), t.message
        assert "outside x, the tensor its pointer was derived from" in t.message, t.message
