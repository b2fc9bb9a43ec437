"""The launch capture (grader/worker/capture.py, grader/harness/capture.py): a wrapper
called at a GPU shape on uninitialised inputs launches nothing, every launch is
recorded, and sampled programs are counted exactly, confined to the launch's
tensors, stopped when they run too long; the harness describes GPU-shape inputs
without allocating them and rejects a malformed reply."""

import time
import warnings

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from grader.harness import capture as hcap
from grader.harness.session import MAX_CAPTURE_LAUNCHES, WorkerGone, clean_capture
from grader.worker import capture as cap
from tests.helpers import HAS_CUDA

pytestmark = pytest.mark.skipif(HAS_CUDA, reason="the capture runs in the CPU interpreter")
FILES = {__file__}


@triton.jit
def tile_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr):
    """y[m-tile, n-tile] = x[m-tile, :] @ w[:, n-tile], x and w row-major fp16."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(x_ptr + offs_m[:, None] * K + (k0 + offs_k)[None, :])
        b = tl.load(w_ptr + (k0 + offs_k)[:, None] * N + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))


def matmul(x, w, BLOCK=32):
    M, K = x.shape
    N = w.shape[1]
    y = torch.full((M, N), 7.0, dtype=torch.float16)
    tile_kernel[(M // BLOCK, N // BLOCK)](x, w, y, M, N, K, BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=BLOCK)
    return y


@triton.jit
def gather_kernel(x_ptr, idx_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    i = tl.load(idx_ptr + offs, mask=offs < n, other=0)
    tl.store(y_ptr + offs, tl.load(x_ptr + i, mask=offs < n, other=0.0), mask=offs < n)


@triton.jit
def spin_kernel(flag_ptr, y_ptr):
    while tl.load(flag_ptr) == 0:   # waits for a program that never comes
        pass
    tl.store(y_ptr, 1.0)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4),
                          triton.Config({"BLOCK": 256}, num_warps=8)], key=["n"])
@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def _captured(fn, *args, probe=True, names=("x", "w")):
    with cap.Capture(probe=probe, files=FILES) as c, warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        y = fn(*args)
    return y, c.report(cap.named_ranges(list(args), list(names)), y)


def test_nothing_runs_unless_probed_and_sampled_programs_are_counted_exactly():
    M, N, K, B = 256, 128, 96, 32
    x, w = torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16)
    y, rep = _captured(matmul, x, w, probe=False)
    assert bool((y == 7).all()), "an intercepted launch must not run"
    assert rep["launches"][0]["grid"] == [M // B, N // B, 1] and "counts" not in rep["launches"][0]
    y, rep = _captured(matmul, x, w)
    (launch,) = rep["launches"]
    assert launch["grid"] == [M // B, N // B, 1] and launch["programs"] == (M // B) * (N // B)
    names = {k: v["name"] for k, v in launch["tensors"].items()}
    assert names == {"x_ptr": "x", "w_ptr": "w", "y_ptr": "output"}
    counts = launch["counts"]
    steps = K // B
    assert launch["steps"] == steps and launch["sampled"] >= 3 and launch["complete"]
    assert counts["x_ptr"]["lanes_read"] == B * K * 2 == counts["x_ptr"]["sectors_read"]   # one row tile of x
    assert counts["w_ptr"]["lanes_read"] == K * B * 2 and counts["w_ptr"]["rows_read"] == K
    assert counts["y_ptr"]["sectors_written"] == B * B * 2 and counts["x_ptr"]["rows_read"] == B
    assert launch["dot_flops"] == {"fp16": 2 * B * B * K} and launch["dots"] == steps
    # Launch order is axis 0 fastest: the next program shares w's column tile, a row of programs later x's rows.
    assert counts["w_ptr"]["shared_at"] == 1 and counts["x_ptr"]["shared_at"] == M // B
    assert launch.get("ran") is True   # cheap enough to run whole (uncounted), for launches that follow
    assert not bool((y == 7).any())    # it did: every output was stored (a dot counted, not computed, gives 0)


def test_a_launch_too_big_to_run_whole_is_only_sampled():
    x, w = torch.empty(4096, 4096, dtype=torch.float16), torch.empty(4096, 512, dtype=torch.float16)
    y, rep = _captured(matmul, x, w)
    launch = rep["launches"][0]
    assert launch["programs"] == 128 * 16 and launch["sampled"] >= 3 and not launch.get("ran")
    assert int((y != 7).sum()) <= (launch["sampled"] + launch["signatures"]) * 32 * 32   # only the sampled ones stored


def test_a_gather_through_uninitialised_indices_is_confined():
    n = 4096
    x = torch.empty(n)
    idx = torch.full((n,), 2 ** 40, dtype=torch.int64)   # what uninitialised memory may hold: far outside x
    y = torch.zeros(n)

    def wrapper(x, idx):
        gather_kernel[(n // 256,)](x, idx, y, n, BLOCK=256)
        return y

    _, rep = _captured(wrapper, x, idx, names=("x", "idx"))   # without confinement: a read of address 2**42
    launch = rep["launches"][0]
    assert launch["outside"] > 0 and launch["complete"]
    assert "x_ptr" not in launch["counts"]   # the stray lanes were masked off, not counted against x


def test_a_program_that_waits_forever_is_stopped(monkeypatch):
    monkeypatch.setattr(cap, "PROGRAM_LIMIT_S", 0.5)
    flag, y = torch.zeros(1, dtype=torch.int32), torch.zeros(1)

    def wrapper(flag):
        spin_kernel[(4,)](flag, y)
        return y

    t0 = time.monotonic()
    _, rep = _captured(wrapper, flag, names=("flag",))
    assert time.monotonic() - t0 < 5
    launch = rep["launches"][0]
    assert launch["sampled"] == 1 and launch["complete"] is False and not launch.get("ran")


def test_every_autotuned_config_is_recorded_and_none_benchmarked():
    """Each config is one launch named by it, in every call: a second call with the same
    key (another test's shape, say) tries every config again, not the first call's pick."""
    x = torch.empty(10000)
    y = torch.full((10000,), 3.0)

    def wrapper(x):
        scale_kernel[lambda meta: (triton.cdiv(10000, meta["BLOCK"]),)](x, y, 10000)
        return y

    for _ in range(2):
        _, rep = _captured(wrapper, x, names=("x",), probe=False)
        launches = rep["launches"]
        chosen = [i for i, launch in enumerate(launches) if not launch.get("trial")]
        assert len(launches) == 4 and len(chosen) == 1
        assert sorted(launches[chosen[0]]["alternatives"]) == [0, 1, 2]
        assert sorted(launch["grid"][0] for launch in launches[:3]) == [40, 79, 157]
        assert [launch["config"] for launch in launches[:3]] == [
            "BLOCK=64, num_warps=2, num_stages=3", "BLOCK=128, num_warps=4, num_stages=3",
            "BLOCK=256, num_warps=8, num_stages=3"]
    assert bool((y == 3).all())
    assert clean_capture({"cases": {"t": rep}})["cases"]["t"]["launches"][0]["config"] == launches[0]["config"]


def test_describe_builds_gpu_shapes_without_their_memory():
    (x, w, sx, sw) = hcap.describe("w8a8", (4096, 4096, 4096), {}, 1)
    assert x["empty"] == {"shape": [4096, 4096], "stride": [4096, 1], "dtype": "float16"}
    assert w["empty"] == {"shape": [4096, 4096], "stride": [1, 4096], "dtype": "int8"}   # the transposed view
    assert sx["empty"]["shape"] == [4096, 1] and sw["empty"]["dtype"] == "float32"
    x, bsr = hcap.describe("dds", (65536, 1024, 1024), {"density": 0.05, "index_dtype": "int32"}, 3)
    assert x["empty"]["shape"] == [65536, 1024]
    crow, col = bsr["bsr"]["crow"], bsr["bsr"]["col"]
    assert len(crow) == 33 and crow[-1] == len(col) == round(0.05 * 32 * 32) and bsr["bsr"]["index_dtype"] == "int32"
    built = cap.build(bsr)
    assert built.layout == torch.sparse_bsr and built.values().shape == (len(col), 32, 32)
    assert torch.equal(built.crow_indices(), torch.tensor(crow, dtype=torch.int32))


@pytest.mark.parametrize("bad", [
    {"cases": {"t": {"launches": [{"kernel": "k", "grid": [1, 1, -1]}]}}},
    {"cases": {"t": {"launches": [{"kernel": "k", "grid": [1, 1, 1], "steps": float("nan")}]}}},
    {"cases": {"t": {"launches": [{"kernel": "k", "grid": [1, 1, 1], "counts": {"a": {"sectors_read": "1e9"}}}]}}},
    {"cases": {"t": {"launches": [{"kernel": "k", "grid": [1, 1, 1], "tensors": {"a": [1]}}]}}},
    {"cases": [1, 2]},
])
def test_a_malformed_capture_reply_ends_the_session(bad):
    with pytest.raises(WorkerGone, match="malformed launch capture"):
        clean_capture(bad)


def test_a_capture_reply_is_bounded():
    launch = {"kernel": "k" * 500, "grid": [1, 1, 1], "alternatives": list(range(100)),
              "tensors": {"a": {"name": "x" * 500, "bytes": 10}}, "probe_error": "e" * 5000, "config": "c" * 500}
    clean = clean_capture({"cases": {"t": {"launches": [launch] * 50, "errors": ["e"] * 50}}})
    case = clean["cases"]["t"]
    assert len(case["launches"]) == MAX_CAPTURE_LAUNCHES and len(case["errors"]) == 5
    first = case["launches"][0]
    assert len(first["kernel"]) == 100 and len(first["alternatives"]) == MAX_CAPTURE_LAUNCHES
    assert len(first["tensors"]["a"]["name"]) == 60 and len(first["probe_error"]) == 300
    assert len(first["config"]) == 200


@triton.jit
def count_kernel(cnt_ptr, y_ptr):
    old = tl.atomic_add(cnt_ptr, 1)
    tl.store(y_ptr + tl.program_id(0), old)


def test_counted_programs_leave_state_kept_between_calls_alone(monkeypatch):
    """A module's persistent counter (a split-K tile counter, say) is read by a counted
    program's atomics, never written: later calls must find it as the last real one left it."""
    monkeypatch.setattr(cap, "FULL_RUN_S", 0.0)   # sampled programs only
    counter = torch.zeros(1, dtype=torch.int32)   # kept by the "module" across calls
    y = torch.full((64,), -1, dtype=torch.int32)

    def wrapper(x):
        count_kernel[(64,)](counter, y)
        return y

    _, rep = _captured(wrapper, torch.empty(1), names=("x",))
    assert rep["launches"][0]["sampled"] >= 3 and int(counter) == 0
    assert rep["launches"][0]["counts"]["cnt_ptr"]["lanes_written"] > 0   # counted as a write all the same


# ----------------------------------------------------------------------------- every construct counted
# The same tile product as tile_kernel, written with each construct a kernel may use: each must be
# counted exactly as the plain kernel is (bytes, rows, dots, sharing), with its loop trips as the
# compiled loop runs them (the issue 41 report: a W8A8 body moved into a helper counted nothing).

@triton.jit
def _tile_at(p, rows, cols, stride):
    return tl.load(p + rows[:, None] * stride + cols[None, :])


@triton.jit
def _k_loop(x_ptr, w_ptr, offs_m, offs_n, N, K, BLOCK_K: tl.constexpr):
    """A loop in a helper, calling a nested helper from two places of its body."""
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((offs_m.shape[0], offs_n.shape[0]), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = _tile_at(x_ptr, offs_m, k0 + offs_k, K)
        b = _tile_at(w_ptr, k0 + offs_k, offs_n, N)
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def helpers_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _k_loop(x_ptr, w_ptr, offs_m, offs_n, N, K, BLOCK_K)
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))


