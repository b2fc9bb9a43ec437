"""Find a submission's kernel files (folder or .zip) and stage them for a child."""

from __future__ import annotations

import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
# What the graded package gets from the grader, never from the submission.
TRUSTED_FILES = {"utils.py": ROOT / "assignment" / "utils.py"}
WORKER_PACKAGE = "_grader_worker"
WORKER_FILES = ("main.py", "evidence.py", "layout.py", "compile.py", "graphs.py", "vmm.py",
                "movement.py", "capture.py")
MAX_FILE_BYTES = 2 * 1024 * 1024


def kernel_files() -> tuple[str, ...]:
    """The file of every registered task (grader/tasks/), in the registry's order."""
    from .tasks import TASKS   # here, not at import: the registry needs torch, the batch does not

    return tuple(task.file for task in TASKS.values())


class SubmissionError(ValueError):
    """The submission cannot be read at all (not a folder or zip, corrupt zip...)."""


@dataclass
class Submission:
    """The kernel files found in a submission; ``problems`` explains any that are missing."""
    source: str
    files: dict[str, bytes] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    unreadable: bool = False   # the folder or zip itself could not be read (problems says why)


def _pick(names: list[str], wanted: str) -> str | None:
    """The shallowest path whose file name is ``wanted`` (zips often add a top folder)."""
    hits = sorted((n for n in names if PurePosixPath(n).name == wanted),
                  key=lambda n: (len(PurePosixPath(n).parts), n))
    return hits[0] if hits else None


def _safe_member(name: str) -> bool:
    p = PurePosixPath(name.replace("\\", "/"))
    return not p.is_absolute() and ".." not in p.parts and "__MACOSX" not in p.parts


def _read_member(zf: zipfile.ZipFile, name: str) -> bytes:
    """A zip member's bytes, never more than MAX_FILE_BYTES of them whatever its
    header says (a member can declare 100 bytes and inflate to gigabytes)."""
    with zf.open(name) as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise OSError(f"it inflates past {MAX_FILE_BYTES // 1024} KiB")
    return data


def load_submission(path: str | Path) -> Submission:
    path = Path(path)
    sub = Submission(source=str(path))
    if path.is_dir():
        names = [str(p.relative_to(path).as_posix()) for p in path.rglob("*.py")
                 if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts]
        read = lambda n: (path / n).read_bytes()  # noqa: E731
        size = lambda n: (path / n).stat().st_size  # noqa: E731
    elif path.is_file() and zipfile.is_zipfile(path):
        try:
            zf = zipfile.ZipFile(path)
            infos = {i.filename: i for i in zf.infolist() if not i.is_dir()}
        except (zipfile.BadZipFile, OSError) as e:
            raise SubmissionError(f"{path.name}: corrupt zip file ({e})") from e
        unsafe = [n for n in infos if not _safe_member(n)]
        if unsafe:
            sub.problems.append(f"ignored zip entries with unsafe paths: {unsafe[:5]}")
        names = [n for n in infos if _safe_member(n) and n.endswith(".py")]
        read = lambda n: _read_member(zf, n)  # noqa: E731
        size = lambda n: infos[n].file_size  # noqa: E731
    elif path.exists():
        raise SubmissionError(f"{path}: not a folder or a .zip file")
    else:
        raise SubmissionError(f"{path}: no such file or folder")
    for wanted in kernel_files():
        name = _pick(names, wanted)
        if name is None:
            sub.problems.append(f"{wanted} not found in the submission")
            continue
        if size(name) > MAX_FILE_BYTES:
            sub.problems.append(f"{wanted} is larger than {MAX_FILE_BYTES // 1024} KiB; not graded")
            continue
        try:
            sub.files[wanted] = read(name)
        except (zipfile.BadZipFile, OSError, RuntimeError) as e:
            sub.problems.append(f"{wanted} could not be read: {e}")
    return sub


def stage(sub: Submission, kernel_file: str, dest: Path) -> None:
    """Build dest/submission (one kernel file + trusted helpers) and dest/_grader_worker."""
    pkg = dest / "submission"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name, src in TRUSTED_FILES.items():
        shutil.copyfile(src, pkg / name)
    (pkg / kernel_file).write_bytes(sub.files[kernel_file])
    child = dest / WORKER_PACKAGE
    child.mkdir()
    (child / "__init__.py").write_text("")
    for name in WORKER_FILES:
        shutil.copyfile(Path(__file__).parent / "worker" / name, child / name)
    for p in list(pkg.iterdir()) + list(child.iterdir()):
        p.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    for d in (dest, pkg, child):  # readable by the worker, which may run as another user
        d.chmod(0o755)
