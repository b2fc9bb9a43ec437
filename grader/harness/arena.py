"""Shared buffers the harness owns and the worker maps: inputs in, outputs out.

On the CPU an arena is an anonymous shared-memory file (``memfd_create``,
sealed against shrinking and growing) that both processes map: the worker
receives its descriptor over the session's socket, never a path, so it cannot
point the harness at another file (a symlink or a FIFO where the arena would
be), and cannot truncate it under the harness's mapping. On a GPU it is one
CUDA allocation whose descriptor the worker receives and maps
(``grader/worker/vmm.py``; it works across users, unlike CUDA IPC). The
harness keeps its own private copy of every input, so whatever the worker
writes into the arena can only spoil its own outputs, never the references
they are checked against.

Every tensor is surrounded by guard bytes (0xFF: NaN in fp16/fp32, -1 in the
integer types). A kernel that reads past the end of an input reads NaN
instead of a neighbour's finite values, and a write past the end of the
output changes a guard, which the harness sees.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import socket
import tempfile
from dataclasses import dataclass, field

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


def _shared_file(name: str, nbytes: int) -> int:
    """A descriptor of ``nbytes`` of anonymous shared memory, sealed at that size.

    memfd_create (Linux) has no path at all; elsewhere (a student's laptop) an
    unlinked file in a folder only this user can enter stands in, unsealed."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, nbytes)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        return fd
    folder = tempfile.mkdtemp(prefix="arena-")
    try:
        fd, path = tempfile.mkstemp(dir=folder)
        os.unlink(path)
    finally:
        os.rmdir(folder)
    os.ftruncate(fd, nbytes)
    return fd


class Arena:
    """The allocated buffer of a ``Plan``, inputs copied in, guards set."""

    def __init__(self, plan: Plan, device: str, name: str = "arena"):
        self.plan, self.device = plan, device
        nbytes = _round_up(plan.size, 16)
        if device == "cpu":
            self.fd = _shared_file(name, nbytes)
            os.fchmod(self.fd, 0o666)   # the worker may run as another user; it gets the descriptor only
            self._map = mmap.mmap(self.fd, nbytes)
            self.buf = torch.frombuffer(self._map, dtype=torch.uint8)
        else:
            self.fd = None
            self.shared = vmm.Shared(nbytes)
            self.buf = self.shared.tensor
        self.buf.fill_(CANARY)
        for spec, t in plan.inputs:
            view(self.buf, spec).copy_(t)
        if device != "cpu":
            torch.cuda.synchronize()

    def handle(self) -> dict:
        """What the worker needs to map this arena (trusted data for the worker);
        the memory itself travels as a descriptor first (``send``)."""
        return {"kind": "fd" if self.fd is not None else "vmm", "nbytes": self.buf.numel()}

    def send(self, sock: socket.socket) -> None:
        """Send this arena's descriptor over a Unix socket (the worker maps it)."""
        if self.fd is not None:
            socket.send_fds(sock, [b"a"], [self.fd])
        else:
            self.shared.send(sock)

    def __del__(self):   # the mapping goes with the last view of ``buf``
        if getattr(self, "fd", None) is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass

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
