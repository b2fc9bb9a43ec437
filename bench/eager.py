"""The layers where users call them: one forward in eager mode, host included, and
the same forwards captured in a CUDA graph (GPU).

    python -m bench.eager [--json PATH] [--quick]

For QuantizedLinear_w8a8 and QuantLinear_w4a16 on the benchmark's weights
(4096 x 4096, 11008 x 4096, 4096 x 11008; no bias, as in LLaMA) and
SparseLinear on 1024 x 1024 at 5, 25 and 50 % of its blocks, at M = 1, 4, 16,
and a row with bias per layer, this times in one run:

- **eager us**: one forward in a loop of back-to-back forwards, host
  included: n calls timed with time.perf_counter and one synchronize at the
  end, after warm-up, the median of several such loops. The loop cycles
  through L copies of the layer (distinct weights, together at least 4x the
  L2 cache, at most 32 copies) so that each call reads its weight from
  memory, as the layers of a model do. Whichever of the host and the GPU is
  slower sets this number.
- **graph us**: the same forwards captured once in a CUDA graph and
  replayed (``torch.cuda.graph``, the user's option that docs/performance.md
  shows): per forward, the replay's time over the forwards it holds. The
  host's cost is gone; what is left is the device's, launch gaps included.
- **host us**: the same loop while the GPU sleeps (``torch.cuda._sleep``,
  checked to be still sleeping when the loop ends, so no call waited for
  the GPU): the host's own time per call, Python, PyTorch and the launches.
- where that host time goes: the same loop with timers around the layer's
  PyTorch ops, the wrappers' input checks and config choice, the
  allocations and each Triton launch (``kernel[grid](...)``); ``other`` is
  the rest (nn.Module's call, the layers' and wrappers' Python). The timers
  cost about 0.1 us each, which ``other`` absorbs.
- the same for fp16 ``nn.Linear`` with the same weight, and for the int4
  rows tinygemm (``torch._weight_int4pack_mm``, bf16, groups of 128, the op
  alone), as anchors.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import statistics
import sys
import time
from collections import Counter

import torch

from solutions import dds as dds_solution
from solutions import w4a16 as w4a16_solution
from solutions import w8a8 as w8a8_solution
from solutions.layers import BSR_BLOCK, QuantizedLinear_w8a8, QuantLinear_w4a16, SparseLinear

MODULES = (w8a8_solution, w4a16_solution, dds_solution)
LAYERS = {"w8a8": QuantizedLinear_w8a8, "w4a16": QuantLinear_w4a16, "dds": SparseLinear}
MAX_COPIES = 32
DEVICE = "cuda"


# ------------------------------------------------------------------ clocks

def eager_us(seq: list, rounds: int = 5, warmup: int = 20) -> float:
    """Per call of ``seq`` (callables, run in order), host included: one synchronize per loop."""
    for f in seq[:warmup]:
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for f in seq:
            f()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / len(seq) * 1e6)
    return statistics.median(times)


def graph_us(seq: list, rounds: int = 5) -> float:
    """Per call of ``seq`` captured once in a CUDA graph and replayed (warmed up on a side
    stream first, as PyTorch's recipe says): the device's time, no host per call."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for f in seq[:3]:
            f()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for f in seq:
            f()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / len(seq) * 1e6)
    return statistics.median(times)


def _host_loop(seq: list) -> float:
    """Seconds the host spends on ``seq`` while the GPU sleeps through all of it (on a GPU)."""
    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        for f in seq:
            f()
        return time.perf_counter() - t0
    cycles = 20_000_000  # about 10 ms at H100/H200 clocks; grown until it outlasts the loop
    for _ in range(8):
        torch.cuda.synchronize()
        torch.cuda._sleep(cycles)
        asleep = torch.cuda.Event()
        asleep.record()
        t0 = time.perf_counter()
        for f in seq:
            f()
        elapsed = time.perf_counter() - t0
        still_asleep = not asleep.query()
        torch.cuda.synchronize()
        if still_asleep:
            return elapsed
        cycles *= 4
    raise RuntimeError("the GPU could not be kept busy through the host loop")


def host_us(seq: list, rounds: int = 7) -> float:
    """Host time per call of ``seq`` (at most ~60 calls: the launch queue must not fill up)."""
    for f in seq[:5]:
        f()
    torch.cuda.synchronize()
    return statistics.median(_host_loop(seq) / len(seq) * 1e6 for _ in range(rounds))


