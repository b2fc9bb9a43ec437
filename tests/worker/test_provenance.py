"""Who wrote the output, from what (grader/worker/provenance.py), in the CPU interpreter.

Each test runs a small kernel of this file under ``Provenance`` as a checked call does
(the call's inputs named, this module's kernels the submission's own) and reads its
report of the returned tensor: elements no kernel of the call stored (``unwritten``),
stored from data that is not the call's inputs (``foreign``), stored nonzero from no
input (``inputless``). The grader-level attacks are in tests/integrity/test_integrity.py.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from grader.worker.movement import tensor_range
from grader.worker.provenance import Provenance
from tests.helpers import HAS_CUDA

pytestmark = pytest.mark.skipif(HAS_CUDA, reason="the interpreter's record (CPU)")

N = 64
CLEAN = {"elements": N, "unwritten": 0, "foreign": 0, "inputless": 0}


@triton.jit
def _copy(src_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(src_ptr + offs, mask=offs < n, other=0.0), mask=offs < n)


@triton.jit
def _mix(src_ptr, x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y = src + 0 * x: the output depends on x too, which must not clean src's data."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    s = tl.load(src_ptr + offs, mask=offs < n, other=0.0)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, s + 0.0 * x, mask=offs < n)


@triton.jit
def _fill(y_ptr, n, VALUE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.full((BLOCK,), VALUE, tl.float32), mask=offs < n)


@triton.jit
def _accumulate(x_ptr, y_ptr, n, ATOMIC: tl.constexpr, BLOCK: tl.constexpr):
    """y += x, as a split-K partial would: with an atomic, or a load and a store."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    if ATOMIC:
        tl.atomic_add(y_ptr + offs, x, mask=offs < n)
    else:
        tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=offs < n, other=0.0) + x, mask=offs < n)


@triton.jit
def _launder(src_ptr, x_ptr, y_ptr, HOW: tl.constexpr):
    """y (8 x 8) from src through one of the language's reshaping and reducing paths, plus 0 * x."""
    r = tl.arange(0, 8)
    tile = tl.load(src_ptr + r[:, None] * 8 + r[None, :])
    x = tl.load(x_ptr + r[:, None] * 8 + r[None, :])
    if HOW == "T":
        v = tile.T.T
    elif HOW == "trans":
        v = tl.trans(tl.trans(tile))
    elif HOW == "reshape":
        v = tl.reshape(tl.reshape(tile, (64,)), (8, 8))
    elif HOW == "sum":
        v = tl.broadcast_to(tl.sum(tile, axis=1)[:, None], (8, 8))
    elif HOW == "cumsum":
        v = tl.cumsum(tile, axis=1)
    elif HOW == "max":
        v = tl.broadcast_to(tl.max(tile, axis=0)[None, :], (8, 8))
    elif HOW == "where":
        v = tl.where(x > 1e30, x, tile)
    elif HOW == "dot":
        eye = tl.where(r[:, None] == r[None, :], 1.0, 0.0)
        v = tl.dot(tile, eye)
    elif HOW == "bitcast":
        v = tile.to(tl.int32, bitcast=True).to(tl.float32, bitcast=True)
    elif HOW == "join_split":
        a, b = tl.split(tl.join(tile, x))
        v = a
    else:
        v = tile
    tl.store(y_ptr + r[:, None] * 8 + r[None, :], v + 0.0 * x)


def _report(fn, *inputs):
    """Run ``fn(*inputs)`` as a checked call: ``inputs`` are the call's inputs."""
    named = [(str(i), *tensor_range(t)) for i, t in enumerate(inputs)]
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with Provenance(named, own_prefix=__name__) as p:
            y = fn(*inputs)
            return p.report(y), y
    finally:
        torch.use_deterministic_algorithms(False)


def _x():
    return torch.randn(N)


def test_a_kernel_that_copies_its_input_into_the_output_is_clean():
    def call(x):
        y = torch.empty(N)
        _copy[(4,)](x, y, N, BLOCK=16)
        return y
    facts, y = _report(call, _x())
    assert facts == CLEAN


