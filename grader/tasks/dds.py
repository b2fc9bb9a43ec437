"""Task 3, DDS: dense fp16 activations times a block-sparse (BSR, 32x32 blocks) fp16 weight.

    y = x @ W^T,  W [N, K] stored as torch.sparse_bsr: crow_indices [N / 32 + 1],
    col_indices [nnz], values [nnz, 32, 32] with values[b][r, c] = W[32 i + r, 32 j + c]

Blocks that are not stored are zero and must cost nothing; a block row with
no stored block still writes zeros (the handout's "Task 3: DDS").
"""

from __future__ import annotations

import warnings

import torch

from .base import Option, Task
from .common import ZERO_ROWS, activations, matches, refresh_x

BLOCK = 32


def build_inputs(M, N, K, g, zero_rows, density, empty_rows, index_dtype):
    rows, cols = N // BLOCK, K // BLOCK
    keep = torch.zeros(rows * cols, dtype=torch.bool)
    keep[torch.randperm(rows * cols, generator=g)[: round(density * rows * cols)]] = True
    keep = keep.view(rows, cols)
    if empty_rows:
        keep[torch.randperm(rows, generator=g)[:empty_rows]] = False
    mask = keep.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    w = (torch.randn(N, K, generator=g) * mask).to(torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse BSR support is in beta"
        bsr = w.to_sparse_bsr((BLOCK, BLOCK))
        if index_dtype == "int32":
            bsr = torch.sparse_bsr_tensor(bsr.crow_indices().int(), bsr.col_indices().int(),
                                          bsr.values(), size=bsr.shape)
    x = activations(M, K, zero_rows, g)
    return (x, bsr), {"weight": w}


def reference(x, weight_bsr) -> torch.Tensor:
    """float64 [M, N]: x @ W^T with W the dense form of the BSR weight."""
    return x.double() @ weight_bsr.to_dense().double().t()


def shape_problem(shape, options) -> str | None:
    _, N, K = shape
    if N % BLOCK or K % BLOCK:
        return f"N and K must be multiples of the {BLOCK}x{BLOCK} block, got N = {N}, K = {K}"
    rows = options.get("empty_rows") or 0
    if rows > N // BLOCK:
        return f"empty_rows ({rows}) is more than the {N // BLOCK} block rows"
    return None


def _stored_blocks(shape, options) -> int:
    _, N, K = shape
    return round(options.get("density", 0.25) * (N // BLOCK) * (K // BLOCK))


def floor_parts(shape, options) -> dict[str, int]:
    M, N, K = shape
    nnz = _stored_blocks(shape, options)
    index = 4 if options.get("index_dtype") == "int32" else 8
    return {"x": 2 * M * K, "weight_bsr.crow_indices": index * (N // BLOCK + 1),
            "weight_bsr.col_indices": index * nnz, "weight_bsr.values": nnz * BLOCK * BLOCK * 2,
            "output": 2 * M * N}


def dot_flops(shape, options) -> int:
    """FLOPs of the stored blocks only."""
    return 2 * shape[0] * BLOCK * BLOCK * _stored_blocks(shape, options)


# ---------------------------------------------------------------- likely causes

def _block_counts(f):
    return f.args[1].crow_indices().to(f.y.device).diff()


def _group_bad(f):
    """[N // 32] bool: whether the 32 output columns of each block row hold a failure."""
    return f.bad.view(f.y.shape[0], -1, BLOCK).any(2).any(0)


def _empty_block_rows(f, strict: bool):
    """Failures only in the outputs of empty block rows.

    ``strict``: exactly those outputs fail, every one of them (never stored
    into NaN-filled memory). Otherwise failures anywhere inside them only, as
    when they hold stale memory with a right 0 here and there.
    """
    if f.y.shape[1] % BLOCK:
        return None
    empty = _block_counts(f) == 0
    group_bad = _group_bad(f)
    if not bool(group_bad.any()) or bool((group_bad & ~empty).any()):
        return None
    groups = f.y.shape[0], -1, BLOCK
    if strict and not (torch.equal(group_bad, empty) and bool(f.bad.view(groups)[:, empty].all())):
        return None
    how = "never stored" if bool(f.blank.view(groups)[:, empty].all()) else "wrong or never stored"
    return "empty_block_rows", {"how": how}


def _block_loop_tail(f):
    """Exactly the block rows whose block count is not a multiple of a step fail.

    Evidence that the count matters, not just which rows hold blocks: a
    non-empty row with a multiple of ``step`` blocks is right, or the last
    non-empty row is all NaN (its last step read past the end of the blocks).
    """
    if f.y.shape[1] % BLOCK:
        return None
    count = _block_counts(f)
    group_bad = _group_bad(f)
    nonempty = (count > 0).nonzero().flatten()
    if nonempty.numel() == 0:
        return None
    last = int(nonempty[-1])
    last_nan = not bool(f.finite.view(f.y.shape[0], -1, BLOCK)[:, last].any())
    for step in (2, 4, 8):
        ragged = count % step != 0
        evidence = bool(((count > 0) & ~ragged).any()) or (bool(ragged[last]) and last_nan)
        if evidence and torch.equal(group_bad, ragged):
            return "block_loop_tail", {"step": step}
    return None


def _transposed_blocks(f):
    """The product with every stored 32x32 block transposed."""
    x, bsr = f.args
    blocks = torch.sparse_bsr_tensor(bsr.crow_indices(), bsr.col_indices(), bsr.values().transpose(1, 2),
                                     size=bsr.shape, check_invariants=False)
    pred = x.double() @ blocks.to_dense().double().t()
    if matches(f.y, pred.to(f.y.device), TASK.tolerance):
        return "transposed_block", {}
    return None


# ---------------------------------------------------------------- the benchmark

def _torch_bsr(args, extras):
    """PyTorch's own BSR product, F.linear on the sparse weight."""
    x, bsr = args

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.nn.functional.linear(x, bsr)
    return run


TASK = Task(
    name="dds", file="dds.py", entry="dds_mm", title="DDS (SparseLinear -> dds_mm)",
    handout_section="6. Task 3: DDS",
    arg_names=("x", "weight_bsr"), activation_args=(0,),
    options={"zero_rows": ZERO_ROWS,
             "density": Option("number", 0, 1, 0.25, "fraction of the 32x32 blocks stored"),
             "empty_rows": Option("int", 0, None, 0, "block rows with no stored block"),
             "index_dtype": Option("choice", None, ("int32", "int64"), "int64",
                                   "dtype of crow_indices and col_indices")},
    build_inputs=build_inputs, refresh_activations=refresh_x, reference=reference,
    tolerance=2e-3,   # fp32 accumulation in any block order: about four fp16 ulps
    sanity=0.01,      # no quantization: only accumulation order
    floor_parts=floor_parts, dot_flops=dot_flops, shape_problem=shape_problem,
    causes={
        "transposed_block": ("each 32x32 block is used transposed: values[b][r, c] is W[32i + r, 32j + c]; "
                             "the dot wants it as [k, n]", None),
        "empty_block_rows": ("the outputs of empty block rows are {how}: a block row with no stored blocks "
                             "must still write zeros", None),
        "block_loop_tail": ("a missing tail mask in the block loop: only block rows whose number of stored "
                            "blocks is not a multiple of {step} are wrong", None),
    },
    signatures={"first": (lambda f: _empty_block_rows(f, strict=True),),
                "specific": (_transposed_blocks,),
                "late": (lambda f: _empty_block_rows(f, strict=False), _block_loop_tail)},
    ragged_k=False,   # K is a multiple of the block: no K tail to mask
    # Skipping three blocks in four must beat computing them all: at 50 % or less a
    # kernel no faster than dense fp16 gets at most half of a performance test.
    lesson_ratio=lambda options: 1.0 if options.get("density", 0.25) <= 0.5 else None,
    # 10 % from M = 4096 on: where a sparse kernel must beat dense (a candidate rubric test).
    bench_cases=tuple(((M, 1024, 1024), {"density": d}, M == 4096 and d == 0.25)
                      for d in (0.05, 0.1, 0.25, 0.5, 1.0) for M in (16, 256, 4096, 16384, 65536)
                      if d != 0.1 or M >= 4096),
    anchors={"torch_bsr": _torch_bsr},
)
