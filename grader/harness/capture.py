"""What the GPU will launch: the worker calls the wrapper at the rubric's GPU shapes, launches intercepted.

A CPU run grades correctness on small shapes; a wrapper that picks its tiles,
warps or kernels by shape launches something else at the GPU's shapes. Here
the harness describes the inputs of every GPU test of a task (shapes, dtypes,
strides, a BSR weight's real index arrays; no values) and the worker
(grader/worker/capture.py) calls the wrapper on uninitialised tensors of those
shapes with Triton's launches intercepted: each launch is recorded for the
compile check under the test's name, and for the performance tests a few of
its programs are run and counted for the speed estimate (grader/estimate.py).
Nothing here changes a score by itself: what the compile check says about
the captured kernels does (a kernel that would not compile or launch on the
GPU fails the tests that launch it), as for the kernels the CPU shapes
launched. The inputs are built from one fixed seed (``SEED``), not the
grade's: a BSR weight's sparsity pattern decides how many blocks each
sampled program walks, so a grade's seed would move the estimate.
"""

from __future__ import annotations

import warnings

import torch

from ..rubric import TestSpec
from ..tasks import get
from .session import Session, WorkerGone

BUDGET_S = 90.0        # the whole capture of one worker (probes stop early past it)
MIN_LEFT_S = 30.0      # no capture when the worker's deadline is nearer than this
SEED = 20261127        # every capture's inputs, whatever the grade's seed: the same files, the same estimate


def describe(task: str, shape, options: dict, seed: int) -> list[dict]:
    """The worker's descriptions of one call's arguments at ``shape``: dense tensors
    as {"empty": shape, stride, dtype}, a BSR tensor as {"bsr": ...} with its index
    arrays. Built on PyTorch's meta device (no memory, no time) where the task's
    input builder allows it; otherwise (a sparse weight) the weights are built for
    real with one row of activations, and the activations described at M rows."""
    spec = get(task)
    M, N, K = shape
    opts = spec.defaults(options)
    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            args, _ = spec.build_inputs(M, N, K, torch.Generator().manual_seed(seed), **opts)
    except (NotImplementedError, RuntimeError, TypeError, ValueError):
        args, _ = spec.make_inputs((1, N, K), options, seed, "cpu")
        args = tuple(_rows(a, M) if i in spec.activation_args else a for i, a in enumerate(args))
    return [_describe(a) for a in args]


def _rows(a: torch.Tensor, M: int) -> torch.Tensor:
    """An activation with M rows: same dtype and strides, no memory (meta)."""
    return torch.empty_strided((M, *a.shape[1:]), a.stride(), dtype=a.dtype, device="meta")


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _describe(a: torch.Tensor) -> dict:
    if a.layout == torch.strided:
        return {"empty": {"shape": list(a.shape), "stride": list(a.stride()), "dtype": _dtype(a)}}
    crow, col = a.crow_indices(), a.col_indices()
    return {"bsr": {"size": list(a.shape), "crow": crow.tolist(), "col": col.tolist(),
                    "index_dtype": _dtype(crow), "dtype": _dtype(a.values()),
                    "blocksize": list(a.values().shape[1:])}}


def cases(task: str, specs: list[TestSpec]) -> list[dict]:
    """One capture case per test that has a GPU shape: its name, its arguments
    (built from ``SEED``), and whether to count its programs (performance tests)."""
    out = []
    for s in specs:
        if s.shape is None:
            continue
        out.append({"test": s.name, "args": describe(task, s.shape, s.options, SEED),
                    "probe": s.kind == "performance"})
    return out


def capture(session: Session, task: str, specs: list[TestSpec], budget_s: float) -> dict:
    """Have the worker capture every case; {"cases": {test: {"launches", ...}}} or {"error"}
    (with "checks_off" when the worker could not intercept the launches)."""
    todo = cases(task, specs)
    if not todo:
        return {"cases": {}}
    try:
        reply = session.request({"op": "capture", "cases": todo, "names": list(get(task).arg_names),
                                 "budget_s": budget_s})
    except WorkerGone as e:
        return {"error": f"not captured: {e}", "gone": e.kind}
    if not reply["ok"]:
        why = ((reply.get("error") or "").strip().splitlines() or ["?"])[-1]
        return {"error": f"not captured: {why}"[:500], "checks_off": reply.get("checks_off") or {}}
    return {"cases": reply.get("capture", {}).get("cases", {})}

