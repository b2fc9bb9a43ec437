"""Plain process-group launcher, used until grader/harness/sandbox.py exists."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Jail:
    scratch: Path
    readonly: list = field(default_factory=list)
    writable: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    gpu: bool = False
    memory_bytes: int | None = None
    file_bytes: int | None = None
    pass_fds: tuple = ()


class Sandboxed:
    def __init__(self, proc):
        self.proc, self.pid, self.stdout = proc, proc.pid, proc.stdout

    def wait(self, timeout=None):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def reason(self):
        return None


def spawn(argv, jail, *, stdin=None, stdout=None, stderr=None):
    return Sandboxed(subprocess.Popen(argv, cwd=jail.scratch, env=jail.env, stdin=stdin, stdout=stdout,
                                      stderr=stderr, pass_fds=jail.pass_fds, start_new_session=True))
