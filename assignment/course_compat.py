"""The course's own kernel entry points, on top of this package's kernels.

The course this assignment comes from ships layer classes and benchmark
scripts (``benchmark_w8a8.py``, ``benchmark_w4a16.py``, ``benchmark_sparse.py``)
that import their kernels as

    from w8a8 import w8a16_mm                       # (sic) the course's name for W8A8
    from int4_matmul_rowwise_dequantize import w4a16_mm
    from sparse_matmul import dds_mm                # dds_mm(input, shape, value, row_offset, col_indice)

This module offers those three names, each calling the kernel of the package
it is imported from, and runs such a script unmodified:

    python -m assignment.course_compat path/to/benchmark_w8a8.py    # your kernels
    python -m solutions.course_compat path/to/benchmark_w8a8.py     # the reference (TA repository)

(from the repository root; the scripts put their tensors on ``cuda``). The
three course modules are registered in ``sys.modules`` before the script
runs, so they win over any ``w8a8.py`` lying next to it. ``install()`` does
the same for a script of your own that imports them.

The conventions differ in one place only. The course's ``SparseLinear``
stores the BSR of the transposed weight ``W^T`` ([K, N], 32 x 32 blocks) and
passes its parts; this assignment's ``dds_mm(x, weight_bsr)`` takes the BSR
of ``W`` ([N, K]). ``dds_mm`` below builds the latter from the former with
PyTorch's own layout conversion, once per weight (the layer's buffers), so a
timed loop measures the kernel and not the conversion. W8A8 and W4A16 take
the course's arguments as they are (W8A8's scales may be fp16, as the
course's layer computes them). Nothing here is graded: the grader reads only
w8a8.py, w4a16.py and dds.py.

Each script prints ``Test passed. Maximum difference: ...`` per case (its
check: at most 0.5 away from the fp16 ``nn.Linear``, far looser than the
grader's), then the average milliseconds per call of its layer and of the fp16
layer, timed with ``time.time()`` around each call: Python and launch overhead
included, the weights warm in L2. ``benchmark_sparse.py``'s "fp16 linear avg"
loop calls the sparse layer again, not an fp16 one.
"""

from __future__ import annotations

import argparse
import runpy
import sys
import types
import warnings
import weakref
from pathlib import Path

import torch

from .dds import dds_mm as _dds_mm
from .utils import BSR_BLOCK
from .w4a16 import w4a16_mm  # noqa: F401 - offered to the course's scripts (COURSE_MODULES)
from .w8a8 import w8a8_mm

# The course's module names -> the names each offers.
COURSE_MODULES = {
    "w8a8": ("w8a16_mm",),
    "int4_matmul_rowwise_dequantize": ("w4a16_mm",),
    "sparse_matmul": ("dds_mm",),
}


def w8a16_mm(input: torch.Tensor, weight: torch.Tensor, input_scale: torch.Tensor,
             weight_scale: torch.Tensor) -> torch.Tensor:
    """The course's name for ``w8a8_mm`` (it is W8A8: int8 activations too).

    ``input`` [M, K] fp16, ``weight`` = ``qweight.T`` [K, N] int8, ``input_scale``
    [M, 1] and ``weight_scale`` [N, 1] in fp16 or fp32 -> [M, N] fp16.
    """
    return w8a8_mm(input, weight, input_scale, weight_scale)


# The BSR of W built last, and weak references to the course's tensors it was
# built from: a layer's buffers are converted once, whatever the loop around it.
_last: dict = {}


def _source_key(shape: tuple[int, int], tensors: tuple[torch.Tensor, ...]) -> tuple:
    # data_ptr and _version change when a tensor is rebound (.data =) or written in place.
    return shape, tuple((t.data_ptr(), t._version) for t in tensors)