@triton.jit
def static_range_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    """Two K tiles a trip, unrolled by tl.static_range: the compiled loop runs K / (2 BLOCK_K) trips."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, 2 * BLOCK_K):
        for j in tl.static_range(2):
            k = k0 + j * BLOCK_K + offs_k
            a = tl.load(x_ptr + offs_m[:, None] * K + k[None, :])
            b = tl.load(w_ptr + k[:, None] * N + offs_n[None, :])
            acc = tl.dot(a, b, acc)
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))


@triton.jit
def blockptr_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    xb = tl.make_block_ptr(x_ptr, (M, K), (K, 1), (pid_m * BLOCK_M, 0), (BLOCK_M, BLOCK_K), (1, 0))
    wb = tl.make_block_ptr(w_ptr, (K, N), (N, 1), (0, pid_n * BLOCK_N), (BLOCK_K, BLOCK_N), (1, 0))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        acc = tl.dot(tl.load(xb, boundary_check=(0, 1)), tl.load(wb, boundary_check=(0, 1)), acc)
        xb = tl.advance(xb, (0, BLOCK_K))
        wb = tl.advance(wb, (BLOCK_K, 0))
    yb = tl.make_block_ptr(y_ptr, (M, N), (N, 1), (pid_m * BLOCK_M, pid_n * BLOCK_N), (BLOCK_M, BLOCK_N), (1, 0))
    tl.store(yb, acc.to(tl.float16), boundary_check=(0, 1))


@triton.jit
def host_desc_kernel(x_desc, w_desc, y_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        acc = tl.dot(x_desc.load([pid_m * BLOCK_M, k0]), w_desc.load([k0, pid_n * BLOCK_N]), acc)
    y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


@triton.jit
def device_desc_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        acc = tl.dot(x_desc.load([pid_m * BLOCK_M, k0]), w_desc.load([k0, pid_n * BLOCK_N]), acc)
    y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


def _construct_matmul(kernel):
    def call(x, w, BLOCK=32):
        from triton.tools.tensor_descriptor import TensorDescriptor

        M, K = x.shape
        N = w.shape[1]
        y = torch.full((M, N), 7.0, dtype=torch.float16)
        args = (x, w, y)
        if kernel is host_desc_kernel:
            args = (TensorDescriptor.from_tensor(x, [BLOCK, BLOCK]), TensorDescriptor.from_tensor(w, [BLOCK, BLOCK]),
                    TensorDescriptor.from_tensor(y, [BLOCK, BLOCK]))
        kernel[(M // BLOCK, N // BLOCK)](*args, M, N, K, BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=BLOCK)
        return y
    return call


def _by_name(launch: dict) -> dict:
    """A launch's counts keyed by the call's tensor names (x, w, output), not the kernel's parameters."""
    return {launch["tensors"][k]["name"]: v for k, v in launch["counts"].items()}


