"""The task registry: every kernel the assignment grades, one module each.

    from grader.tasks import TASKS, get
    task = get("w8a8")
    args, extras = task.make_inputs((M, N, K), {"ties": True}, seed, "cpu")
    ref, slack = task.reference_and_slack(args)

``TASKS`` maps a task's name to its ``Task`` (grader/tasks/base.py documents
every field), in the order the assignment presents them. Adding a task means
one new module here that builds a ``Task``, its entry in ``_MODULES``, a
``[tasks.<name>]`` table and its ``[[tests]]`` in the rubric, and the stub in
assignment/ (MAINTAINING.md, "Adding a task").
"""

from __future__ import annotations

from . import dds, w4a16, w8a8
from .base import Option, Task

__all__ = ["TASKS", "Option", "Task", "get", "register", "unregister"]

_MODULES = (w8a8, w4a16, dds)
TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add ``task`` to the registry; a second task of the same name or file is an error."""
    if task.name in TASKS:
        raise ValueError(f"task {task.name!r} is already registered")
    clash = [t.name for t in TASKS.values() if t.file == task.file]
    if clash:
        raise ValueError(f"task {task.name!r}: file {task.file} is already task {clash[0]!r}'s")
    TASKS[task.name] = task
    return task


def unregister(name: str) -> None:
    """Remove a task (tests that register a toy task clean up with this)."""
    TASKS.pop(name, None)


def get(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}; the registry has {', '.join(TASKS)}") from None


for _module in _MODULES:
    register(_module.TASK)
