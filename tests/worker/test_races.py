"""Cross-program races found in the interpreter (grader/worker/races.py): each kernel
here is run on the CPU with the executor's bounds check and race record installed, and
the record says whether its programs depend on the order the interpreter ran them in.

The racy kernels are right in the interpreter (it runs programs one after another) and
wrong on a GPU; the honest ones must never be called racy (a false verdict)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from grader.worker.movement import Movement, _changed, tensor_range
from tests.helpers import HAS_CUDA

pytestmark = pytest.mark.skipif(HAS_CUDA, reason="the race record runs in the CPU interpreter")


@triton.jit
def _split_k_plain(x, out, K, BLOCK: tl.constexpr, SPLIT: tl.constexpr):
    """Each program sums one slice of x and adds it to out[0] with a plain load and store."""
    pid = tl.program_id(0)
    offs = pid * (K // SPLIT) + tl.arange(0, BLOCK)
    part = tl.sum(tl.load(x + offs, mask=offs < (pid + 1) * (K // SPLIT), other=0.0))
    tl.store(out, tl.load(out) + part)


@triton.jit
def _split_k_atomic(x, out, K, BLOCK: tl.constexpr, SPLIT: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * (K // SPLIT) + tl.arange(0, BLOCK)
    part = tl.sum(tl.load(x + offs, mask=offs < (pid + 1) * (K // SPLIT), other=0.0))
    tl.atomic_add(out, part)


@triton.jit
def _clamped_tiles(x, out, n, BLOCK: tl.constexpr):
    """Tutorial 03's clamp (offs % n) used on the store too: the last program's tile wraps
    onto the first one's elements and stores the same values there."""
    offs = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)) % n
    tl.store(out + offs, tl.load(x + offs) * 2.0)