@pytest.mark.parametrize("kernel", [helpers_kernel, static_range_kernel, blockptr_kernel, host_desc_kernel,
                                    device_desc_kernel], ids=lambda k: k.__name__)
def test_every_construct_is_counted_as_the_plain_kernel_is(kernel):
    M, N, K, B = 256, 128, 256, 32
    x, w = torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16)
    _, plain = _captured(matmul, x, w)
    _, rep = _captured(_construct_matmul(kernel), x, w)
    (want,), (got,) = plain["launches"], rep["launches"]
    assert "probe_error" not in got and got["complete"] and got["sampled"] == want["sampled"]
    assert _by_name(got) == _by_name(want)
    assert got["dot_flops"] == want["dot_flops"] == {"fp16": 2 * B * B * K} and got["dots"] == K // B
    unrolled = 2 if kernel is static_range_kernel else 1   # the compiled loop's trips: K / (unrolled * B)
    assert want["steps"] == K // B and got["steps"] == K // (unrolled * B) and got["outer_steps"] == 0


# ----------------------------------------------------------------------------- sectors and lines
# What a program's access moves, as the GPU moves it: whole 32-byte sectors, under 128-byte lines'
# tags (the issue 41 report: a 64-byte run of each row was priced as a whole 128-byte line).

@triton.jit
def strip_kernel(x_ptr, y_ptr, R, C, FIRST, STEP, BLOCK_R: tl.constexpr, WIDTH: tl.constexpr):
    """y[:, strip] = x[:, strip]: the strip of WIDTH columns from FIRST + program_id(0) * STEP."""
    rows = tl.arange(0, BLOCK_R)
    cols = FIRST + tl.program_id(0) * STEP + tl.arange(0, WIDTH)
    offs = rows[:, None] * C + cols[None, :]
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


