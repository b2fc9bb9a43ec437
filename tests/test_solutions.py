"""The reference kernels against exact PyTorch references, on small ragged shapes
(the CPU interpreter) or full-size ones (GPU), with fresh random inputs."""

import random

import pytest
import torch

from grader.compare import check_output
from solutions import dds_mm, w4a16_mm, w8a8_mm
from solutions import dds as dds_solution
from solutions import w4a16 as w4a16_solution
from solutions import w8a8 as w8a8_solution
from solutions.layers import unpack_int4
from tests.helpers import DEVICE, dds_reference, needs_gpu, problem, w4a16_reference, w8a8_reference

SEED = random.randrange(2**31)  # fresh inputs every run; printed on failure


def _check(task, out, ref, shape):
    c = check_output(out, ref, task, shape[:2])
    assert c.passed, f"seed {SEED}: {c.message}"


@pytest.mark.parametrize("shape", [(1, 32, 8), (1, 96, 200), (33, 64, 96), (130, 48, 264), (7, 256, 1000)])
def test_w8a8_bit_exact(shape):
    args, _ = problem("w8a8", shape, SEED)
    out = w8a8_mm(*args)
    assert torch.equal(out, w8a8_reference(*args)), f"seed {SEED}: W8A8 is not bit-exact"


@pytest.mark.parametrize("M", [5, 17])  # 1-row quantize tiles (M <= 16), and 4-row tiles + split-K
@pytest.mark.parametrize("options", [{"ties": True}, {"zero_rows": 3}])
def test_w8a8_ties_and_zero_rows(options, M):
    args, _ = problem("w8a8", (M, 64, 64), SEED, **options)
    out = w8a8_mm(*args)
    assert torch.equal(out, w8a8_reference(*args))
    if "zero_rows" in options:
        zero = (args[0] == 0).all(dim=1)
        assert zero.sum() == 3 and (out[zero] == 0).all() and torch.isfinite(out).all()


@pytest.mark.parametrize("shape", [(1, 64, 8), (1, 96, 256), (33, 64, 136), (130, 40, 128), (16, 160, 384)])
def test_w4a16_per_channel(shape):
    args, _ = problem("w4a16", shape, SEED)
    _check("w4a16", w4a16_mm(*args), w4a16_reference(*args), shape)