def _weight_bsr(shape: tuple[int, int], value, row_offset, col_indice) -> torch.Tensor:
    tensors = (value, row_offset, col_indice)
    key = _source_key(shape, tensors)
    refs = _last.get("refs")
    if refs and all(r() is t for r, t in zip(refs, tensors)) and _last["key"] == key:
        return _last["bsr"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Sparse BSR tensor support is in beta"
        try:
            w_t = torch.sparse_bsr_tensor(row_offset, col_indice, value, size=shape, check_invariants=True)
        except RuntimeError as e:
            raise ValueError(f"dds_mm: row_offset, col_indice and value are not a BSR matrix of "
                             f"shape {list(shape)}: {e}") from e
        # W^T's BSR, transposed, is W's BSC; PyTorch flips it into W's BSR
        # (index operations and a transpose of each block, on the tensors' device).
        bsr = w_t.transpose(0, 1).to_sparse_bsr((BSR_BLOCK, BSR_BLOCK))
    _last.update(refs=tuple(weakref.ref(t) for t in tensors), key=key, bsr=bsr)
    return bsr


def dds_mm(input: torch.Tensor, shape, value: torch.Tensor, row_offset: torch.Tensor,
           col_indice: torch.Tensor) -> torch.Tensor:
    """The course's ``dds_mm``: ``input @ W^T`` for the BSR of ``W^T``.

    ``shape`` is ``W^T``'s [K, N] (a tensor or a pair), ``value`` its blocks
    [nnz, 32, 32] fp16, ``row_offset`` and ``col_indice`` its crow and column
    indices (``weight.t().to_sparse_bsr((32, 32))``'s parts) -> [M, N] fp16.
    Raises ValueError where they do not describe such a matrix.
    """
    try:
        K, N = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise ValueError(f"dds_mm: shape: expected [K, N], got {shape!r}") from None
    if not isinstance(value, torch.Tensor) or value.dim() != 3 or tuple(value.shape[1:]) != (BSR_BLOCK, BSR_BLOCK):
        got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ValueError(f"dds_mm: value: expected [nnz, {BSR_BLOCK}, {BSR_BLOCK}] blocks, got {got}")
    if not isinstance(input, torch.Tensor) or input.dim() != 2 or input.shape[1] != K:
        got = tuple(input.shape) if isinstance(input, torch.Tensor) else type(input).__name__
        raise ValueError(f"dds_mm: input: expected [M, {K}] (shape is W^T's [K, N] = [{K}, {N}]), got {got}")
    return _dds_mm(input, _weight_bsr((K, N), value, row_offset, col_indice))


def install() -> None:
    """Register the course's kernel modules in ``sys.modules``, bound to this package's kernels."""
    here = globals()
    for name, entries in COURSE_MODULES.items():
        module = types.ModuleType(name, f"The course's {name} module: {', '.join(entries)} "
                                        f"from {__package__}.course_compat ({__package__}/'s kernels).")
        for entry in entries:
            setattr(module, entry, here[entry])
        sys.modules[name] = module


def main(argv: list[str] | None = None) -> None:
    """Run one of the course's scripts, unmodified, against this package's kernels."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.course_compat",
        description="Run a course script (benchmark_w8a8.py, benchmark_w4a16.py, benchmark_sparse.py) "
                    f"with its kernel imports bound to {__package__}/'s kernels.")
    parser.add_argument("script", type=Path, help="the script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its own arguments")
    ns = parser.parse_args(argv)
    if not ns.script.is_file():
        parser.error(f"{ns.script}: no such file")
    install()
    kernels = Path(sys.modules[w8a8_mm.__module__].__file__).parent
    print(f"course_compat: w8a16_mm, w4a16_mm, dds_mm -> the kernels in {kernels}/", file=sys.stderr, flush=True)
    sys.argv = [str(ns.script), *ns.args]
    sys.path.insert(0, str(ns.script.resolve().parent))  # as `python <script>` does
    runpy.run_path(str(ns.script), run_name="__main__")


if __name__ == "__main__":
    # Run as the package's module, not as __main__: the course modules then hold
    # <package>.course_compat's functions, as an import of this module would.
    import importlib

    importlib.import_module(f"{__package__}.course_compat").main()