def test_an_output_built_on_the_host_is_not_the_kernels():
    """The issue's forge: a tensor built from Python numbers, returned; a kernel ran beside it."""
    def call(x):
        y = torch.tensor([2.0 * x[i].item() for i in range(N)])
        _copy[(4,)](x, torch.empty(N), N, BLOCK=16)
        return y
    facts, _ = _report(call, _x())
    assert facts["unwritten"] == N


def test_a_host_write_after_the_kernel_is_seen():
    def call(x):
        y = torch.empty(N)
        _copy[(4,)](x, y, N, BLOCK=16)
        y[3] = 1.0
        return y
    facts, _ = _report(call, _x())
    assert facts["unwritten"] == 1 and facts["foreign"] == 0


@pytest.mark.parametrize("kernel", ["copy", "plus_zero_times_x"])
def test_a_kernel_that_copies_host_numbers_is_foreign(kernel):
    """The host-built tensor copied into the output by a kernel, alone or plus 0 * x."""
    def call(x):
        h = torch.tensor([2.0 * x[i].item() for i in range(N)])
        y = torch.empty(N)
        if kernel == "copy":
            _copy[(4,)](h, y, N, BLOCK=16)
        else:
            _mix[(4,)](h, x, y, N, BLOCK=16)
        return y
    facts, _ = _report(call, _x())
    assert facts["foreign"] == N and facts["unwritten"] == 0


@pytest.mark.parametrize("how", ["ones", "full", "arange", "host_arithmetic", "scalar_writes"])
def test_data_the_host_makes_during_the_call_is_foreign(how):
    def call(x):
        if how == "ones":
            h = torch.ones(N)
        elif how == "full":
            h = torch.full((N,), 0.5)
        elif how == "arange":
            h = torch.arange(1, N + 1, dtype=torch.float32)
        elif how == "host_arithmetic":
            h = x * 2
        else:
            h = torch.zeros(N)
            for i in range(N):
                h[i] = 1.5
        y = torch.empty(N)
        _mix[(4,)](h, x, y, N, BLOCK=16)
        return y
    facts, _ = _report(call, _x())
    assert facts["foreign"] == N, facts


def test_data_kept_from_before_the_call_is_foreign():
    kept = torch.randn(N)

    def call(x):
        y = torch.empty(N)
        _mix[(4,)](kept, x, y, N, BLOCK=16)
        return y
    facts, _ = _report(call, _x())
    assert facts["foreign"] == N


def test_a_buffer_its_own_kernels_wrote_in_an_earlier_call_is_foreign():
    """What a kernel wrote in one call is data prepared before the next."""
    cache = torch.empty(N)

    def first(x):
        _copy[(4,)](x, cache, N, BLOCK=16)
        return cache

    def second(x):
        y = torch.empty(N)
        _mix[(4,)](cache, x, y, N, BLOCK=16)
        return y
    assert _report(first, _x())[0] == CLEAN
    assert _report(second, _x())[0]["foreign"] == N


def test_a_buffer_its_own_kernels_wrote_in_the_call_is_clean():
    """A scratch buffer the call's kernels wrote from the inputs (a quantized x, split-K partials)."""
    def call(x):
        scratch, y = torch.empty(N), torch.empty(N)
        _copy[(4,)](x, scratch, N, BLOCK=16)
        _copy[(4,)](scratch, y, N, BLOCK=16)
        return y
    assert _report(call, _x())[0] == CLEAN


@pytest.mark.parametrize("start", ["torch.zeros", "zero_", "empty_then_fill_kernel"])
@pytest.mark.parametrize("atomic", [True, False])
def test_outputs_written_in_several_launches_are_clean(start, atomic):
    """Split K with atomics into a zeroed buffer, a zero-fill kernel then accumulation:
    zeros are not data, and every element ends stored by the call's kernels."""
    def call(x):
        if start == "torch.zeros":
            y = torch.zeros(N)
        elif start == "zero_":
            y = torch.empty(N)
            y.zero_()
        else:
            y = torch.empty(N)
            _fill[(4,)](y, N, VALUE=0.0, BLOCK=16)
        for _ in range(2):
            _accumulate[(4,)](x, y, N, ATOMIC=atomic, BLOCK=16)
        return y
    facts, y = _report(call, _x())
    assert facts == CLEAN


