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
- a store that leaves the element as it was is no conflict: programs that
  store the same value to the same element (a clamped tile that overlaps its
  neighbour's) give the same result in any order. For floats "the same" is
  within a few units of the element's precision at the tile's scale, since
  the interpreter's ``tl.dot`` (numpy's matmul) rounds a row differently
  depending on where it sits in the tile (movement.py ``_changed``);
- a launch that can order its programs itself is not judged: any atomic
  (a lock taken with ``tl.atomic_cas``; a counter whose last arriver reduces
  the others' partial tiles, as the reference's split-K does) or a volatile
  load (a flag it waits on). Only the plain accesses of a launch without
  them are. A kernel can hide a race behind an atomic that orders nothing;
  that costs it nothing on the CPU and its points on a GPU;
- only the tensors the wrapper made (outputs, scratch) are watched, not the
  call's inputs; every byte of an element is, so two views of one buffer
  with different element sizes meet where their bytes do.

Memory: the bytes each program touched in the launch (sparse, whatever the
buffer's size), resolved at its end; a launch that touches more than
``MAX_BYTES`` of them fails closed (its race cannot be ruled out; the CPU
tests' shapes touch far fewer). This file runs in the sandboxed executor and
depends on numpy only.
"""

from __future__ import annotations

import numpy as np

MAX_BYTES = 64 << 20   # byte touches recorded per launch (loads and stores, per program)
MAX_TEXT = 100


class Races:
    """The first cross-program race of any launch while the bounds check is installed."""

    def __init__(self):
        self.found: dict = {}            # the first race: kernel, tensor, kind, programs, element byte
        self._touches: dict[str, list] = {}   # buffer key -> [(byte offsets, program, store), ...]
        self._count = 0
        self._synchronised = False
        self._kernel = ""

    def begin(self, kernel: str) -> None:
        self._touches, self._count, self._synchronised, self._kernel = {}, 0, False, kernel

    def synchronised(self) -> None:
        """The launch used an atomic or a volatile load, which can order its programs: not judged."""
        self._synchronised = True

    def access(self, key: str, start: int, addr: np.ndarray, nbytes: int, program: int, store: bool) -> None:
        """Plain accesses of ``program`` to the elements at ``addr`` (``nbytes`` each) of buffer
        ``key`` (its first byte at ``start``); for a store, only the elements it changed."""
        if self._synchronised or self.found or addr.size == 0:
            return
        first = (addr - np.uint64(start)).astype(np.int64)
        offs = np.unique((first[:, None] + np.arange(nbytes, dtype=np.int64)[None, :]).reshape(-1))
        self._count += offs.size
        self._touches.setdefault(key, []).append((offs, program, store))

    def end(self, grid: tuple[int, int, int]) -> None:
        touches, self._touches = self._touches, {}
        if self._synchronised or self.found:
            return
        if self._count > MAX_BYTES:
            self.found = {"kernel": self._kernel[:MAX_TEXT], "tensor": "", "kind": "too many", "byte": 0,
                          "program": [0, 0, 0], "other": [0, 0, 0]}
            return
        for key, parts in touches.items():
            hit = _conflict(parts)
            if hit is not None:
                kind, off, first, other = hit
                self.found = {"kernel": self._kernel[:MAX_TEXT], "tensor": key[:MAX_TEXT], "kind": kind,
                              "byte": off, "program": list(_coords(first, grid)), "other": list(_coords(other, grid))}
                return


def _conflict(parts: list) -> tuple[str, int, int, int] | None:
    """(kind, byte offset, a program that changed it, another that changed or loaded it) of the
    first byte two programs share with at least one store, or None."""
    def pairs(store: bool):
        chosen = [(o, p) for o, p, s in parts if s == store]
        if not chosen:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        offs = np.concatenate([o for o, _ in chosen])
        progs = np.concatenate([np.full(o.size, p, np.int64) for o, p in chosen])
        both = np.unique(np.stack([offs, progs]), axis=1)   # (offset, program) once each, sorted by offset
        return both[0], both[1]

    s_off, s_prog = pairs(True)
    if s_off.size == 0:
        return None
    # Two storers of one byte: sorted by (offset, program), a repeated offset has two programs.
    same = np.flatnonzero(s_off[1:] == s_off[:-1])
    if same.size:
        i = int(same[0])
        return "store", int(s_off[i]), int(s_prog[i]), int(s_prog[i + 1])
    l_off, l_prog = pairs(False)
    where = np.searchsorted(s_off, l_off)
    inside = where < s_off.size
    hit = np.zeros(l_off.shape, dtype=bool)
    hit[inside] = (s_off[where[inside]] == l_off[inside]) & (s_prog[where[inside]] != l_prog[inside])
    if hit.any():
        j = int(np.flatnonzero(hit)[0])
        return "load", int(l_off[j]), int(s_prog[where[j]]), int(l_prog[j])
    return None


def linear(idx: tuple[int, int, int], grid: tuple[int, int, int]) -> int:
    return int(idx[0]) + int(grid[0]) * (int(idx[1]) + int(grid[1]) * int(idx[2]))


def _coords(program: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    x, rest = program % grid[0], program // grid[0]
    return x, rest % grid[1], rest // grid[1]
