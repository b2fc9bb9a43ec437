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
  neighbour's) give the same result in any order. Such a store still counts
  as the program's own for its later loads: a program that stores a value
  and reads it back reads the same in any order, whichever program's store
  landed (programs that each quantize the rows they need into one scratch,
  then read them). For floats "the same" is within two units of the
  element's own last place (movement.py ``_changed``; the executor's
  ``tl.dot`` rounds once, in float64, so that a row's result does not depend
  on its place in the tile as numpy's float32 matmul makes it);
- a launch that can order its programs itself is not judged: any atomic
  with a live lane (a lock taken with ``tl.atomic_cas``; a counter whose last arriver reduces
  the others' partial tiles, as the reference's split-K does) or a volatile
  load (a flag it waits on). Only the plain accesses of a launch without
  them are. A kernel can hide a race behind a live atomic that orders nothing;
  that costs it nothing on the CPU and its points on a GPU;
- the tensors the wrapper made (outputs, scratch) are watched, every byte
  of an element, so two views of one buffer with different element sizes
  meet where their bytes do. The call's inputs are read-only: any kernel
  store into one is a finding of its own (``input``), since an input used
  as a channel between programs is a race the record would not see.

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
        self._touches: dict[str, list] = {}   # buffer key -> [(byte offsets, program, kind, sequence), ...]
        self._count = 0
        self._sequence = 0
        self._synchronised = False
        self._kernel = ""

    def begin(self, kernel: str) -> None:
        self._touches, self._count, self._synchronised, self._kernel = {}, 0, False, kernel

    def synchronised(self) -> None:
        """The launch used an atomic or a volatile load, which can order its programs: not judged."""
        self._synchronised = True

    def input_store(self, key: str, program: int, grid: tuple[int, int, int]) -> None:
        """A kernel stored into the call's input ``key``: inputs are read-only, whatever the launch."""
        if not self.found:
            self.found = {"kernel": self._kernel[:MAX_TEXT], "tensor": key[:MAX_TEXT], "kind": "input", "byte": 0,
                          "program": list(_coords(program, grid)), "other": [0, 0, 0]}

    def access(self, key: str, start: int, addr: np.ndarray, nbytes: int, program: int, kind: str) -> None:
        """Plain accesses of ``program`` to the elements at ``addr`` (``nbytes`` each) of buffer
        ``key`` (its first byte at ``start``). ``kind``: "load"; "store", a store that changed
        the element; "same", one that left it as it was (no conflict, but the program's own for
        its later loads)."""
        if self._synchronised or self.found or addr.size == 0:
            return
        first = (addr - np.uint64(start)).astype(np.int64)
        offs = np.unique((first[:, None] + np.arange(nbytes, dtype=np.int64)[None, :]).reshape(-1))
        self._count += offs.size
        self._sequence += 1
        self._touches.setdefault(key, []).append((offs, program, kind, self._sequence))

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


def _table(parts: list, kinds: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offset, program, sequence) of every byte touch of ``kinds``, sorted by offset, then program,
    then sequence."""
    chosen = [(o, p, q) for o, p, k, q in parts if k in kinds]
    if not chosen:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    offs = np.concatenate([o for o, _, _ in chosen])
    progs = np.concatenate([np.full(o.size, p, np.int64) for o, p, _ in chosen])
    seqs = np.concatenate([np.full(o.size, q, np.int64) for o, _, q in chosen])
    order = np.lexsort((seqs, progs, offs))
    return offs[order], progs[order], seqs[order]


def _conflict(parts: list) -> tuple[str, int, int, int] | None:
    """(kind, byte offset, a program that changed it, another that changed or loaded it) of the
    first byte two programs share with at least one changing store, or None. A load is no
    conflict where its own program stored that byte before it (a changing store or the same value)."""
    s_off, s_prog, _ = _table(parts, ("store",))
    if s_off.size == 0:
        return None
    # Two storers of one byte: sorted by (offset, program), an offset repeated with another program.
    two = np.flatnonzero((s_off[1:] == s_off[:-1]) & (s_prog[1:] != s_prog[:-1]))
    if two.size:
        i = int(two[0])
        return "store", int(s_off[i]), int(s_prog[i]), int(s_prog[i + 1])
    # Each stored byte has one storer now: its program, by offset.
    first = np.r_[True, s_off[1:] != s_off[:-1]]
    owner_off, owner = s_off[first], s_prog[first]
    l_off, l_prog, l_seq = _table(parts, ("load",))
    if l_off.size == 0:
        return None
    at = np.minimum(np.searchsorted(owner_off, l_off), owner_off.size - 1)
    foreign = np.flatnonzero((owner_off[at] == l_off) & (owner[at] != l_prog))
    if foreign.size == 0:
        return None
    # A load of another program's byte is fine where the loading program stored that byte before it:
    # it reads its own value or an equal one, in any order.
    c_off, c_prog, c_seq = _table(parts, ("store", "same"))
    if c_off.size:
        head = np.r_[True, (c_off[1:] != c_off[:-1]) | (c_prog[1:] != c_prog[:-1])]   # each pair's first store
        h_off, h_prog, h_seq = c_off[head], c_prog[head], c_seq[head]
        width = int(max(h_prog.max(), l_prog.max())) + 1   # (offset, program) as one sortable number
        pos = np.minimum(np.searchsorted(h_off * width + h_prog, l_off[foreign] * width + l_prog[foreign]),
                         h_off.size - 1)
        covered = (h_off[pos] == l_off[foreign]) & (h_prog[pos] == l_prog[foreign]) & (h_seq[pos] < l_seq[foreign])
        foreign = foreign[~covered]
    if foreign.size == 0:
        return None
    j = int(foreign[0])
    return "load", int(l_off[j]), int(owner[at[j]]), int(l_prog[j])


def linear(idx: tuple[int, int, int], grid: tuple[int, int, int]) -> int:
    return int(idx[0]) + int(grid[0]) * (int(idx[1]) + int(grid[1]) * int(idx[2]))


def _coords(program: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    x, rest = program % grid[0], program // grid[0]
    return x, rest % grid[1], rest // grid[1]