def test_a_host_conversion_of_the_kernels_output_is_still_theirs():
    """fp32 partials accumulated by the kernels, converted to fp16 by the wrapper (.to()):
    the host copied what the kernels computed. A conversion of host-built numbers is not."""
    def call(x):
        acc = torch.zeros(N, dtype=torch.float32)
        _accumulate[(4,)](x, acc, N, ATOMIC=True, BLOCK=16)
        return acc.to(torch.float16)
    assert _report(call, _x())[0] == CLEAN

    def forged(x):
        return torch.tensor([x[i].item() for i in range(N)]).to(torch.float16)
    assert _report(forged, _x())[0]["unwritten"] == N


def test_constants_are_no_answer_unless_zero():
    """A tl.zeros accumulator that nothing was added to (an empty block row) stores zeros: fine.
    A nonzero constant is computed from no input."""
    def zeros(x):
        y = torch.empty(N)
        _fill[(4,)](y, N, VALUE=0.0, BLOCK=16)
        return y

    def ones(x):
        y = torch.empty(N)
        _fill[(4,)](y, N, VALUE=1.0, BLOCK=16)
        return y
    assert _report(zeros, _x())[0] == CLEAN
    assert _report(ones, _x())[0] == {**CLEAN, "inputless": N}


@pytest.mark.parametrize("how", ["plain", "T", "trans", "reshape", "sum", "cumsum", "max", "where", "dot",
                                 "bitcast", "join_split"])
def test_no_path_through_the_language_cleans_host_data(how):
    """Host data through transposes (tensor.T is built outside the builder), reshapes,
    reductions, scans, a dot, a bitcast round trip, join and split, a tl.where branch:
    still foreign; and x through the same paths stays clean."""
    def forged(x):
        h = torch.full((8, 8), 0.25)
        y = torch.empty(8, 8)
        _launder[(1,)](h, x, y, HOW=how)
        return y

    def honest(x):
        y = torch.empty(8, 8)
        _launder[(1,)](x, x, y, HOW=how)
        return y
    x = torch.randn(8, 8)
    assert _report(forged, x)[0]["foreign"] == 64, how
    assert _report(honest, x)[0] == {"elements": 64, "unwritten": 0, "foreign": 0, "inputless": 0}, how


def test_the_record_restores_the_interpreter_and_the_dispatch():
    import triton.runtime.interpreter as interp
    before = (interp.InterpreterBuilder.create_masked_load, interp._implicit_cvt, interp.GridExecutor.__call__)
    _report(lambda x: x.clone(), _x())
    assert (interp.InterpreterBuilder.create_masked_load, interp._implicit_cvt,
            interp.GridExecutor.__call__) == before
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    assert _get_current_dispatch_mode() is None


# ----------------------------------------------------------------------------- honest kernels

def _honest():
    from tests.fakes import ROOT
    pairs = [(f"{folder}/{task}.py", task) for folder in ("solutions", "calibration/naive",
                                                          "tests/fixtures/from_the_handout")
             for task in ("w8a8", "w4a16", "dds")]
    pairs += [(f"tests/variants/{p.name}", p.stem.split("_")[0])
              for p in sorted((ROOT / "tests" / "variants").glob("*_faithful_*.py"))]
    pairs += [(str(p.relative_to(ROOT)), p.stem) for p in sorted((ROOT / "tests" / "fixtures" / "slow").glob("*/*.py"))]
    return pairs


HONEST = _honest()


