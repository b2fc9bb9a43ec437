"""Find a submission's kernel files (folder or .zip) and stage them for a child."""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
# What the graded package gets from the grader, never from the submission.
TRUSTED_FILES = {"utils.py": ROOT / "assignment" / "utils.py"}
WORKER_PACKAGE = "_grader_worker"
WORKER_FILES = ("main.py", "evidence.py", "layout.py", "graphs.py", "vmm.py", "movement.py", "races.py", "fence.py",
                "trace.py", "capture.py", "hooks.py",
                "compile.py", "compile_rows.py", "compile_pool.py", "compile_child.py",
                "ptx.py", "ptx_parse.py", "ptx_lanes.py", "shapes.py", "executor.py", "gate.py", "gate_child.py",
                "kernels_only.py", "compiled_sites.py")
MAX_FILE_BYTES = 2 * 1024 * 1024


def kernel_files() -> tuple[str, ...]:
    """The file of every registered task (grader/tasks/), in the registry's order."""
    from .tasks import TASKS  # here, not at import: the registry needs torch, the batch does not

    return tuple(task.file for task in TASKS.values())


def escape_name(name: str) -> str:
    """A file name (in a student's zip, on a command line) as printable text: undecodable
    bytes and control characters as ``\\xNN``."""
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", text)


class SubmissionError(ValueError):
    """The submission cannot be read at all (not a folder or zip, corrupt zip...)."""


@dataclass
class Submission:
    """The kernel files found in a submission; ``problems`` explains any that are missing,
    ``notes`` what else the report should say about how the files were found."""
    source: str
    files: dict[str, bytes] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    unreadable: bool = False   # the folder or zip itself could not be read (problems says why)
    notes: list[str] = field(default_factory=list)


MAX_NESTED_BYTES = 16 * 1024 * 1024   # a zip inside the zip is read into memory up to this size
_NAMES_SHOWN = 5


def _posix(name: str) -> str:
    return name.replace("\\", "/")


def _pick(names: list[str], wanted: str) -> str | None:
    """The shallowest path whose file name is ``wanted`` (zips often add a top folder)."""
    hits = sorted((n for n in names if PurePosixPath(_posix(n)).name == wanted),
                  key=lambda n: (len(PurePosixPath(_posix(n)).parts), n))
    return hits[0] if hits else None


def _near_misses(names: list[str], wanted: str) -> list[str]:
    """Names that look like ``wanted`` but are not it (another case, a copy's suffix)."""
    stem = wanted[:-3].lower()
    found = []
    for n in names:
        base = PurePosixPath(_posix(n)).name
        if base != wanted and base.lower().startswith(stem) and len(base) <= len(wanted) + 12:
            found.append(n)
    return sorted(found)[:_NAMES_SHOWN]


def _safe_member(name: str) -> bool:
    p = PurePosixPath(_posix(name))
    return not p.is_absolute() and ".." not in p.parts and "__MACOSX" not in p.parts


def _shown(names) -> str:
    names = list(names)
    more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
    return ", ".join(escape_name(n) for n in names[:_NAMES_SHOWN]) + more


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int = MAX_FILE_BYTES) -> bytes:
    """A zip member's bytes, never more than ``cap`` of them whatever its header says
    (a member can declare 100 bytes and inflate to gigabytes)."""
    with zf.open(info) as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise OSError(f"it inflates past {cap // 1024} KiB")
    return data


def _cleared_utf8_flags(data: bytes) -> tuple[bytes, list[bytes]]:
    """The zip's bytes with the UTF-8 flag cleared on every central-directory entry whose
    name is not valid UTF-8 (Python's zipfile refuses the whole zip for one such name),
    and those names' bytes. Walks the central directory from the end record; raises
    ValueError on a zip it cannot walk."""
    eocd = data.rfind(b"PK\x05\x06", max(0, len(data) - 65557))
    if eocd < 0:
        raise ValueError("no end of central directory")
    size, offset = struct.unpack_from("<II", data, eocd + 12)
    if offset == 0xFFFFFFFF or offset + size > eocd:
        raise ValueError("a zip64 or inconsistent central directory")
    out, bad, at = bytearray(data), [], offset
    while at < offset + size:
        if data[at:at + 4] != b"PK\x01\x02":
            raise ValueError("a broken central directory entry")
        flags, = struct.unpack_from("<H", data, at + 8)
        n, m, k = struct.unpack_from("<HHH", data, at + 28)
        name = data[at + 46:at + 46 + n]
        if flags & 0x800:
            try:
                name.decode("utf-8")
            except UnicodeDecodeError:
                struct.pack_into("<H", out, at + 8, flags & ~0x800)
                bad.append(name)
        at += 46 + n + m + k
    return bytes(out), bad