def aligned(shape, dtype=torch.float16, to=128) -> torch.Tensor:
    """An uninitialised tensor whose first byte starts a 128-byte line (a GPU allocation's does)."""
    n = int(np.prod(shape))
    size = torch.tensor([], dtype=dtype).element_size()
    buf = torch.empty(n + to // size, dtype=dtype)
    skip = (-buf.data_ptr() % to) // size
    return buf[skip:skip + n].view(shape)


def strips(x, width, first=0, step=None):
    R, C = x.shape
    step = step or width
    y = aligned((R, C))
    strip_kernel[((C - first - width) // step + 1,)](x, y, R, C, first, step, BLOCK_R=R, WIDTH=width)
    return y


@pytest.mark.parametrize("first, sectors, lines", [(0, 2, 1), (8, 3, 1), (56, 3, 2)],
                         ids=["aligned", "inside-a-line", "across-lines"])
def test_an_access_counts_the_sectors_and_lines_it_falls_in(first, sectors, lines):
    """A program's strip of 32 fp16 columns is 64 bytes of each row: two sectors of one
    line from a line's start, three sectors 16 bytes in, three over two lines 112 bytes in
    (each program's strip a line further along the row)."""
    R, C = 16, 256
    _, rep = _captured(lambda x: strips(x, 32, first, step=64), aligned((R, C)), names=("x",))
    counts = _by_name(rep["launches"][0])
    for name, how in (("x", "read"), ("output", "written")):
        assert counts[name][f"lanes_{how}"] == R * 64 and counts[name][f"rows_{how}"] == R
        assert counts[name][f"sectors_{how}"] == R * sectors * 32 and counts[name][f"lines_{how}"] == R * lines * 128
