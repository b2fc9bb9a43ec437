"""Check your three kernels against the layers' own PyTorch math, on small random inputs.

    python assignment/check_mine.py

(from the folder that holds ``assignment/``; run it as a file, not with ``-m``:
without a GPU it must turn Triton's CPU interpreter on before your kernels are
imported). Each task prints the largest error relative to the largest output,
or says that it is not implemented yet:

    W8A8  1.2e-04
    W4A16 not implemented: ...

A correct kernel prints about ``1e-04`` (fp16 rounding), or up to a few ``1e-03``
for a W8A8 kernel that quantizes with ``x * (1.0 / s)``, which the handout
allows (a value on a rounding boundary then lands one int8 step away; the
grader allows for that, this script does not tell it apart); a bug prints
something near ``1e-01`` or larger, or ``nan``: an output element your kernel never
stored reads NaN, and so does a load that runs past the end of ``x`` without a
mask. The shapes hold the edges that break kernels: a ragged ``M``, a ``K`` that
is not a multiple of a tile (W8A8), group-wise W4A16 scales (five groups of 32,
the bonus tests) with weights of -8 among them, and for DDS a block row that may
be empty. Change the seed and the sizes (``M = 1``, another ``K``) and try an
all-zero row of ``x``. It does not test rounding ties or the clamp; the grader
does (handout, "Test your kernel locally").

Nothing here is graded: keep your own tests in this file or beside it, never
in the three kernel files. ``python assignment/check_mine.py solutions`` checks
another package laid out like ``assignment/`` (the reference, in the TA
repository).
"""

import importlib
import os
import sys
from pathlib import Path

import torch

if __package__:
    sys.exit("run it as a file: python assignment/check_mine.py (with -m, Triton loads before it can "
             "choose the CPU interpreter)")
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"   # no GPU: Triton's CPU interpreter, set before Triton loads
sys.path[0] = str(Path(__file__).resolve().parent.parent)   # the folder that holds the package

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
M, N = 33, 64   # small, and M is ragged


def data(K: int):
    """x [M, K] fp16 with NaN right after it in memory (a load past its end shows), w [N, K] fp16."""
    x = torch.full((M * K + 256,), torch.nan, device=DEVICE).half()[:M * K].view(M, K)
    return x.copy_(torch.randn(M, K, device=DEVICE)), torch.randn(N, K, device=DEVICE).half()


# Without a GPU, Triton's autotuner cannot time its configs; here every multi-config
# @triton.autotune runs one config at a time instead, and each is checked (the GPU's
# autotuner may pick any of them), as the grader does: the configs your
# prune_configs_by keeps for the call's arguments, or all of them if it fails here.
CONFIG = [0]   # which config every autotuned kernel runs (its index modulo its number of configs)
TUNED: dict = {}   # autotuner -> how many configs it has, for the kernels the last check launched


def _one_config_at_a_time() -> None:
    from triton.runtime.autotuner import Autotuner

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        configs = list(self.configs)
        if len(configs) > 1:
            try:
                configs = list(self.prune_configs(kwargs))
            except Exception:  # noqa: BLE001 - a perf model that needs a GPU: every config is checked
                pass
        TUNED[id(self)] = len(configs)
        config = configs[CONFIG[0] % len(configs)]
        if config.pre_hook is not None:
            config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
        self.best_config = config
        try:
            return self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            self.nargs = None

    Autotuner.run = run


def check(name: str, kernel, ref: torch.Tensor) -> None:
    """One task at a time: a stub that is not implemented stops nothing. An autotuned
    kernel is checked once per config (in the interpreter), one line each."""
    k, configs = 0, 1
    while k < configs:
        CONFIG[0] = k
        TUNED.clear()
        try:
            err = ((kernel().double() - ref).abs().max() / ref.abs().max()).item()
        except NotImplementedError as e:
            print(name, "not implemented:", e)
            return
        configs = max(TUNED.values(), default=1)
        print(name, f"{err:.1e}" + (f"  (autotune config {k + 1} of {configs})" if configs > 1 else ""))
        k += 1


def main(package: str = "assignment") -> None:
    if DEVICE == "cpu":
        _one_config_at_a_time()
    kernels = importlib.import_module(package)
    layers = importlib.import_module(f"{package}.layers")
    scale, quantize = layers.symmetric_scale, layers.quantize_symmetric
    torch.use_deterministic_algorithms(True, warn_only=True)   # torch.empty gives NaN: an unstored element shows
    torch.manual_seed(0)

    x, w = data(100)                                            # W8A8: K = 100, not a multiple of a K tile
    sx, sw = scale(x, 127, 1), scale(w, 127, 1)                 # [M, 1], [N, 1] float32
    qx, qw = quantize(x, sx, -128, 127), quantize(w, sw, -128, 127)
    check("W8A8 ", lambda: kernels.w8a8_mm(x, qw.t(), sx, sw), qx.double() @ qw.double().t() * sx * sw.t())

    x, w = data(160)                                            # W4A16: K = 160, five groups of 32 weights
    g = w.view(N, 5, 32)
    s4 = scale(g, 7, 2).half()
    q4 = quantize(g, s4, -8, 7)
    q4[:, :, ::7] = -8                                          # and weights of -8
    check("W4A16", lambda: kernels.w4a16_mm(x, layers.pack_int4(q4.view(N, 160)), s4[:, :, 0].t().contiguous()),
          x.double() @ (q4.double() * s4.double()).view(N, 160).t())

    x, w = data(96)                                             # DDS: N and K multiples of the 32 x 32 block
    keep = (torch.rand(N // 32, 3, device=DEVICE) < 0.5).repeat_interleave(32, 0).repeat_interleave(32, 1)
    wb = w * keep                                               # about half the blocks; a block row may be empty
    check("DDS  ", lambda: kernels.dds_mm(x, wb.to_sparse_bsr((32, 32))), x.double() @ wb.double().t())


if __name__ == "__main__":
    main(*sys.argv[1:2])