@triton.jit
def _overlapping_tiles(x, out, n, BLOCK: tl.constexpr):
    """Tiles that overlap by half and store different values there: the last writer wins."""
    offs = tl.program_id(0) * (BLOCK // 2) + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n, other=0.0) + tl.program_id(0), mask=offs < n)


@triton.jit
def _reads_neighbour(x, out, n, BLOCK: tl.constexpr):
    """Each program stores its tile, then reads the next program's tile of the same output."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs) + 1.0)
    nxt = (offs + BLOCK) % n
    tl.store(out + offs, tl.load(out + offs) + tl.load(out + nxt))


@triton.jit
def _own_tile_twice(x, out, n, BLOCK: tl.constexpr):
    """A program that reads back what it stored itself: one program, no race."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs))
    tl.store(out + offs, tl.load(out + offs) * 3.0)


@triton.jit
def _locked_accumulate(x, out, lock, BLOCK: tl.constexpr):
    """Tutorial 05's pattern: a spin lock taken with atomic_cas guards a plain read-modify-write."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    part = tl.sum(tl.load(x + offs))
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    tl.store(out, tl.load(out) + part)
    tl.atomic_xchg(lock, 0)


def _run(launch, *tensors):
    """The race record of ``launch()`` with the executor's counter installed; the tensors are
    the call's outputs and scratch (the launches' own tensors, as in a CPU grade)."""
    named = []   # no inputs named: every tensor is one the launches were given
    with Movement(named, confine=True, races=True) as m:
        launch()
    return m.race(output=tensors[0] if tensors else None)


def test_split_k_with_a_plain_load_and_store_races():
    x, out = torch.randn(64), torch.zeros(1)
    race = _run(lambda: _split_k_plain[(4,)](x, out, 64, BLOCK=16, SPLIT=4), out)
    assert torch.allclose(out, x.sum().reshape(1), atol=1e-5)   # right in the interpreter
    # Every program also stores out[0]: the store-store conflict is the one named first.
    assert race["kind"] == "store" and race["kernel"] == "_split_k_plain" and race["tensor"] == "out"
    assert race["program"] == [0, 0, 0] and race["other"] == [1, 0, 0]


def test_split_k_with_an_atomic_add_is_no_race():
    x, out = torch.randn(64), torch.zeros(1)
    assert _run(lambda: _split_k_atomic[(4,)](x, out, 64, BLOCK=16, SPLIT=4), out) == {}
    assert torch.allclose(out, x.sum().reshape(1), atol=1e-5)


def test_programs_storing_the_same_values_are_no_race():
    x, out = torch.randn(40), torch.full((40,), float("nan"))
    assert _run(lambda: _clamped_tiles[(3,)](x, out, 40, BLOCK=16), out) == {}
    assert torch.equal(out, x * 2)


def test_programs_storing_different_values_to_one_element_race():
    x, out = torch.randn(40), torch.zeros(40)
    race = _run(lambda: _overlapping_tiles[(4,)](x, out, 40, BLOCK=16), out)
    assert race["kind"] == "store" and race["program"] == [0, 0, 0] and race["other"] == [1, 0, 0]


def test_a_program_reading_another_programs_store_races():
    x, out = torch.randn(32), torch.zeros(32)
    race = _run(lambda: _reads_neighbour[(4,)](x, out, 32, BLOCK=8), out)
    assert race["kind"] == "load" and race["tensor"] == "out"


def test_a_program_reading_its_own_store_is_no_race():
    x, out = torch.randn(32), torch.zeros(32)
    assert _run(lambda: _own_tile_twice[(4,)](x, out, 32, BLOCK=8), out) == {}


def test_a_second_launch_reading_the_first_ones_output_is_no_race():
    """Two launches are ordered (a quantize pass, then the GEMM that reads its scratch)."""
    x, scratch, out = torch.randn(32), torch.zeros(32), torch.zeros(32)

    def both():
        _own_tile_twice[(4,)](x, scratch, 32, BLOCK=8)
        _clamped_tiles[(2,)](scratch, out, 32, BLOCK=16)

    assert _run(both, out) == {}


@triton.jit
def _last_arriver_reduces(x, ws, out, counter, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """The reference's split-K: each program stores its partial sum, counts itself in with an
    atomic, and the last to arrive loads every partial (the atomic's acq_rel orders them)."""
    pid = tl.program_id(0)
    tl.store(ws + pid, tl.sum(tl.load(x + pid * BLOCK + tl.arange(0, BLOCK))))
    if tl.atomic_add(counter, 1) == SPLIT - 1:
        tl.store(out, tl.sum(tl.load(ws + tl.arange(0, SPLIT))))
        tl.store(counter, 0)


def test_the_last_arriver_reducing_partials_is_not_judged():
    x, ws, out = torch.randn(32), torch.zeros(4), torch.zeros(1)
    counter = torch.zeros(1, dtype=torch.int32)
    assert _run(lambda: _last_arriver_reduces[(4,)](x, ws, out, counter, SPLIT=4, BLOCK=8), out) == {}
    assert torch.allclose(out, x.sum().reshape(1), atol=1e-5)


def test_a_launch_with_a_lock_is_not_judged():
    x, out, lock = torch.randn(32), torch.zeros(1), torch.zeros(1, dtype=torch.int32)
    assert _run(lambda: _locked_accumulate[(4,)](x, out, lock, BLOCK=8), out) == {}
    assert torch.allclose(out, x.sum().reshape(1), atol=1e-5)


@triton.jit
def _overlapping_dots(a, b, out, M, N: tl.constexpr, K: tl.constexpr, BLOCK_M: tl.constexpr):
    """The last row tile shifted back to end at M: it overlaps its neighbour and recomputes its
    rows with tl.dot at other places in the tile (numpy's matmul rounds a row by its place)."""
    start = tl.minimum(tl.program_id(0) * BLOCK_M, M - BLOCK_M)
    rows = start + tl.arange(0, BLOCK_M)
    cols, ks = tl.arange(0, N), tl.arange(0, K)
    x = tl.load(a + rows[:, None] * K + ks[None, :])
    w = tl.load(b + ks[:, None] * N + cols[None, :])
    tl.store(out + rows[:, None] * N + cols[None, :], tl.dot(x, w))


def test_programs_recomputing_a_tile_with_dots_are_no_race():
    """A false verdict found by writing honest kernels: the overlapping rows' results differ in
    their last bits between the two programs in the interpreter (numpy's matmul), never on a
    GPU's same instructions."""
    torch.manual_seed(0)
    a, b = torch.randn(40, 64), torch.randn(64, 32)
    out = torch.full((40, 32), float("nan"))
    assert _run(lambda: _overlapping_dots[(2,)](a, b, out, 40, N=32, K=64, BLOCK_M=32), out) == {}
    assert torch.allclose(out, a @ b, atol=1e-4, rtol=1e-4)


@triton.jit
def _wide_reads_narrow(ws, out, BLOCK: tl.constexpr):
    """Program 1 reads, as int64, the fp32 slots program 0 writes (red team round 8)."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    if pid == 0:
        tl.store(ws + 2 * offs + 1, offs.to(tl.float32) + 1.0)
    else:
        wide = tl.load(ws.to(tl.pointer_type(tl.int64)) + offs)
        tl.store(out + offs, (wide >> 32).to(tl.int32))


def test_views_of_other_element_sizes_meet_where_their_bytes_do():
    ws, out = torch.zeros(32), torch.zeros(16, dtype=torch.int32)
    race = _run(lambda: _wide_reads_narrow[(2,)](ws, out, BLOCK=16), out)
    assert race["kind"] == "load" and race["program"] == [0, 0, 0] and race["other"] == [1, 0, 0]


def test_a_buffer_of_any_size_is_watched():
    """Red team round 8 put round 7's split-K in a view of a 20 MiB buffer, past the old size limit."""
    x, big = torch.randn(64), torch.zeros(5 << 20)
    out = big[-1:]
    race = _run(lambda: _split_k_plain[(4,)](x, out, 64, BLOCK=16, SPLIT=4), big)
    assert race["kind"] == "store" and race["kernel"] == "_split_k_plain"


def test_the_inputs_are_not_watched():
    """Only the launches' own tensors are: a named input (the call's) that two programs read is
    read-only, and none of its bytes is recorded."""
    x, out = torch.randn(64), torch.zeros(64)
    named = [("0", *tensor_range(x))]
    with Movement(named, confine=True, races=True) as m:
        _clamped_tiles[(4,)](x, out, 64, BLOCK=16)
    assert m.race(output=out) == {}


def test_the_first_race_of_any_launch_is_kept():
    x, out1, out2 = torch.randn(40), torch.zeros(40), torch.zeros(1)

    def both():
        _overlapping_tiles[(4,)](x, out1, 40, BLOCK=16)
        _split_k_plain[(4,)](x, out2, 40, BLOCK=16, SPLIT=4)

    race = _run(both, out1)
    assert race["kernel"] == "_overlapping_tiles" and race["kind"] == "store"


def test_a_bfloat16_store_is_compared_by_value():
    """The interpreter holds bfloat16 as its bits in uint16: one unit of the last place is the same
    value (as for fp16 and fp32), a different value is a change; the bits alone would call the
    first one a change."""
    bits = torch.tensor([1.0, 100.0, -3.0], dtype=torch.bfloat16).view(torch.int16).numpy().view("uint16")
    last_bit = bits.copy()
    last_bit[0] += 1
    other = bits.copy()
    other[2] ^= 0x4000
    assert not _changed(bits, last_bit, bf16=True).any()
    assert _changed(bits, last_bit, bf16=False)[0]   # what the record did before
    assert _changed(bits, other, bf16=True).tolist() == [False, False, True]


def test_programs_storing_different_bfloat16_values_race():
    x, out = torch.randn(40), torch.zeros(40, dtype=torch.bfloat16)
    race = _run(lambda: _overlapping_tiles[(4,)](x, out, 40, BLOCK=16), out)
    assert race["kind"] == "store" and race["program"] == [0, 0, 0] and race["other"] == [1, 0, 0]


def test_a_float_store_is_compared_element_by_element():
    """Two units of an element's own last place are the same value; more are a change, whatever
    else the tile holds: red team round 9 hid a race behind a masked-off lane of 1e30, when the
    tolerance was a share of the tile's largest value."""
    old = np.array([1.0, 100.0, -3.0, 0.0], dtype=np.float16)
    two, four = old.copy(), old.copy()
    two[1] += np.float16(0.125)      # 2 units at 100 (fp16 keeps 11 bits: a unit there is 1/16)
    four[1] += np.float16(0.25)
    assert not _changed(old, two).any()
    assert _changed(old, four).tolist() == [False, True, False, False]
    partial = np.array([0.0, 0.0], dtype=np.float32)
    assert _changed(partial, np.array([1.5, 1e30], dtype=np.float32)).tolist() == [True, True]
    assert not _changed(np.array([0.0], np.float32), np.array([-0.0], np.float32)).any()


@triton.jit
def _split_k_beside_a_huge_lane(x, ws, K, BLOCK: tl.constexpr, SPLIT: tl.constexpr):
    """Round 7's split-K with a second, masked-off row of 1e30 in the stored tile (red team round 9)."""
    pid = tl.program_id(0)
    offs = pid * (K // SPLIT) + tl.arange(0, BLOCK)
    part = tl.sum(tl.load(x + offs, mask=offs < (pid + 1) * (K // SPLIT), other=0.0))
    row = tl.arange(0, 2)[:, None]
    value = tl.where(row == 0, tl.load(ws + tl.zeros((2, 1), tl.int32)) + part, 1e30)
    tl.store(ws + row, value, mask=row == 0)


def test_a_huge_value_beside_a_race_does_not_hide_it():
    x, ws = torch.randn(64), torch.zeros(2)
    race = _run(lambda: _split_k_beside_a_huge_lane[(4,)](x, ws, 64, BLOCK=16, SPLIT=4), ws)
    assert race["kind"] == "store" and race["kernel"] == "_split_k_beside_a_huge_lane"


@triton.jit
def _quantize_shared_rows_then_read(x, scratch, out, n, BLOCK: tl.constexpr):
    """Every program writes the same whole scratch (the rows all of them need), then reads all of it
    back: each reads its own store or an equal one, in any order (red team round 9's honest kernel)."""
    offs = tl.arange(0, BLOCK)
    tl.store(scratch + offs, tl.load(x + offs) * 2.0, mask=offs < n)
    tl.debug_barrier()
    total = tl.sum(tl.load(scratch + offs, mask=offs < n, other=0.0))
    tl.store(out + tl.program_id(0), total)


@triton.jit
def _read_then_store_the_same(x, scratch, out, n, BLOCK: tl.constexpr):
    """Program 0 writes the scratch; the others read it first and store the same values after:
    their read can come before program 0's store on a GPU."""
    offs = tl.arange(0, BLOCK)
    pid = tl.program_id(0)
    if pid == 0:
        tl.store(scratch + offs, tl.load(x + offs) * 2.0, mask=offs < n)
    else:
        tl.store(out + pid, tl.sum(tl.load(scratch + offs, mask=offs < n, other=0.0)))
        tl.store(scratch + offs, tl.load(x + offs) * 2.0, mask=offs < n)


def test_programs_reading_back_what_they_all_stored_are_no_race():
    x, scratch, out = torch.randn(16), torch.zeros(16), torch.zeros(4)
    assert _run(lambda: _quantize_shared_rows_then_read[(4,)](x, scratch, out, 16, BLOCK=16), out) == {}
    assert torch.allclose(out, (2 * x).sum().expand(4))


def test_a_load_before_the_programs_own_store_of_the_same_value_races():
    x, scratch, out = torch.randn(16), torch.zeros(16), torch.zeros(4)
    race = _run(lambda: _read_then_store_the_same[(4,)](x, scratch, out, 16, BLOCK=16), out)
    assert race["kind"] == "load" and race["tensor"] == "scratch" and race["program"] == [0, 0, 0]


@triton.jit
def _through_an_input(x, out, n, BLOCK: tl.constexpr):
    """Programs pass a value through the call's input x and put it back (red team round 9)."""
    offs = tl.arange(0, BLOCK)
    saved = tl.load(x + offs)
    tl.store(x + offs, saved + 1.0)
    tl.store(out + tl.program_id(0) * BLOCK + offs, tl.load(x + offs))
    tl.store(x + offs, saved)


def test_a_store_into_the_calls_input_is_found():
    x, out = torch.randn(16), torch.zeros(32)
    named = [("x", *tensor_range(x))]
    with Movement(named, confine=True, races=True) as m:
        _through_an_input[(2,)](x, out, 16, BLOCK=16)
    race = m.race(output=out)
    assert race["kind"] == "input" and race["tensor"] == "x" and race["kernel"] == "_through_an_input"


@triton.jit
def _split_k_beside_a_dead_atomic(x, out, counter, K, BLOCK: tl.constexpr, SPLIT: tl.constexpr):
    """Round 7's split-K plus an atomic whose every lane is masked off (red team round 9)."""
    pid = tl.program_id(0)
    offs = pid * (K // SPLIT) + tl.arange(0, BLOCK)
    part = tl.sum(tl.load(x + offs, mask=offs < (pid + 1) * (K // SPLIT), other=0.0))
    tl.atomic_add(counter + tl.arange(0, 2), 1, mask=tl.arange(0, 2) < 0)
    tl.store(out, tl.load(out) + part)


def test_an_atomic_that_touches_nothing_orders_nothing():
    x, out, counter = torch.randn(64), torch.zeros(1), torch.zeros(2, dtype=torch.int32)
    race = _run(lambda: _split_k_beside_a_dead_atomic[(4,)](x, out, counter, 64, BLOCK=16, SPLIT=4), out)
    assert race["kind"] == "store" and race["kernel"] == "_split_k_beside_a_dead_atomic"
