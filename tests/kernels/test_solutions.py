"""The reference kernels against exact PyTorch references, with fresh random inputs.

These test behaviour, not tuning. Which config a shape gets is each kernel
file's ``_select_config`` (measured on the GPU, changed by a retune); here every
code path is forced through the file's ``FORCE_CONFIG`` knob instead:

- every declared config (``CONFIGS``) runs on small awkward shapes cut to its
  own tiles (ragged edges, several tiles, split-K slices);
- each code path (split-K with empty slices, TMA loads and their pointer
  fallback, dequantize + GEMM, group-wise scales, the one-row and the grouped
  DDS kernels) runs under a small config the test declares itself, and a spy
  on the kernel's launches checks that the path really ran;
- the public entry points run with their own selection on ragged shapes and
  bad inputs;
- on a GPU, full-size shapes and every declared config; on Hopper, PDL and
  TMA launches.
"""

import random

import pytest
import torch
import triton

from grader.compare import check_output
from solutions import dds as dds_solution
from solutions import dds_mm, w4a16_mm, w8a8_mm
from solutions import w4a16 as w4a16_solution
from solutions import w8a8 as w8a8_solution
from solutions.layers import unpack_int4
from tests.helpers import DEVICE, HAS_CUDA, dds_reference, needs_gpu, problem, w4a16_reference, w8a8_reference

pytestmark = pytest.mark.slow  # the reference kernels on many shapes, in the interpreter without a GPU

SEED = random.randrange(2**31)  # fresh inputs every run; printed on failure
MODULES = {"w8a8": w8a8_solution, "w4a16": w4a16_solution, "dds": dds_solution}
HOPPER = HAS_CUDA and torch.cuda.get_device_capability()[0] >= 9
needs_hopper = pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU or newer: PDL and TMA launch there only "
                                  "(tests/worker/test_compile_check.py compiles them for sm_90 on the CPU)")


def _check(task, out, ref, shape):
    c = check_output(out, ref, task, shape[:2])
    assert c.passed, f"seed {SEED}: {c.message}"


def _run(task, shape, **options):
    """The task's entry point on fresh inputs, checked against the grader's reference
    (W8A8 bit for bit); returns (args, output)."""
    args, _ = problem(task, shape, SEED, **options)
    out = {"w8a8": w8a8_mm, "w4a16": w4a16_mm, "dds": dds_mm}[task](*args)
    if task == "w8a8":
        assert torch.equal(out, w8a8_reference(*args)), f"seed {SEED}: W8A8 {shape} is not bit-exact"
    else:
        _check(task, out, (w4a16_reference if task == "w4a16" else dds_reference)(*args), shape)
    return args, out


@pytest.fixture
def force(monkeypatch):
    """force(task, config): the task's entry point runs ``config`` (a triton.Config,
    or the name of a declared one) whatever the shape, for this test only."""
    def _force(task, config):
        module = MODULES[task]
        monkeypatch.setattr(module, "FORCE_CONFIG", module.CONFIGS[config] if isinstance(config, str) else config)
    return _force


@pytest.fixture
def launches():
    """launches(kernel) -> a list that receives the keyword arguments (constexprs,
    launch options) of every launch of that @triton.jit kernel in this test."""
    spied = []

    def _spy(kernel):
        seen, run = [], kernel.run

        def spy(*args, **kwargs):
            seen.append(kwargs)
            return run(*args, **kwargs)
        kernel.run = spy
        spied.append(kernel)
        return seen
    yield _spy
    # Removed, not reset: monkeypatch would leave the kernel its own bound run,
    # which hides it from every later patch of its class's run (the grader's
    # launch record, other tests' spies).
    for kernel in spied:
        vars(kernel).pop("run", None)


# ------------------------------------------------------------------ every declared config

def _tiles(cfg):
    """(BLOCK_M, BLOCK_N, K covered by one BLOCK_K tile per split) of a quantized-GEMM config."""
    meta = cfg.kwargs
    return meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"] * meta["SPLIT_K"]


