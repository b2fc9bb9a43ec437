"""Shared buffers the harness owns and the worker maps: inputs in, outputs out.

On the CPU an arena is a file in the worker's scratch folder that both
processes map (``torch.from_file(shared=True)``); on a GPU it is one CUDA
allocation whose file descriptor the worker receives and maps
(``grader/worker/vmm.py``; it works across users, unlike CUDA IPC). The harness keeps its own
private copy of every input, so whatever the worker writes into the arena can
only spoil its own outputs, never the references they are checked against.

Every tensor is surrounded by guard bytes (0xFF: NaN in fp16/fp32, -1 in the
integer types). A kernel that reads past the end of an input reads NaN
instead of a neighbour's finite values, and a write past the end of the
output changes a guard, which the harness sees.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..worker import vmm
from ..worker.layout import ALIGN, build, dtype_name, view

GUARD_BYTES = 4096
CANARY = 0xFF


def _extent(t: torch.Tensor) -> int:
    """Elements spanned by ``t`` in its storage (a transposed view spans the whole base)."""
    if t.numel() == 0:
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))


def _round_up(n: int, to: int = ALIGN) -> int:
    return (n + to - 1) // to * to


@dataclass
class Plan:
    """Where each tensor goes; ``Arena`` allocates it and copies the inputs in."""
    size: int = GUARD_BYTES
    inputs: list = field(default_factory=list)   # (spec, tensor) to copy in
    guards: list = field(default_factory=lambda: [(0, GUARD_BYTES)])  # byte ranges that stay CANARY

    def _reserve(self, nbytes: int) -> int:
        start = _round_up(self.size)
        self.guards.append((self.size, start))
        self.size = _round_up(start + nbytes) + GUARD_BYTES
        self.guards.append((start + nbytes, self.size))
        return start

    def tensor(self, t: torch.Tensor) -> dict:
        spec = {"offset": self._reserve(_extent(t) * t.element_size()), "dtype": dtype_name(t.dtype),
                "shape": list(t.shape), "stride": list(t.stride())}
        self.inputs.append((spec, t))
        return spec

    def arg(self, a: torch.Tensor) -> dict:
        if a.layout == torch.sparse_bsr:
            return {"bsr": {"crow": self.tensor(a.crow_indices()), "col": self.tensor(a.col_indices()),
                            "values": self.tensor(a.values()), "size": list(a.shape)}}
        return {"tensor": self.tensor(a)}

    def output(self, shape, dtype=torch.float16) -> dict:
        """Room for one output, left as canaries until the worker writes it."""
        n = 1
        for s in shape:
            n *= s
        stride, acc = [], 1
        for s in reversed(shape):
            stride.insert(0, acc)
            acc *= max(s, 1)
        size = torch.empty((), dtype=dtype).element_size()
        return {"offset": self._reserve(n * size), "dtype": dtype_name(dtype),
                "shape": list(shape), "stride": stride}


class Arena:
    """The allocated buffer of a ``Plan``, inputs copied in, guards set."""

    def __init__(self, plan: Plan, device: str, folder: Path | None = None, name: str = "arena"):
        self.plan, self.device = plan, device
        nbytes = _round_up(plan.size, 16)
        if device == "cpu":
            self.path = Path(folder) / f"{name}.bin"
            with open(self.path, "wb") as f:
                f.truncate(nbytes)
            os.chmod(self.path, 0o666)  # the worker may run as another user
            self.buf = torch.from_file(str(self.path), shared=True, size=nbytes, dtype=torch.uint8)
        else:
            self.path = None
            self.shared = vmm.Shared(nbytes)
            self.buf = self.shared.tensor
        self.buf.fill_(CANARY)
        for spec, t in plan.inputs:
            view(self.buf, spec).copy_(t)
        if device != "cpu":
            torch.cuda.synchronize()

    def handle(self) -> dict:
        """What the worker needs to map this arena (trusted data for the worker).

        A GPU arena's memory itself travels as a descriptor: ``Session.map``."""
        if self.path is not None:
            return {"kind": "file", "path": str(self.path), "nbytes": self.buf.numel()}
        return {"kind": "vmm", "nbytes": self.buf.numel()}

    def view(self, spec: dict) -> torch.Tensor:
        return view(self.buf, spec)

    def arg(self, arg: dict):
        return build(self.buf, arg)

    def reset_outputs(self, specs: list[dict]) -> None:
        for spec in specs:
            view(self.buf, {**spec, "dtype": "uint8", "shape": [_nbytes(spec)], "stride": [1]}).fill_(CANARY)

    def guards_broken(self) -> list[int]:
        """Byte offsets of the first changed byte of every guard that is no longer intact."""
        broken = []
        for start, end in self.plan.guards:
            if end > start:
                bad = (self.buf[start:end] != CANARY).nonzero()
                if bad.numel():
                    broken.append(start + int(bad[0]))
        return broken


def _nbytes(spec: dict) -> int:
    size = torch.empty((), dtype=getattr(torch, spec["dtype"])).element_size()
    n = 1
    for s in spec["shape"]:
        n *= s
    return n * size
