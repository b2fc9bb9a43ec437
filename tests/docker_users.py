"""The Docker image's two users on this machine, without Docker: ``grader`` (not root: runs the
grader) and ``student`` (runs submissions), with the image's sudoers rule, so that tests can run
the grader exactly as the image does (the user switch through sudo) on a CI machine.

Nothing outside the test changes: the users exist only in a private mount namespace, where copies
of /etc/passwd, /etc/group, /etc/shadow and /etc/sudoers with the two users are mounted over the
real ones. Folders on the way to the interpreter that others may not enter (/root, for an
interpreter under /root/.pyenv) are covered there by a tmpfs that others may enter, with only the
interpreter's folder bound back into it. Needs Linux, root, util-linux's unshare and sudo
(``apt-get install sudo``); ``DockerUsers.unavailable()`` says what is missing.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUDOERS = """Defaults env_reset
root ALL=(ALL:ALL) ALL
Defaults:grader closefrom_override
grader ALL=(student) NOPASSWD: ALL
"""


def _free_ids(n: int) -> list[int]:
    used = {p.pw_uid for p in pwd.getpwall()} | {p.pw_gid for p in pwd.getpwall()}
    try:
        import grp
        used |= {g.gr_gid for g in grp.getgrall()}
    except ImportError:
        pass
    ids = [i for i in range(61000, 62000) if i not in used]
    return ids[:n]


def _closed_ancestor(path: str) -> tuple[str, str] | None:
    """(the first folder on ``path`` that others may not enter, the next part below it), or None."""
    parts = Path(path).parts
    for i in range(2, len(parts)):
        folder = str(Path(*parts[:i]))
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return folder, parts[i]
    return None


class DockerUsers:
    """Run commands as the image's ``grader``, next to its ``student``, on this machine."""

    def __init__(self):
        self.top = Path(tempfile.mkdtemp(prefix="docker-users-"))
        self.top.chmod(0o755)
        self.grader_uid, self.student_uid = _free_ids(2)
        self.home = self.top / "home"
        self.home.mkdir()
        os.chown(self.home, self.grader_uid, self.grader_uid)
        etc = self.top / "etc"
        etc.mkdir()
        g, s = self.grader_uid, self.student_uid
        (etc / "passwd").write_text(Path("/etc/passwd").read_text() + f"grader:x:{g}:{g}::{self.home}:/bin/sh\n"
                                    f"student:x:{s}:{s}::/nonexistent:/usr/sbin/nologin\n")
        (etc / "group").write_text(Path("/etc/group").read_text() + f"grader:x:{g}:\nstudent:x:{s}:grader\n")
        shadow = Path("/etc/shadow")
        (etc / "shadow").write_text((shadow.read_text() if shadow.exists() else "")
                                    + "grader:!:19000::::::\nstudent:!:19000::::::\n")
        (etc / "sudoers").write_text(SUDOERS)
        for name, mode in (("passwd", 0o644), ("group", 0o644), ("shadow", 0o640), ("sudoers", 0o440)):
            (etc / name).chmod(mode)

    @staticmethod
    def unavailable() -> str | None:
        """Why these users cannot be made here, or None."""
        if not sys.platform.startswith("linux") or os.geteuid() != 0:
            return "needs Linux and root (to make the image's users in a private mount namespace)"
        for tool in ("unshare", "mount", "setpriv", "sudo"):
            if not shutil.which(tool):
                return f"needs {tool} (apt-get install {'sudo' if tool == 'sudo' else 'util-linux'})"
        if not os.stat(ROOT).st_mode & stat.S_IXOTH:   # a closed ancestor is shimmed; the checkout itself is not
            return f"the checkout {ROOT} is closed to other users (chmod o+x it): the image's users could not read it"
        return None

    def writable(self, name: str) -> Path:
        """A folder under the test's own that the grader user owns."""
        path = self.top / name
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, self.grader_uid, self.grader_uid)
        return path

    def _script(self) -> str:
        lines = ["set -e"]
        for name in ("passwd", "group", "shadow", "sudoers"):
            if Path("/etc", name).exists():
                lines.append(f"mount --bind {self.top}/etc/{name} /etc/{name}")
        needed = {os.path.realpath(sys.executable), str(ROOT), os.path.realpath(sys.prefix)}
        shims: dict[str, set[str]] = {}
        for path in needed:
            found = _closed_ancestor(path)
            if found:
                shims.setdefault(found[0], set()).add(found[1])
        for i, (folder, parts) in enumerate(sorted(shims.items())):
            hold = self.top / f"hold{i}"
            hold.mkdir(exist_ok=True)
            q, h = shlex.quote(folder), shlex.quote(str(hold))
            lines.append(f"mount --bind {q} {h}")
            lines.append(f"mount -t tmpfs -o mode=0711 tmpfs {q}")
            for part in sorted(parts):
                lines.append(f"mkdir -p {q}/{shlex.quote(part)} && mount --bind {h}/{shlex.quote(part)} "
                             f"{q}/{shlex.quote(part)}")
        lines.append(f'exec setpriv --reuid={self.grader_uid} --regid={self.grader_uid} --init-groups -- "$@"')
        return "\n".join(lines)

    def popen(self, argv: list[str], env: dict | None = None, **kw) -> subprocess.Popen:
        """Start ``argv`` as the grader user (cwd: the repository unless given)."""
        env = dict(env or {})
        env.setdefault("PATH", f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin")
        env.setdefault("HOME", str(self.home))
        env.setdefault("LC_ALL", "C.UTF-8")
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", self._script(), "sh",
               "env", "-i", *[f"{k}={v}" for k, v in env.items()], *argv]
        kw.setdefault("cwd", ROOT)
        return subprocess.Popen(cmd, **kw)

    def run(self, argv: list[str], env: dict | None = None, timeout: float = 600, **kw):
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        p = self.popen(argv, env, stdout=subprocess.PIPE if kw.pop("capture_output") else None,
                       stderr=subprocess.PIPE, text=kw.pop("text"), **kw)
        out, err = p.communicate(timeout=timeout)
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def close(self) -> None:
        subprocess.run(["rm", "-rf", str(self.top)])


if __name__ == "__main__":
    # python -m tests.docker_users CMD...: run CMD as the image's grader user, e.g. the sandbox's
    # tests as the image runs them: python -m tests.docker_users python -m pytest tests/integrity/test_sandbox.py
    if why := DockerUsers.unavailable():
        sys.exit(why)
    users = DockerUsers()
    try:
        tmp = users.writable("tmp")
        argv = [sys.executable if a == "python" else a for a in sys.argv[1:]]
        sys.exit(users.popen(argv, {"TMPDIR": str(tmp)}).wait())
    finally:
        users.close()
