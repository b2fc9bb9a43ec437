"""The one way the worker's checks replace attributes of Triton's classes, and put them back.

capture.py (the launch capture and the sampled programs' counts), movement.py
(data movement, the bounds check, the arithmetic count) and provenance.py (who
wrote the output) each build a dict of replacements and install it here:

    hooks = Hooks()
    hooks.install({(InterpreterBuilder, "create_dot"): dot, ...})
    ...
    hooks.restore()   # the originals again, last installed first

An attribute that the class only inherited goes again on restore (its own
entry is deleted), so that a later patch of the base class is not shadowed.
Every name patched is listed in fence.py's PRIVATE (tests/worker/test_fence.py).

This file runs in the untrusted worker; it depends on nothing.
"""

from __future__ import annotations

_ABSENT = object()   # the class had no attribute of its own by that name


class Hooks:
    """Replacements installed on classes, restored in reverse order."""

    def __init__(self) -> None:
        self._saved: list[tuple[type, str, object]] = []

    def install(self, patches: dict) -> None:
        """Install ``patches`` ({(owner, name): replacement}); the caller looks up every
        original it calls before this, so a name that is missing changes nothing."""
        self._saved += [(owner, name, vars(owner).get(name, _ABSENT)) for owner, name in patches]
        for (owner, name), fn in patches.items():
            setattr(owner, name, fn)

    def restore(self) -> None:
        while self._saved:
            owner, name, fn = self._saved.pop()
            if fn is _ABSENT:   # inherited before: the class's own entry goes again
                delattr(owner, name)
            else:
                setattr(owner, name, fn)