def _open_zip(path: Path, sub: Submission) -> zipfile.ZipFile:
    """The zip at ``path``; a zip whose member names Python cannot decode is read with
    those names as bytes (cp437, as unzip shows them), and the report says so."""
    try:
        return zipfile.ZipFile(path)
    except UnicodeDecodeError:
        pass
    data = path.read_bytes()
    fixed, bad = _cleared_utf8_flags(data)
    sub.notes.append(f"{path.name}: {len(bad)} member name(s) marked UTF-8 are not valid UTF-8, read byte by "
                     f"byte: {_shown(b.decode('cp437') for b in bad)}")
    return zipfile.ZipFile(io.BytesIO(fixed))


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16)


def _zip_members(zf: zipfile.ZipFile, label: str, sub: Submission, nested: bool = False):
    """(names, read, size) of the regular members of an open zip, whatever it holds:
    directories, symbolic links, unsafe paths and duplicates are left out or noted,
    and a zip inside it is opened (once) when the kernel files are not at its top."""
    infos: dict[str, zipfile.ZipInfo] = {}
    counts: dict[str, int] = {}
    links, unsafe = [], []
    for info in zf.infolist():
        name = info.filename
        if info.is_dir():
            continue
        if not _safe_member(name):
            unsafe.append(name)
            continue
        if _is_symlink(info):
            links.append(name)
            continue
        counts[name] = counts.get(name, 0) + 1
        infos[name] = info   # the last of duplicate names, as unzip leaves it
    if unsafe:
        sub.notes.append(f"{label}: ignored member(s) with unsafe paths: {_shown(unsafe)}")
    if links:
        sub.notes.append(f"{label}: ignored symbolic link(s), which are no files: {_shown(links)}")
    twice = sorted(n for n, c in counts.items() if c > 1)
    if twice:
        sub.notes.append(f"{label}: member(s) stored more than once, the last copy read (as unzip leaves "
                         f"them): {_shown(twice)}")
    names = [n for n in infos if n.endswith(".py")]
    if not nested and not any(_pick(names, w) for w in kernel_files()):
        inner = sorted((n for n in infos if n.lower().endswith(".zip")), key=lambda n: (n.count("/"), n))
        for n in inner[:1]:
            try:
                data = _read_member(zf, infos[n], MAX_NESTED_BYTES)
                nested_zf = zipfile.ZipFile(io.BytesIO(data))
                found = _zip_members(nested_zf, f"{label} > {n}", sub, nested=True)
            except Exception as e:  # noqa: BLE001 - a broken inner zip is a note, never a crash
                sub.notes.append(f"{label}: the zip inside it, {_shown([n])}, could not be read ({type(e).__name__})")
                break
            sub.notes.append(f"{label}: no kernel file at its top; read the zip inside it, {_shown([n])}")
            return found
    return names, (lambda n: _read_member(zf, infos[n])), (lambda n: infos[n].file_size)


def _starts_like_a_zip(path: Path) -> bool:
    """Whether the file begins as a zip does (a zip cut short has no directory at its end)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def _broken_zip(path: Path, why: str) -> str:
    """The one wording of a zip that cannot be read: the student's to fix, never a grader error."""
    return f"{path.name}: a truncated or corrupt .zip file ({why}): download or zip it again"


def load_submission(path: str | Path) -> Submission:
    """The kernel files of a folder or a .zip. A zip that cannot be read at all raises
    SubmissionError; anything else about it (odd names, links, duplicates, a zip in a
    zip, a member that cannot be read) becomes a problem or a note, never an exception."""
    path = Path(path)
    sub = Submission(source=str(path))
    if path.is_dir():
        names = [str(p.relative_to(path).as_posix()) for p in path.rglob("*.py")
                 if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts]
        read = lambda n: (path / n).read_bytes()  # noqa: E731
        size = lambda n: (path / n).stat().st_size  # noqa: E731
    elif path.is_file() and zipfile.is_zipfile(path):
        try:
            zf = _open_zip(path, sub)
            names, read, size = _zip_members(zf, path.name, sub)
        except Exception as e:  # noqa: BLE001 - any zip the grader cannot walk is a corrupt zip, said so
            raise SubmissionError(_broken_zip(path, f"{type(e).__name__}: {e}"[:300])) from e
    elif path.is_file() and (path.suffix.lower() == ".zip" or _starts_like_a_zip(path)):
        raise SubmissionError(_broken_zip(path, "it has no zip directory at its end"))
    elif path.exists():
        raise SubmissionError(f"{path}: not a folder or a .zip file")
    else:
        raise SubmissionError(f"{path}: no such file or folder")
    for wanted in kernel_files():
        name = _pick(names, wanted)
        if name is None:
            near = _near_misses(names, wanted)
            sub.problems.append(f"{wanted} not found in the submission" + (
                f" (it holds {_shown(near)}: the file must be named exactly {wanted})" if near else ""))
            continue
        try:
            if size(name) > MAX_FILE_BYTES:
                sub.problems.append(f"{wanted} is larger than {MAX_FILE_BYTES // 1024} KiB; not graded")
                continue
            sub.files[wanted] = read(name)
        except Exception as e:  # noqa: BLE001 - encrypted, an unknown compression, a lying header, ...
            sub.problems.append(f"{wanted} could not be read: {type(e).__name__}: {e}"[:300])
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