@pytest.mark.parametrize("M", [1, 3, 9, 70])  # decode (split-K), the wider-tile path, TMA loads
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_w4a16_group_wise(group_size, M):
    shape = (M, 64, 256)
    args, _ = problem("w4a16", shape, SEED, group_size=group_size)
    assert args[2].shape == (256 // group_size, 64)
    _check("w4a16", w4a16_mm(*args), w4a16_reference(*args), shape)


@pytest.mark.parametrize("M", [3, 70])  # split-K decode; TMA tiles of 64 along K
def test_w4a16_group_wise_ragged_k(M):
    # K = 160 is no multiple of the K tile: the last tile's rows (and their group scales) lie past K.
    shape = (M, 48, 160)
    args, _ = problem("w4a16", shape, SEED, group_size=32)
    _check("w4a16", w4a16_mm(*args), w4a16_reference(*args), shape)


def test_w4a16_fused_up_to_dequant_min_m():
    # Just below DEQUANT_MIN_M the unpack stays in the GEMM (128 x 128 tiles, TMA loads).
    shape = (w4a16_solution.DEQUANT_MIN_M - 9, 72, 136)
    cfg = w4a16_solution._config(*shape)
    assert not cfg.get("DEQUANTIZED") and cfg.get("TMA")
    args, _ = problem("w4a16", shape, SEED)
    _check("w4a16", w4a16_mm(*args), w4a16_reference(*args), shape)


@pytest.mark.parametrize("group_size", [None, 32, 128])
def test_w4a16_large_m_dequantizes_once(group_size):
    # From DEQUANT_MIN_M rows the weight is dequantized by a pre-pass, then an fp16 GEMM runs.
    shape = (w4a16_solution.DEQUANT_MIN_M + 9, 72, 256 if group_size else 136)
    args, _ = problem("w4a16", shape, SEED, group_size=group_size)
    assert w4a16_solution._config(*shape).get("DEQUANTIZED")
    _check("w4a16", w4a16_mm(*args), w4a16_reference(*args), shape)
    qweight, scales = args[1], args[2]
    q = unpack_int4(qweight).to(torch.float16)  # [N, K]
    expected = (q * scales.repeat_interleave(shape[2] // scales.shape[0], dim=0).t()).t()
    assert torch.equal(w4a16_solution._dequantize(qweight, scales, shape[2] // scales.shape[0]), expected)


@pytest.mark.parametrize("layout", ["aligned", "odd_n", "offset_x"])
def test_w4a16_tma_and_pointer_loads(layout):
    # 64 < M < DEQUANT_MIN_M reads tiles through TMA descriptors where _tma_ready
    # allows it, and falls back to pointer loads for a row stride or base address
    # that is not 16-byte aligned.
    shape = (70, 42 if layout == "odd_n" else 48, 136)
    (x, qweight, scales), _ = problem("w4a16", shape, SEED)
    if layout == "offset_x":  # a contiguous view 6 bytes into its storage
        x = torch.cat([x.new_zeros(3), x.flatten()])[3:].view(x.shape)
    assert w4a16_solution._config(*shape).get("TMA")
    if layout != "aligned":
        assert not w4a16_solution._tma_ready(x, qweight)
    elif DEVICE == "cpu" or torch.cuda.get_device_capability()[0] >= 9:
        assert w4a16_solution._tma_ready(x, qweight)
    _check("w4a16", w4a16_mm(x, qweight, scales), w4a16_reference(x, qweight, scales), shape)


def test_w4a16_wide_decode_tiles():
    # M <= 16 with N > 8192: 128-wide tiles, split-K 4 (some splits empty here, the last tile ragged).
    shape = (3, 8200, 96)
    assert w4a16_solution._config(*shape)["BLOCK_N"] == 128
    args, _ = problem("w4a16", shape, SEED)
    _check("w4a16", w4a16_mm(*args), w4a16_reference(*args), shape)


def test_w4a16_negative_nibbles_are_signed():
    # Every weight -1 (nibble 0xF): an unsigned unpack would give +15.
    M, N, K = 3, 32, 64
    x = torch.ones(M, K, dtype=torch.float16, device=DEVICE)
    qweight = torch.full((K // 8, N), -1, dtype=torch.int32, device=DEVICE)  # 0xFFFFFFFF
    scales = torch.ones(1, N, dtype=torch.float16, device=DEVICE)
    out = w4a16_mm(x, qweight, scales)
    assert (out == -K).all(), f"expected every output = {-K}, got {out.unique().tolist()}"


@pytest.mark.parametrize("shape,options", [
    ((33, 96, 64), dict(density=0.25)),
    ((1, 128, 256), dict(density=0.05)),
    ((40, 96, 64), dict(density=1.0)),
    ((17, 64, 96), dict(density=0.0)),
    ((17, 128, 128), dict(density=0.5, empty_rows=2)),
    ((10, 64, 160), dict(density=0.3, index_dtype="int32")),
    ((70, 32, 32), dict(density=1.0)),
    # M >= 4096 with dense weights: G block rows per program over their union of columns
    ((4100, 160, 96), dict(density=1.0)),                                   # 4 + a partial group of 1
    ((4097, 96, 320), dict(density=0.8, empty_rows=1, index_dtype="int32")),  # pairs, ragged union
])
def test_dds(shape, options):
    args, _ = problem("dds", shape, SEED, **options)
    if shape[0] >= 4096:
        assert "G" in dds_solution._config(*shape, args[1].values().shape[0]), "expected the grouped path"
    out = dds_mm(*args)
    _check("dds", out, dds_reference(*args), shape)
    if options["density"] == 0.0:
        assert (out == 0).all()


@pytest.mark.parametrize("G,steps", [(1, 4), (2, 2), (8, 1)])
def test_dds_grouped_kernel_any_group_width(G, steps):
    # The densify + union-walk path with every group width the config may pick,
    # on a weight whose rows and union lists are ragged (odd block rows, empty rows).
    shape = (70, 32 * 11, 32 * 9)
    args, _ = problem("dds", shape, SEED, density=0.4, empty_rows=2)
    cfg = dict(G=G, BLOCK_M=32, STEPS=steps, num_warps=4, num_stages=2)
    _check("dds", dds_solution._launch(*args, cfg), dds_reference(*args), shape)


BAD_INPUTS = [
    (w8a8_mm, lambda a: (a[0].float(),) + a[1:], "x: expected dtype torch.float16"),
    (w8a8_mm, lambda a: (a[0][0],) + a[1:], "x: expected a 2-D tensor"),
    (w8a8_mm, lambda a: (a[0][:, :-1],) + a[1:], "qweight_t: expected \\[K, N\\]"),
    (w8a8_mm, lambda a: a[:2] + (a[2].t(),) + a[3:], "input_scale: expected shape"),
    (w8a8_mm, lambda a: (a[0], a[1].to(torch.int32)) + a[2:], "qweight_t: expected dtype torch.int8"),
]


@pytest.mark.parametrize("fn,mutate,message", BAD_INPUTS)
def test_w8a8_bad_inputs(fn, mutate, message):
    args, _ = problem("w8a8", (4, 32, 64), SEED)
    with pytest.raises(ValueError, match=message):
        fn(*mutate(args))


def test_w4a16_bad_inputs():
    args, _ = problem("w4a16", (4, 32, 64), SEED)
    x, qw, s = args
    with pytest.raises(ValueError, match="multiple of 8"):
        w4a16_mm(x[:, :60].contiguous(), qw, s)
    with pytest.raises(ValueError, match="qweight: expected \\[K // 8, N\\]"):
        w4a16_mm(x, qw[:-1], s)
    with pytest.raises(ValueError, match="scales: expected \\[G, N\\]"):
        w4a16_mm(x, qw, s[:, :-1])
    with pytest.raises(ValueError, match="qweight: expected dtype torch.int32"):
        w4a16_mm(x, qw.to(torch.int64), s)


def test_dds_bad_inputs():
    args, extras = problem("dds", (4, 64, 64), SEED, density=0.5)
    x, bsr = args
    with pytest.raises(ValueError, match="expected a torch.sparse_bsr tensor"):
        dds_mm(x, extras["weight"])
    with pytest.raises(ValueError, match="blocksize \\(32, 32\\)"):
        dds_mm(x, extras["weight"].to_sparse_bsr((16, 16)))
    with pytest.raises(ValueError, match="K = 32"):
        dds_mm(x[:, :32].contiguous(), bsr)
    with pytest.raises(ValueError, match="float16"):
        dds_mm(x.float(), bsr)


# ------------------------------------------------------------------ GPU, full size
@needs_gpu
@pytest.mark.parametrize("M", [1, 16, 256, 1000, 4096])
def test_gpu_full_size_quantized(M):
    args, _ = problem("w8a8", (M, 4096, 4096), SEED)
    assert torch.equal(w8a8_mm(*args), w8a8_reference(*args))
    args, _ = problem("w4a16", (M, 4096, 4096), SEED)
    _check("w4a16", w4a16_mm(*args), w4a16_reference(*args), (M, 4096, 4096))
    args, _ = problem("w4a16", (M, 4096, 4096), SEED, group_size=128)
    _check("w4a16", w4a16_mm(*args), w4a16_reference(*args), (M, 4096, 4096))


@needs_gpu
@pytest.mark.parametrize("M", [1, 4, 256])
@pytest.mark.parametrize("N,K", [(11008, 4096), (4096, 11008)])
def test_gpu_full_size_wide_weights(M, N, K):
    args, _ = problem("w8a8", (M, N, K), SEED)
    assert torch.equal(w8a8_mm(*args), w8a8_reference(*args))
    for group_size in (None, 128):
        args, _ = problem("w4a16", (M, N, K), SEED, group_size=group_size)
        _check("w4a16", w4a16_mm(*args), w4a16_reference(*args), (M, N, K))


@needs_gpu
@pytest.mark.parametrize("M", [1, 256, 4096, 65536])
@pytest.mark.parametrize("density", [0.0, 0.05, 0.25, 0.5, 1.0])
def test_gpu_full_size_dds(M, density):
    args, _ = problem("dds", (M, 1024, 1024), SEED, density=density)
    _check("dds", dds_mm(*args), dds_reference(*args), (M, 1024, 1024))


@pytest.mark.parametrize("task,fn,shape", [("w8a8", w8a8_mm, (40, 256, 1024)), ("w4a16", w4a16_mm, (2, 256, 1024))])
def test_split_k_reduction_is_deterministic_and_resets_its_counters(task, fn, shape):
    module = w8a8_solution if task == "w8a8" else w4a16_solution  # each file has its own counters
    config = w8a8_solution._gemm_config if task == "w8a8" else w4a16_solution._config
    assert config(*shape)["SPLIT_K"] > 1
    args, _ = problem(task, shape, SEED)
    first = fn(*args)  # split-K, reduced by the last program of each tile
    for _ in range(3):
        assert torch.equal(fn(*args), first)
    assert int(module._tile_counters(first.device, 1).abs().sum()) == 0
    ref = w8a8_reference(*args) if task == "w8a8" else w4a16_reference(*args)
    _check(task, first, ref, shape)