@pytest.mark.parametrize("path, task", HONEST, ids=[p for p, _ in HONEST])
def test_honest_kernels_store_every_output_element_from_their_inputs(tmp_path, monkeypatch, path, task):
    """The reference, the tutorial-style kernels, those written from the handout, the faithful
    variants (split K with atomics and an fp16 conversion on the host, reversed K, block orders)
    and the slow fixtures: on every CPU case of the rubric, every output element is stored by
    their kernels from the inputs, every access stays inside the tensor its pointer came from,
    and the wrapper reads no values into Python."""
    import importlib
    import shutil
    import sys

    from grader.rubric import load_rubric
    from grader.tasks import get
    from grader.worker.evidence import OpRecorder
    from grader.worker.main import _named
    from grader.worker.movement import Movement
    from tests.fakes import ROOT
    package = tmp_path / "honest_prov"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copyfile(ROOT / "assignment" / "utils.py", package / "utils.py")
    shutil.copyfile(ROOT / path, package / f"{task}.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    t = get(task)
    fn = getattr(importlib.import_module(f"honest_prov.{task}"), t.entry)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        for spec in load_rubric().tests_for(task, "correctness"):
            shape = spec.shape_on("cpu")
            if shape is None:
                continue
            args, _ = t.make_inputs(shape, spec.options, 5, "cpu")
            named = _named(args, [{"tensor": None} if a.layout == torch.strided else {"bsr": None} for a in args])
            ops = OpRecorder()
            with Provenance(named, own_prefix="honest_prov.") as p, Movement(named, confine=True) as m, ops:
                y = fn(*args)
                facts = p.report(y)
            assert facts == {"elements": y.numel(), "unwritten": 0, "foreign": 0, "inputless": 0}, (spec.name, facts)
            assert m.outside()["loads"] == m.outside()["stores"] == 0, (spec.name, m.outside())
            assert ops.host_reads() == 0, spec.name
    finally:
        torch.use_deterministic_algorithms(False)
        for name in [n for n in sys.modules if n.startswith("honest_prov")]:
            del sys.modules[name]


def test_a_record_that_fails_turns_itself_off_and_leaves_the_call_alone(monkeypatch):
    """A bug in the record's own bookkeeping (simulated) must never change what the kernel
    computes nor flag the submission: the record says it failed, and the worker reports the
    check as off (tests/worker/test_fence.py: its sentence in every report)."""
    def broken(*args):
        raise ValueError("a rule without a case")
    monkeypatch.setattr(Provenance, "_loaded", broken)
    x = _x()

    def call(x):
        y = torch.empty(N)
        _copy[(4,)](x, y, N, BLOCK=16)
        return y
    facts, y = _report(call, x)
    assert facts is None and torch.equal(y, x)
    with Provenance([("0", *tensor_range(x))], own_prefix=__name__) as p:
        call(x)
    assert p.error == "ValueError: a rule without a case"


@triton.jit
def _copy_half(src_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """Stores the first half only: the second is left as it was allocated."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(src_ptr + offs, mask=offs < n, other=0.0), mask=offs < n // 2)


@pytest.mark.parametrize("convert", [False, True])
def test_elements_the_kernels_skip_in_a_zeroed_output_are_left_to_the_check_of_the_values(convert):
    """An output allocated with torch.zeros whose kernel skips the elements that are zero anyway
    (empty block rows), converted on the host or not: nothing was written there with data, so
    the record finds nothing; the values decide. A skipped element of torch.empty (NaN) is just
    as silent here, and wrong there."""
    def call(x):
        y = torch.zeros(N)
        _copy_half[(4,)](x, y, N, BLOCK=16)
        return y.to(torch.float16) if convert else y
    assert _report(call, _x())[0] == CLEAN


def test_a_host_write_of_zero_is_no_data_and_of_a_number_is():
    def call(x, value):
        y = torch.empty(N)
        _copy[(4,)](x, y, N, BLOCK=16)
        y[5] = value
        return y
    assert _report(lambda x: call(x, 0.0), _x())[0] == CLEAN
    assert _report(lambda x: call(x, 0.5), _x())[0]["unwritten"] == 1