@pytest.mark.parametrize("name", sorted(w8a8_solution.CONFIGS))
def test_w8a8_every_declared_config(name, force):
    force("w8a8", name)
    bm, bn, k = _tiles(w8a8_solution.CONFIGS[name])
    _run("w8a8", (1, bn + 8, k))                     # one BLOCK_K tile per split: the mask-free loop
    _run("w8a8", (bm + 5, bn + 8, k + k // 2 + 8))  # ragged M, N and K: the last K tile (or slice) short


@pytest.mark.parametrize("name", sorted(w4a16_solution.CONFIGS))
def test_w4a16_every_declared_config(name, force):
    force("w4a16", name)
    bm, bn, k = _tiles(w4a16_solution.CONFIGS[name])
    _run("w4a16", (1, bn + 8, k))
    _run("w4a16", (bm + 5, bn + 8, k + 32), group_size=32)  # K ragged against BLOCK_K, whole groups


@pytest.mark.parametrize("name", sorted(dds_solution.CONFIGS))
def test_dds_every_declared_config(name, force):
    force("dds", name)
    cfg = dds_solution.CONFIGS[name]
    cols = 32 * cfg.kwargs.get("G", 1)  # output columns of one program: 2 of them and a partial third
    _run("dds", (1, 96, 128), density=0.5)
    _run("dds", (cfg.kwargs["BLOCK_M"] + 5, 2 * cols + 32, 192), density=0.6, empty_rows=1, index_dtype="int32")


def test_selection_names_a_declared_config_for_every_shape():
    for M in (1, 2, 5, 16, 17, 33, 64, 65, 128, 129, 256, 257, 511, 512, 767, 768, 1000, 4096, 8193, 65536):
        for N, K in ((32, 32), (4096, 4096), (11008, 4096), (4096, 11008), (8200, 16384)):
            assert w8a8_solution._select_config(M, N, K) in w8a8_solution.CONFIGS
            assert w4a16_solution._select_config(M, N, K) in w4a16_solution.CONFIGS
            for nnz in (0, (N // 32) * (K // 32) // 2, (N // 32) * (K // 32)):
                assert dds_solution._select_config(M, N, K, nnz) in dds_solution.CONFIGS


# ------------------------------------------------------------------ W8A8

@pytest.mark.parametrize("shape", [(1, 32, 8), (1, 96, 200), (33, 64, 96), (130, 48, 264), (7, 256, 1000)])
def test_w8a8_bit_exact(shape):
    _run("w8a8", shape)


@pytest.mark.parametrize("M", [5, 17])  # the quantize pass's tile height depends on M
@pytest.mark.parametrize("options", [{"ties": True}, {"zero_rows": 3}])
def test_w8a8_ties_and_zero_rows(options, M):
    args, out = _run("w8a8", (M, 64, 64), **options)
    if "zero_rows" in options:
        zero = (args[0] == 0).all(dim=1)
        assert zero.sum() == 3 and (out[zero] == 0).all() and torch.isfinite(out).all()


W8A8_SPLIT_K = triton.Config(dict(SPLIT_K=3, BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, GROUP_M=2, PDL=False, TMA=False),
                             num_warps=4, num_stages=2)
W8A8_TMA_SPLIT_K = triton.Config({**W8A8_SPLIT_K.kwargs, "TMA": True}, num_warps=4, num_stages=2)


@pytest.mark.parametrize("shape", [(40, 72, 200), (40, 72, 192), (40, 72, 40)],
                         ids=["last-slice-short", "even-slices", "empty-slices"])
def test_w8a8_split_k(shape, force, launches):
    # Three K slices per tile, reduced by the last program of each tile; grouped tile order.
    force("w8a8", W8A8_SPLIT_K)
    seen = launches(w8a8_solution._w8a8_gemm_kernel)
    _run("w8a8", shape)
    assert seen[0]["SPLIT_K"] == 3 and seen[0]["EVEN_K"] == (shape[2] % 96 == 0)


@pytest.mark.parametrize("shape", [(40, 72, 208), (3, 64, 96), (33, 40, 200)])
def test_w8a8_tma_split_k_bit_exact(shape, force, launches):
    force("w8a8", W8A8_TMA_SPLIT_K)
    seen = launches(w8a8_solution._w8a8_gemm_kernel)
    _run("w8a8", shape)
    # TMA needs 16-byte rows: K = 200 int8 weights are not, so that one reads by pointers
    assert seen[0]["TMA"] == (shape[2] % 16 == 0 and (DEVICE == "cpu" or HOPPER))


@pytest.mark.parametrize("layout", ["weight_view", "contiguous_kn"])
def test_w8a8_tma_and_pointer_loads(layout, force, launches):
    # The weight is read through a descriptor of the [N, K] tensor that qweight_t views;
    # a [K, N] qweight_t with contiguous rows of N has no such rows and is read by pointers.
    force("w8a8", W8A8_TMA_SPLIT_K)
    seen = launches(w8a8_solution._w8a8_gemm_kernel)
    (x, qweight_t, sx, sw), _ = problem("w8a8", (37, 48, 160), SEED)
    if layout == "contiguous_kn":
        qweight_t = qweight_t.contiguous()
    out = w8a8_mm(x, qweight_t, sx, sw)
    assert torch.equal(out, w8a8_reference(x, qweight_t, sx, sw)), f"seed {SEED}: not bit-exact"
    assert seen[0]["TMA"] == (layout == "weight_view" and (DEVICE == "cpu" or HOPPER))


def test_w8a8_pdl_only_where_the_gpu_has_it(force, launches):
    force("w8a8", triton.Config({**W8A8_SPLIT_K.kwargs, "PDL": True}, num_warps=4, num_stages=2))
    seen = launches(w8a8_solution._w8a8_gemm_kernel)
    _run("w8a8", (3, 40, 64))
    assert seen[0]["PDL"] == HOPPER and seen[0].get("launch_pdl", False) == HOPPER


# ------------------------------------------------------------------ W4A16

def _w4a16_config(split_k=1, block_m=16, block_n=32, block_k=64, tma=False, dequantized=False, pdl=False,
                  tiny=False):
    """A small config of the W4A16 kernel: a code path at interpreter speed."""
    return triton.Config(dict(SPLIT_K=split_k, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=2,
                              TMA=tma, DEQUANTIZED=dequantized, PDL=pdl, TINY_Q=tiny),
                         num_warps=4, num_stages=2)


W4A16_PATHS = {
    "pointers-split-k": _w4a16_config(split_k=3),
    "tma-split-k": _w4a16_config(split_k=2, block_m=32, tma=True),
    "dequantized": _w4a16_config(block_m=32, dequantized=True, pdl=True),
    # q * 2**-24 in the tile (fp16 subnormals), s * 2**24 on the result; group-wise scales ignore it.
    "tiny-split-k": _w4a16_config(split_k=3, tiny=True),
    "tiny-tma": _w4a16_config(block_m=32, tma=True, tiny=True),
}


@pytest.mark.parametrize("shape", [(1, 64, 8), (1, 96, 256), (33, 64, 136), (130, 40, 128), (16, 160, 384)])
def test_w4a16_per_channel(shape):
    _run("w4a16", shape)


@pytest.mark.parametrize("path", W4A16_PATHS)
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_w4a16_group_wise(group_size, path, force):
    force("w4a16", W4A16_PATHS[path])
    args, _ = _run("w4a16", (3, 64, 256), group_size=group_size)
    assert args[2].shape == (256 // group_size, 64)
    _run("w4a16", (35, 48, 160), group_size=32)  # K = 160 is no multiple of BLOCK_K: groups past K


@pytest.mark.parametrize("path", W4A16_PATHS)
def test_w4a16_paths_per_channel(path, force):
    force("w4a16", W4A16_PATHS[path])
    _run("w4a16", (1, 40, 8))        # K shorter than one tile
    _run("w4a16", (35, 72, 200))     # ragged M, N, K


@pytest.mark.parametrize("shape", [(3, 40, 64), (3, 40, 200)], ids=["empty-slices", "last-slice-short"])
def test_w4a16_split_k(shape, force, launches):
    force("w4a16", W4A16_PATHS["pointers-split-k"])
    seen = launches(w4a16_solution._w4a16_kernel)
    _run("w4a16", shape)
    assert seen[0]["SPLIT_K"] == 3 and not seen[0]["TMA"]


@pytest.mark.parametrize("group_size", [None, 32, 128])
def test_w4a16_dequantize_then_gemm(group_size, force, launches):
    # The pre-pass writes the scaled fp16 weight once, then the GEMM runs over it.
    force("w4a16", W4A16_PATHS["dequantized"])
    pre, gemm = launches(w4a16_solution._dequantize_kernel), launches(w4a16_solution._w4a16_kernel)
    args, _ = _run("w4a16", (37, 72, 256 if group_size else 136), group_size=group_size)
    assert len(pre) == 1 and gemm[0]["DEQUANTIZED"] and not gemm[0]["TMA"]
    qweight, scales = args[1], args[2]
    K = 8 * qweight.shape[0]
    q = unpack_int4(qweight).to(torch.float16)  # [N, K]
    expected = (q * scales.repeat_interleave(K // scales.shape[0], dim=0).t()).t()
    assert torch.equal(w4a16_solution._dequantize(qweight, scales, K // scales.shape[0]), expected)


@pytest.mark.parametrize("layout", ["aligned", "odd_n", "offset_x"])
def test_w4a16_tma_and_pointer_loads(layout, force, launches):
    # A TMA config reads tiles through tensor descriptors where _tma_ready allows
    # it (Hopper, or the interpreter), and falls back to pointer loads for a row
    # stride or base address that is not 16-byte aligned.
    force("w4a16", W4A16_PATHS["tma-split-k"])
    seen = launches(w4a16_solution._w4a16_kernel)
    shape = (70, 42 if layout == "odd_n" else 48, 136)
    (x, qweight, scales), _ = problem("w4a16", shape, SEED)
    if layout == "offset_x":  # a contiguous view 6 bytes into its storage
        x = torch.cat([x.new_zeros(3), x.flatten()])[3:].view(x.shape)
    _check("w4a16", w4a16_mm(x, qweight, scales), w4a16_reference(x, qweight, scales), shape)
    assert seen[0]["TMA"] == (layout == "aligned" and (DEVICE == "cpu" or HOPPER))


@pytest.mark.parametrize("path", W4A16_PATHS)
@pytest.mark.parametrize("q", [-8, -1, 7])
def test_w4a16_extreme_nibbles_are_exact(q, path, force):
    # Every weight q (-8 is the nibble 0x8, -1 is 0xF) and x = 1, scales a power of two: the
    # output is exactly K * q * s in every path (an unsigned or off-by-bias unpack is far off).
    force("w4a16", W4A16_PATHS[path])
    M, N, K = 3, 40, 200
    x = torch.ones(M, K, dtype=torch.float16, device=DEVICE)
    word = sum((q & 0xF) << (4 * j) for j in range(8))
    qweight = torch.full((K // 8, N), word - (1 << 32) if word >= 1 << 31 else word, dtype=torch.int32,
                         device=DEVICE)
    scales = torch.full((1, N), 0.25, dtype=torch.float16, device=DEVICE)
    out = w4a16_mm(x, qweight, scales)
    assert (out == K * q * 0.25).all(), f"expected every output = {K * q * 0.25}, got {out.unique().tolist()}"


def test_w4a16_negative_nibbles_are_signed():
    # Every weight -1 (nibble 0xF): an unsigned unpack would give +15.
    M, N, K = 3, 32, 64
    x = torch.ones(M, K, dtype=torch.float16, device=DEVICE)
    qweight = torch.full((K // 8, N), -1, dtype=torch.int32, device=DEVICE)  # 0xFFFFFFFF
    scales = torch.ones(1, N, dtype=torch.float16, device=DEVICE)
    out = w4a16_mm(x, qweight, scales)
    assert (out == -K).all(), f"expected every output = {-K}, got {out.unique().tolist()}"


@pytest.mark.parametrize("task,shape", [("w8a8", (40, 72, 200)), ("w4a16", (3, 40, 200))])
def test_split_k_reduction_is_deterministic_and_resets_its_counters(task, shape, force):
    force(task, W8A8_SPLIT_K if task == "w8a8" else W4A16_PATHS["pointers-split-k"])
    args, first = _run(task, shape)  # split-K, reduced by the last program of each tile
    fn = w8a8_mm if task == "w8a8" else w4a16_mm
    for _ in range(3):
        assert torch.equal(fn(*args), first)
    assert int(MODULES[task]._COUNTERS[first.device].abs().sum()) == 0  # each file has its own


# ------------------------------------------------------------------ DDS

@pytest.mark.parametrize("shape,options", [
    ((33, 96, 64), dict(density=0.25)),
    ((1, 128, 256), dict(density=0.05)),
    ((40, 96, 64), dict(density=1.0)),
    ((17, 64, 96), dict(density=0.0)),
    ((17, 128, 128), dict(density=0.5, empty_rows=2)),
    ((10, 64, 160), dict(density=0.3, index_dtype="int32")),
    ((70, 32, 32), dict(density=1.0)),
])
def test_dds(shape, options):
    _, out = _run("dds", shape, **options)
    if options["density"] == 0.0:
        assert (out == 0).all()


@pytest.mark.parametrize("blocks_per_step", [1, 2, 4])
def test_dds_one_row_kernel(blocks_per_step, force, launches):
    # One block row per program; stored blocks taken blocks_per_step at a time (the last step partial).
    force("dds", triton.Config(dict(BLOCK_M=16, BLOCKS_PER_STEP=blocks_per_step), num_warps=4, num_stages=2))
    seen = launches(dds_solution._dds_kernel)
    _run("dds", (35, 32 * 5, 32 * 7), density=0.55, empty_rows=1)
    _, out = _run("dds", (3, 64, 96), density=0.0)
    assert (out == 0).all() and len(seen) == 2


@pytest.mark.parametrize("G,steps", [(1, 4), (2, 2), (4, 2), (8, 1)])
def test_dds_grouped_kernel(G, steps, force, launches):
    # Densify + union walk with G block rows per program, on weights whose
    # rows and union lists are ragged (odd block rows, empty rows, a partial
    # last group).
    force("dds", triton.Config(dict(G=G, BLOCK_M=32, STEPS=steps), num_warps=4, num_stages=2))
    seen = launches(dds_solution._grouped_kernel)
    _run("dds", (70, 32 * 11, 32 * 9), density=0.4, empty_rows=2)
    _run("dds", (33, 160, 96), density=1.0)                                   # 5 block rows
    _run("dds", (33, 96, 320), density=0.8, empty_rows=1, index_dtype="int32")
    _, out = _run("dds", (5, 64, 64), density=0.0)
    assert (out == 0).all() and len(seen) == 4


@pytest.mark.parametrize("G", [1, 2, 4, 8])
def test_dds_rows_kernel(G, force, launches):
    # The union walk with G block rows per program: a partial last group (5
    # block rows), empty rows, K of 33-34 block columns (two chunks of the
    # per-row bit masks, the second short), bit 31 of a mask (full rows), odd
    # union lengths, int32 indices, an all-empty weight.
    force("dds", triton.Config(dict(BLOCK_M=16, G=G), num_warps=4, num_stages=2))
    seen = launches(dds_solution._dds_rows_kernel)
    _run("dds", (35, 32 * 5, 32 * 34), density=0.3, empty_rows=1)
    _run("dds", (17, 32 * 3, 32 * 33), density=1.0, index_dtype="int32")
    _run("dds", (33, 32 * 3, 32 * 7), density=0.6)
    _, out = _run("dds", (5, 64, 64), density=0.0)
    assert (out == 0).all() and len(seen) == 4 and all(k["G"] == G for k in seen)
    assert seen[0]["grid"] == (3 * -(-5 // G), 1, 1)   # 3 row tiles of 16 rows, one program per group each


@pytest.mark.filterwarnings("ignore:Sparse BSR tensor support is in beta")
@pytest.mark.parametrize("name", sorted(n for n, c in dds_solution.CONFIGS.items()
                                         if dds_solution._kernel_of(c) == "rows"))
def test_dds_rows_configs_where_a_groups_first_row_skips_columns(name, force):
    # Each group's first block row stores one or no block while the others store
    # many: a column walk must not tie the later rows' multiplies to the first
    # row's. (A version with a dot per row under a branch gave wrong values and
    # illegal addresses on an H100 for exactly this, right in the interpreter and
    # at 100 % density: docs/performance.md, "What did not work".)
    force("dds", name)
    cfg = dds_solution.CONFIGS[name]
    G, rows, cols = cfg.kwargs["G"], 16, 40
    g = torch.Generator().manual_seed(SEED)
    keep = torch.rand(rows, cols, generator=g) < 0.4
    keep[::G] = False
    keep[G::2 * G, 3] = True            # every other group's first row: one block
    keep[1, :] = True                   # a full row (bit 31 of both chunks' masks)
    mask = keep.repeat_interleave(32, 0).repeat_interleave(32, 1)
    w = (torch.randn(32 * rows, 32 * cols, generator=g) * mask).to(torch.float16).to(DEVICE)
    bsr = w.to_sparse_bsr((32, 32))
    M = cfg.kwargs["BLOCK_M"] + 3
    x = torch.randn(M, 32 * cols, generator=g).to(torch.float16).to(DEVICE)
    _check("dds", dds_mm(x, bsr), dds_reference(x, bsr), (M, 32 * rows, 32 * cols))


@pytest.mark.filterwarnings("ignore:Sparse BSR tensor support is in beta")
def test_dds_rows_kernel_relies_on_a_bsr_invariant():
    # The union walk consumes a row's blocks in column order: torch's BSR
    # format requires sorted, distinct columns within a row (and builds them so).
    values = torch.zeros(2, 32, 32, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="sorted and distinct"):
        torch.sparse_bsr_tensor(torch.tensor([0, 2]), torch.tensor([1, 0]), values, size=(32, 64),
                                check_invariants=True)
    bsr = torch.zeros(64, 32 * 40, dtype=torch.float16).index_fill_(1, torch.arange(0, 32 * 40, 7), 1.0)
    cols = bsr.to_sparse_bsr((32, 32)).col_indices()
    assert torch.equal(cols[:40], torch.arange(40))


# ------------------------------------------------------------------ bad inputs

BAD_INPUTS = [
    (w8a8_mm, lambda a: (a[0].float(),) + a[1:], "x: expected dtype torch.float16"),
    (w8a8_mm, lambda a: (a[0][0],) + a[1:], "x: expected a 2-D tensor"),
    (w8a8_mm, lambda a: (a[0][:, :-1],) + a[1:], "qweight_t: expected \\[K, N\\]"),
    (w8a8_mm, lambda a: a[:2] + (a[2].t(),) + a[3:], "input_scale: expected shape"),
    (w8a8_mm, lambda a: (a[0], a[1].to(torch.int32)) + a[2:], "qweight_t: expected dtype torch.int8"),
    (w8a8_mm, lambda a: a[:3] + (a[3].bfloat16(),), "weight_scale: expected dtype torch.float32 or torch.float16"),
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
    _run("w8a8", (M, 4096, 4096))
    _run("w4a16", (M, 4096, 4096))
    _run("w4a16", (M, 4096, 4096), group_size=128)


@needs_gpu
@pytest.mark.parametrize("M", [1, 4, 256])
@pytest.mark.parametrize("N,K", [(11008, 4096), (4096, 11008)])
def test_gpu_full_size_wide_weights(M, N, K):
    _run("w8a8", (M, N, K))
    for group_size in (None, 128):
        _run("w4a16", (M, N, K), group_size=group_size)


@needs_gpu
@pytest.mark.parametrize("M", [1, 256, 4096, 65536])
@pytest.mark.parametrize("density", [0.0, 0.05, 0.25, 0.5, 1.0])
def test_gpu_full_size_dds(M, density):
    _run("dds", (M, 1024, 1024), density=density)


@needs_gpu
@pytest.mark.parametrize("task,name", [(t, n) for t, m in MODULES.items() for n in sorted(m.CONFIGS)])
def test_gpu_every_declared_config_full_size(task, name, force):
    # Each config compiled and run by the GPU's own compiler, on full-size weights and a ragged M.
    force(task, name)
    for M in (1, 333):
        if task == "dds":
            _run("dds", (M, 1024, 1024), density=0.5)
        else:
            _run(task, (M, 4096, 4096))
            _run(task, (M, 11008, 4096), **({"group_size": 128} if task == "w4a16" else {}))


@needs_hopper
@pytest.mark.parametrize("task,name", [(t, n) for t, m in MODULES.items() for n in sorted(m.CONFIGS)
                                       if m.CONFIGS[n].kwargs.get("PDL")])
def test_hopper_pdl_configs_launch_with_pdl(task, name, force, launches):
    # The second kernel starts while the first runs (launch_pdl) and waits for its output (gdc_wait).
    force(task, name)
    gemm = launches(w8a8_solution._w8a8_gemm_kernel if task == "w8a8" else w4a16_solution._w4a16_kernel)
    for M in (1, 333):
        _run(task, (M, 4096, 4096))
    assert gemm and all(k["PDL"] and k.get("launch_pdl") for k in gemm)


@needs_hopper
@pytest.mark.parametrize("task,name", [(t, n) for t in ("w8a8", "w4a16") for n, c in sorted(MODULES[t].CONFIGS.items())
                                       if c.kwargs.get("TMA")])
def test_hopper_tma_configs_load_through_descriptors(task, name, force, launches):
    force(task, name)
    gemm = launches(w8a8_solution._w8a8_gemm_kernel if task == "w8a8" else w4a16_solution._w4a16_kernel)
    for M in (1, 333):
        _run(task, (M, 4096, 4096))
        if task == "w4a16":
            _run(task, (M, 4096, 4096), group_size=128)
    assert gemm and all(k["TMA"] for k in gemm)
