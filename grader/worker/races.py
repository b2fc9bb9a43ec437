"""Cross-program races of one interpreted launch: what the interpreter's order hides.

Triton's interpreter runs a launch's programs one after another; a GPU runs them
at the same time, in no set order. A kernel whose programs share elements
without an atomic (split-K that adds its partial tile to the output with a
plain load and store, a program that reads what another one writes) is right
in the interpreter and wrong, or right by chance, on a GPU. This record finds
such a launch from its memory accesses, which the bounds check (movement.py)
already sees:

- a *conflict* is an element that one program stores and another program
  loads or stores, in the same launch, neither access atomic;
- a store that leaves the element as it was (the same bits) is no conflict:
  programs that store the same value to the same element (a clamped tile
  that overlaps its neighbour's) give the same result in any order;
- a launch that can order its programs itself is not judged: any atomic
  (a lock taken with ``tl.atomic_cas``; a counter whose last arriver reduces
  the others' partial tiles, as the reference's split-K does) or a volatile
  load (a flag it waits on). Only the plain accesses of a launch without
  them are. A kernel can hide a race behind an atomic that orders nothing;
  that costs it nothing on the CPU and its points on a GPU;
- only the tensors the wrapper made (outputs, scratch) are watched, not the
  call's inputs; an element is its first byte, so two views of one buffer
  with different element sizes are not compared byte by byte;
- a buffer larger than ``MAX_WATCHED`` bytes is not watched (the CPU tests'
  shapes are far smaller).

Memory: per watched buffer, two loaders and two storers (int32) per byte,
allocated at its first access in the launch and dropped at its end. This
file runs in the sandboxed executor and depends on numpy only.
"""

from __future__ import annotations

import numpy as np

MAX_WATCHED = 16 << 20   # bytes: 256 MiB of record at most; the CPU shapes need a few kB
MAX_TEXT = 100


class _Buffer:
    """Who loaded and who stored each byte of one buffer in the current launch: the first
    program and a second, different one (-1: none)."""

    def __init__(self, nbytes: int):
        self.loader = np.full((2, nbytes), -1, dtype=np.int32)
        self.storer = np.full((2, nbytes), -1, dtype=np.int32)

    @staticmethod
    def _mark(who: np.ndarray, offs: np.ndarray, program: int) -> None:
        offs = np.unique(offs)
        seen = who[0, offs]
        who[0, offs[seen < 0]] = program
        clash = offs[(seen >= 0) & (seen != program)]
        who[1, clash[who[1, clash] < 0]] = program

    def load(self, offs: np.ndarray, program: int) -> None:
        self._mark(self.loader, offs, program)

    def store(self, offs: np.ndarray, program: int) -> None:
        self._mark(self.storer, offs, program)

    def conflict(self) -> tuple[str, int, int, int] | None:
        """(kind, byte offset, a program that stored it, another that stored or loaded it) of
        the first conflicting element, or None."""
        stored = self.storer[0] >= 0
        both = np.flatnonzero(stored & (self.storer[1] >= 0))
        if both.size:
            off = int(both[0])
            return "store", off, int(self.storer[0, off]), int(self.storer[1, off])
        first = self.loader[0]
        other = np.where(first != self.storer[0], first, self.loader[1])   # a loader that is not the storer
        loaded = np.flatnonzero(stored & (other >= 0))
        if loaded.size:
            off = int(loaded[0])
            return "load", off, int(self.storer[0, off]), int(other[off])
        return None


class Races:
    """The first cross-program race of any launch while the bounds check is installed."""

    def __init__(self):
        self.found: dict = {}            # the first race: kernel, tensor, kind, programs, element byte
        self._buffers: dict[str, tuple[int, _Buffer]] = {}
        self._synchronised = False
        self._kernel = ""

    def begin(self, kernel: str) -> None:
        self._buffers, self._synchronised, self._kernel = {}, False, kernel

    def synchronised(self) -> None:
        """The launch used an atomic or a volatile load, which can order its programs: not judged."""
        self._synchronised = True

    def _buffer(self, key: str, start: int, end: int) -> _Buffer | None:
        if key not in self._buffers:
            if end - start > MAX_WATCHED:
                return None
            self._buffers[key] = (start, _Buffer(end - start))
        return self._buffers[key][1]

    def access(self, key: str, start: int, end: int, addr: np.ndarray, program: int, store: bool) -> None:
        """Plain accesses of ``program`` to buffer ``key`` ([start, end) in bytes) at ``addr``
        (element addresses inside it; for a store, only those whose bits changed)."""
        if self._synchronised or self.found or addr.size == 0:
            return
        buf = self._buffer(key, start, end)
        if buf is None:
            return
        offs = (addr - np.uint64(start)).astype(np.int64)
        (buf.store if store else buf.load)(offs, program)

    def end(self, grid: tuple[int, int, int]) -> None:
        buffers, self._buffers = self._buffers, {}
        if self._synchronised or self.found:
            return
        for key, (_, buf) in buffers.items():
            hit = buf.conflict()
            if hit is None:
                continue
            kind, off, first, other = hit
            self.found = {"kernel": self._kernel[:MAX_TEXT], "tensor": key[:MAX_TEXT], "kind": kind,
                          "byte": off, "program": list(_coords(first, grid)), "other": list(_coords(other, grid))}
            return


def linear(idx: tuple[int, int, int], grid: tuple[int, int, int]) -> int:
    return int(idx[0]) + int(grid[0]) * (int(idx[1]) + int(grid[1]) * int(idx[2]))


def _coords(program: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    x, rest = program % grid[0], program // grid[0]
    return x, rest % grid[1], rest // grid[1]