class Sections:
    """Timers around named functions while a host loop runs (``breakdown``)."""

    def __init__(self):
        self.seconds: Counter = Counter()
        self._undo: list = []

    def wrap(self, owner, attr: str, name: str) -> None:
        original = getattr(owner, attr)
        seconds = self.seconds

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[name] += time.perf_counter() - t0
        setattr(owner, attr, timed)
        self._undo.append((owner, attr, original))

    def wrap_property(self, cls, attr: str, name: str) -> None:
        original = cls.__dict__[attr]
        seconds = self.seconds

        def timed(obj):
            t0 = time.perf_counter()
            try:
                return original.fget(obj)
            finally:
                seconds[name] += time.perf_counter() - t0
        setattr(cls, attr, property(timed))
        self._undo.append((cls, attr, original))

    def wrap_launches(self) -> None:
        """Each Triton launch, ``kernel[grid](...)`` (JITFunction.run, or the interpreter's), by kernel."""
        import triton.runtime.interpreter as interpreter
        import triton.runtime.jit as jit

        seconds = self.seconds
        for cls in (jit.JITFunction, interpreter.InterpretedFunction):
            original = cls.run

            def run(kernel, *args, _original=original, **kwargs):
                t0 = time.perf_counter()
                try:
                    return _original(kernel, *args, **kwargs)
                finally:
                    seconds[f"launch {kernel.fn.__name__}"] += time.perf_counter() - t0
            cls.run = run
            self._undo.append((cls, "run", original))

    def restore(self) -> None:
        for owner, attr, original in reversed(self._undo):
            setattr(owner, attr, original)
        self._undo.clear()


def breakdown(seq: list) -> dict:
    """Host us per call of ``seq`` by section, ``other`` the rest; ``total`` is with the timers on."""
    import solutions.layers as layers

    for f in seq[:5]:
        f()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    s = Sections()
    try:
        for module in MODULES:
            for attr in dir(module):
                if attr.startswith("check_"):
                    s.wrap(module, attr, "checks")
            s.wrap(module, "_select_config", "config")
        for attr in ("empty", "zeros"):
            s.wrap(torch, attr, "allocations")
        s.wrap(layers, "_flatten_input", "layer: input checks, flatten")
        s.wrap(layers, "symmetric_scale", "layer: token scale")
        s.wrap_property(SparseLinear, "weight_bsr", "layer: BSR view")
        s.wrap_launches()
        total = _host_loop(seq)
    finally:
        s.restore()
    per_call = {name: sec / len(seq) * 1e6 for name, sec in s.seconds.items()}
    total_us = total / len(seq) * 1e6
    return {**dict(sorted(per_call.items())), "other": total_us - sum(per_call.values()), "total": total_us}


# ------------------------------------------------------------------ the rows

