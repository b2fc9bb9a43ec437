"""Capture a function's GPU work as one CUDA graph (PyTorch's recipe).

Used on both sides of the boundary, so that the worker's timed batch and the
harness's baseline batch are captured and replayed the same way.
"""

from __future__ import annotations

import contextlib

import torch


def capture(fn, recorder=None) -> torch.cuda.CUDAGraph:
    """Warm ``fn`` up on a side stream, then capture it; ``recorder`` (a context
    manager, optional) is active while it is captured."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with recorder or contextlib.nullcontext(), torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def one_kernel_graph() -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """A graph of one tiny kernel (a fill of one float) and the tensor it writes, which the
    caller keeps as long as the graph: replayed and synchronized, its time is what a timed
    batch costs besides its calls (the clock's fixed cost, grader/harness/measure.py)."""
    cell = torch.zeros(1, device="cuda")
    return capture(lambda: cell.fill_(1.0)), cell