def weight(N: int, K: int, seed: int, density: float | None = None, device: str | None = None) -> torch.Tensor:
    """A random fp16 [N, K] weight; with ``density``, that fraction of its 32x32 blocks kept."""
    device = device or DEVICE
    g = torch.Generator(device=device).manual_seed(seed)
    w = torch.randn(N, K, generator=g, device=device) * K ** -0.5
    if density is not None:
        keep = torch.rand(N // BSR_BLOCK, K // BSR_BLOCK, generator=g, device=device) < density
        w = w * keep.repeat_interleave(BSR_BLOCK, 0).repeat_interleave(BSR_BLOCK, 1)
    return w.to(torch.float16)


def layer_from(kind: str, w: torch.Tensor, bias: bool = False, **kw):
    N, K = w.shape
    layer = LAYERS[kind](K, N, bias=bias, device=w.device, **kw)
    with torch.no_grad():
        layer.weight.copy_(w)
        if bias:
            layer.bias.normal_()
    return layer.prepare_for_eval()


def linear_from(w: torch.Tensor, bias: bool = False) -> torch.nn.Linear:
    N, K = w.shape
    layer = torch.nn.Linear(K, N, bias=bias, device=w.device, dtype=torch.float16)
    with torch.no_grad():
        layer.weight.copy_(w)
        if bias:
            layer.bias.normal_()
    return layer


def copies_for(nbytes: int) -> int:
    """How many layers of ``nbytes`` of weight together hold at least 4x the L2 cache."""
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return max(2, min(MAX_COPIES, math.ceil(4 * l2 / nbytes)))


def weight_bytes(module: torch.nn.Module) -> int:
    """Bytes the forward reads: the prepared weight (not the fp16 master of a prepared layer)."""
    if isinstance(module, (QuantizedLinear_w8a8, QuantLinear_w4a16, SparseLinear)):
        return sum(b.numel() * b.element_size() for b in module.buffers())
    return module.weight.numel() * module.weight.element_size()


def _calls(modules: list, x: torch.Tensor, n: int) -> list:
    return [functools.partial(m, x) for m, _ in zip(itertools.cycle(modules), range(n))]


def measure_row(kind: str, M: int, N: int, K: int, density: float | None = None, bias: bool = False,
                n_eager: int = 200, n_host: int = 40, n_graph: int = 64) -> dict:
    w0 = weight(N, K, 0, density)
    probe = layer_from(kind, w0, bias)
    copies = copies_for(weight_bytes(probe))
    layers = [probe] + [layer_from(kind, weight(N, K, i, density), bias) for i in range(1, copies)]
    fp16_copies = copies_for(N * K * 2)
    linears = [linear_from(weight(N, K, i, density), bias) for i in range(fp16_copies)]
    x = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
    row = dict(layer=kind, M=M, N=N, K=K, density=density, bias=bias, copies=copies, fp16_copies=fp16_copies,
               eager_us={}, host_us={}, breakdown_us={})
    with torch.inference_mode():
        row["eager_us"]["layer"] = eager_us(_calls(layers, x, n_eager))
        row["eager_us"]["graph"] = graph_us(_calls(layers, x, n_graph))
        row["host_us"]["layer"] = host_us(_calls(layers, x, n_host))
        row["breakdown_us"]["layer"] = breakdown(_calls(layers, x, n_host))
        row["eager_us"]["fp16"] = eager_us(_calls(linears, x, n_eager))
        row["eager_us"]["fp16 graph"] = graph_us(_calls(linears, x, n_graph))
        row["host_us"]["fp16"] = host_us(_calls(linears, x, n_host))
        if kind == "w4a16":
            from grader.tasks.w4a16 import _tinygemm

            ops = [_tinygemm((x,), {"weight": weight(N, K, i)}) for i in range(copies)]
            seq = [ops[i % len(ops)] for i in range(n_eager)]
            row["eager_us"]["tinygemm"] = eager_us(seq)
            row["host_us"]["tinygemm"] = host_us(seq[:n_host])
    del layers, linears
    torch.cuda.empty_cache()
    return row


def unit_costs(M: int = 16, K: int = 4096) -> dict:
    """Host us per call of the pieces every forward is made of, on this machine."""
    x = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
    identity = torch.nn.Identity()
    pieces = {
        "torch.empty [16, 4096] fp16": lambda: torch.empty((M, K), device=x.device, dtype=torch.float16),
        "one elementwise op (torch.neg)": lambda: torch.neg(x),
        "vector_norm(inf) to float32 [16, 4096]": lambda: torch.linalg.vector_norm(
            x, math.inf, dim=1, keepdim=True, dtype=torch.float32),
        "nn.Module call (nn.Identity)": lambda: identity(x),
        "x.contiguous() (already)": lambda: x.contiguous(),
        "torch.cuda.current_device()": torch.cuda.current_device,
        "torch.cuda.get_device_capability()": lambda: torch.cuda.get_device_capability(x.device),
    }
    with torch.inference_mode():
        return {name: host_us([f] * 40) for name, f in pieces.items()}


QUANT_SHAPES = ((4096, 4096), (11008, 4096), (4096, 11008))


def rows(quick: bool = False) -> list[tuple]:
    """(kind, M, N, K, density, bias) of every row."""
    out = []
    for kind in ("w8a8", "w4a16"):
        for N, K in QUANT_SHAPES[:1] if quick else QUANT_SHAPES:
            out += [(kind, M, N, K, None, False) for M in ((1,) if quick else (1, 4, 16))]
        out.append((kind, 1, 4096, 4096, None, True))
    for density in (0.25,) if quick else (0.05, 0.25, 0.5):
        out += [("dds", M, 1024, 1024, density, False) for M in ((1,) if quick else (1, 4, 16))]
    out.append(("dds", 1, 1024, 1024, 0.25, True))
    return out


def table(records: list[dict]) -> str:
    """The rows as text. Records from before the reference dropped its launch plans (2026-11-25)
    name the reference's times "after" (and "before": the code as first written, not shown)."""
    from tabulate import tabulate

    def us(d, *keys):
        return next((f"{d[k]:.1f}" for k in keys if d.get(k) is not None), "-")
    body = []
    for r in records:
        shape = f"{r['M']} @{r['density']:.0%}" if r["density"] is not None else f"{r['M']}x{r['N']}x{r['K']}"
        e, h = r["eager_us"], r["host_us"]
        body.append([r["layer"] + (" +bias" if r["bias"] else ""), shape, us(e, "layer", "after"), us(e, "graph"),
                     us(e, "fp16"), us(e, "fp16 graph"), us(e, "tinygemm"), us(h, "layer", "after"), us(h, "fp16")])
    return tabulate(body, headers=["layer", "M x N x K", "eager", "graph", "eager fp16", "graph fp16",
                                   "eager tinygemm", "host", "host fp16"], floatfmt=".1f")


def breakdown_table(r: dict) -> str:
    from tabulate import tabulate

    b = r["breakdown_us"]["layer"]
    names = sorted(set(b) - {"other", "total"}) + ["other", "total"]
    return tabulate([[n, f"{b.get(n, 0):.2f}"] for n in names], headers=["host us per call", "layer"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one shape per layer, M = 1")
    ap.add_argument("--json", default="eager-results.json", help="where to write all numbers")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench.eager needs a CUDA GPU (none found).")
        return 1
    import triton

    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    started = time.perf_counter()
    units = unit_costs()
    for name, us in units.items():
        print(f"{us:8.2f} us  {name}")
    records = []
    for spec in rows(args.quick):
        records.append(measure_row(*spec))
        r = records[-1]
        print(table([r]).splitlines()[-1], f"({time.perf_counter() - started:.0f} s)", flush=True)
        print(breakdown_table(r), flush=True)
    print()
    print(table(records))
    print(f"\n{len(records)} rows; {time.perf_counter() - started:.0f} s")
    with open(args.json, "w") as f:
        json.dump(dict(gpu=gpu, torch=torch.__version__, triton=triton.__version__,
                       l2_bytes=torch.cuda.get_device_properties(0).L2_cache_size,
                       unit_costs_us=units, results=records), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
