"""Where a class's submissions are, and who each one belongs to.

Four layouts of the folder given to ``make batch``:

plain        one folder or .zip per student; the id is its name.
gradescope   Gradescope's "Export Submissions", unzipped: ``submission_metadata.yml``
             and one ``submission_<n>/`` folder per submission holding the files
             the student uploaded. The YAML maps each folder to its submitters
             (``:name``, ``:email``, ``:sid``) and ``:created_at``. The export's
             own top folder (``assignment_<n>_export/``) may be given or its parent.
canvas       Canvas's "Download Submissions", unzipped: one flat folder of files
             named ``<sortablename>[_LATE]_<userid>_<attachmentid>_<filename>``
             (``anon_<id>`` in place of name and user id when grading is
             anonymous); Canvas appends ``-1``, ``-2`` to a re-uploaded file's name.
moodle       Moodle's "Download all submissions", unzipped: one folder per
             student and plugin, ``<Full Name>_<participantid>_assignsubmission_file_/``,
             or, without "download submissions in folders", files named
             ``<Full Name>_<participantid>_assignsubmission_file_<filename>``.

``detect`` picks the layout from the folder's contents; ``--layout`` forces one.
Canvas and Moodle submissions whose kernel files are loose are staged: the
kernel files (``w8a8.py``, ``w4a16.py``, ``dds.py``, under those names) are
copied into ``OUT/staged/<id>/``, at most MAX_FILE_BYTES + 1 bytes each (the
grader then reports a larger file as too large). Nothing else is copied, so
no name from a student or a platform becomes a path. A student's folder
(Gradescope, Moodle) holding one .zip and no .py file is graded as that zip.

Every name and metadata value is untrusted: ids are made folder-safe by
``student_id``, text is cleaned and bounded, and a YAML key names a folder
only if it is a plain name of a folder inside the export.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shutil
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from grader.report import one_line
from grader.submission import MAX_FILE_BYTES, kernel_files

from .csvio import DIR_MODE, FILE_MODE, read_capped

ID_CHARS = 64                    # longest student id (folder name)
TEXT_CHARS = 200                 # longest name, email or SID kept
METADATA_BYTES = 64 << 20        # largest submission_metadata.yml read
MAX_ENTRIES = 100_000
LAYOUTS = ("plain", "gradescope", "canvas", "moodle")
GRADESCOPE_METADATA = "submission_metadata.yml"

# <sortablename>[_LATE]_<userid>_<attachmentid>_<filename>; the name has no `_<digits>_` (Canvas removes it).
CANVAS_FILE = re.compile(r"(?P<name>\w*?)_(?:(?P<late>LATE)_)?(?P<user>\d+)_(?P<attachment>\d+)_(?P<file>.+)",
                         re.IGNORECASE)
CANVAS_ANON = re.compile(r"(?:(?P<late>LATE)_)?(?P<user>anon_[A-Za-z0-9]+)_(?P<attachment>\d+)_(?P<file>.+)",
                         re.IGNORECASE)
MOODLE = re.compile(r"(?P<name>.+?)_(?P<user>\d+)_assignsubmission_(?P<plugin>[a-z0-9]+)_(?P<file>.*)")
RESUBMITTED = re.compile(r"(?P<stem>.+)-(?P<n>\d+)(?P<ext>\.[A-Za-z0-9]+)")  # Canvas: w8a8-1.py


class LayoutError(ValueError):
    """The submissions folder cannot be read as the layout given or detected."""


@dataclass(frozen=True)
class Person:
    """One submitter as the platform or the roster names them (any field may be empty)."""
    name: str = ""
    email: str = ""
    sid: str = ""


@dataclass(frozen=True)
class Entry:
    """One submission: its folder-safe id, the path the grader reads, its name as found."""
    sid: str
    path: Path
    original: str
    duplicate: bool = False           # another submission has the same id or the same person
    people: tuple[Person, ...] = ()   # submitters (several: a group submission)
    submitted_at: str = ""            # ISO time, where the platform says
    late: bool = False                # the platform marked it late (Canvas)
    layout: str = "plain"
    lms_id: str = ""                  # Gradescope submission id, Canvas user id, Moodle participant id
    stage: bool = False               # its kernel files came loose: stage_files copies them (Canvas, Moodle)
    loose: tuple[tuple[str, Path], ...] = ()  # (kernel file, source) of those files

    def keys(self) -> set[str]:
        """What a TA may call this submission by: its id, original name, platform id, emails, SIDs."""
        stem = self.original.rsplit(".", 1)[0] if "." in self.original.lstrip(".") else self.original
        found = {self.sid, self.original, stem, self.lms_id}
        for p in self.people:
            found |= {p.email.casefold(), p.sid}
        return found - {""}


@dataclass
class Found:
    """The result of reading a submissions folder."""
    layout: str
    root: Path         # the folder the submissions are in (a Gradescope export's own folder)
    entries: list[Entry]
    how: str           # why this layout


def _digest(data: str) -> str:
    return hashlib.blake2b(os.fsencode(data), digest_size=4).hexdigest()


def student_id(name: str, is_file: bool = True) -> str:
    """A folder-safe id for a file or folder name: ASCII letters, digits,
    ``._-``, no leading dot or dash, at most ID_CHARS characters; a file's
    extension (``.zip``) is dropped. A name that had to change gets a short
    hash of its original bytes, so that cleaning alone never merges two names."""
    stem = name.rsplit(".", 1)[0] if is_file and "." in name.lstrip(".") else name
    ascii_stem = unicodedata.normalize("NFKD", stem).encode("ascii", "ignore").decode()
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", ascii_stem).lstrip("._-")
    if safe == stem and 0 < len(safe) <= ID_CHARS:
        return safe
    return f"{safe[: ID_CHARS - 9].rstrip('._-') or 'student'}-{_digest(name)}"


def _label(name: str, user: str) -> str:
    """A folder-safe id from a platform's name and its unique user id: the
    user id keeps it unique, so the name is only made safe and short."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", ascii_name).strip("._-")
    safe = safe[: max(0, ID_CHARS - len(user) - 1)].rstrip("._-")
    return f"{safe}_{user}" if safe else user


def _text(value) -> str:
    """A metadata value as bounded one-line text ('' for None, lists, mappings)."""
    if value is None or isinstance(value, (dict, list, tuple, set, bytes)):
        return ""
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return one_line(str(value), TEXT_CHARS)


HIDDEN = "a hidden or system entry (.DS_Store, __MACOSX, ...), not a submission"


def _hidden(p: Path) -> bool:
    return p.name.startswith((".", "__"))


def _not_a_submission(p: Path) -> str | None:
    """Why ``p`` is not a student's submission (a folder or a .zip), or None."""
    if _hidden(p):
        return HIDDEN
    if p.is_dir():
        return None
    if p.is_file():
        return None if p.name.lower().endswith(".zip") else "not a folder or a .zip"
    return "not a folder or a file"


def _listing(folder: Path) -> list[Path]:
    """The folder's entries sorted by the bytes of their names (at most MAX_ENTRIES)."""
    try:
        paths = sorted(folder.iterdir(), key=lambda p: os.fsencode(p.name))
    except OSError as e:
        raise LayoutError(f"cannot list {folder}: {e.strerror}") from None
    if len(paths) > MAX_ENTRIES:
        raise LayoutError(f"{folder} has more than {MAX_ENTRIES} entries")
    return paths


def unique_ids(entries: list[Entry]) -> list[Entry]:
    """Give entries whose ids collide (``bob/`` and ``bob.zip``) a hash of
    their original name each, whatever their order, and mark them duplicate."""
    counts = Counter(e.sid for e in entries)
    out, used = [], set()
    for e in entries:
        sid, duplicate = e.sid, counts[e.sid] > 1  # neither may take the plain id
        n = 0
        while duplicate and n == 0 or sid in used:
            sid = f"{e.sid[: ID_CHARS - 9]}-{_digest(e.original + ('#' * n))}"
            n += 1
        used.add(sid)
        out.append(replace(e, sid=sid, duplicate=e.duplicate or duplicate))
    return out


def _person_keys(e: Entry) -> set[str]:
    return {f"email:{p.email.casefold()}" for p in e.people if p.email} | {f"sid:{p.sid}" for p in e.people if p.sid}


def mark_same_person(entries: list[Entry]) -> list[Entry]:
    """Mark duplicate every entry that shares a submitter's email or SID with another."""
    counts = Counter(k for e in entries for k in _person_keys(e))
    return [replace(e, duplicate=True) if any(counts[k] > 1 for k in _person_keys(e)) else e for e in entries]


# ----------------------------------------------------------------------------- plain

def find_entries(folder: Path, on_skip=None) -> list[Entry]:
    """Every student folder or .zip in ``folder``, sorted by name, each with a
    unique id. Names that clean to the same id (``bob/`` and ``bob.zip``) all
    get a hash of their full name instead, whatever their order, and are
    marked duplicate. Anything else (``late_days.txt``, ``.DS_Store``) is
    passed to ``on_skip(path, why)`` and left out."""
    entries = []
    for p in _listing(folder):
        why = _not_a_submission(p)
        if why is None:
            entries.append(Entry(student_id(p.name, p.is_file()), p.absolute(), p.name))
        elif on_skip is not None:
            on_skip(p, why)
    return unique_ids(entries)


def _folder_or_zip(folder: Path) -> Path:
    """What to grade of a student's folder on a platform: the folder, or the
    one .zip in it when it holds no .py file (the student uploaded a zip)."""
    zips = [p for p in folder.iterdir() if p.is_file() and not p.is_symlink() and p.name.lower().endswith(".zip")]
    has_py = next(folder.rglob("*.py"), None) is not None
    return (zips[0] if len(zips) == 1 and not has_py else folder).absolute()


# ----------------------------------------------------------------------------- gradescope

def _gradescope_root(folder: Path) -> Path | None:
    """The folder holding submission_metadata.yml: ``folder`` or its only subfolder."""
    if (folder / GRADESCOPE_METADATA).is_file():
        return folder
    subs = [p for p in _listing(folder) if not _hidden(p)]
    if len(subs) == 1 and subs[0].is_dir() and (subs[0] / GRADESCOPE_METADATA).is_file():
        return subs[0]
    return None


def read_gradescope_metadata(path: Path) -> dict:
    """submission_metadata.yml as a dict of folder name -> its record; LayoutError if unusable."""
    try:
        import yaml
    except ImportError:
        raise LayoutError("reading a Gradescope export needs PyYAML: pip install -r requirements.txt") from None
    raw = read_capped(path, METADATA_BYTES, "Gradescope's", LayoutError)
    try:
        data = yaml.safe_load(raw)  # plain dicts, lists and scalars only: no tag builds an object
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise LayoutError(f"{path}: not the YAML of a Gradescope export{line}: "
                          f"{one_line(getattr(e, 'problem', None) or e, 200)}") from None
    except RecursionError:
        raise LayoutError(f"{path}: nested too deeply") from None
    if not isinstance(data, dict):
        raise LayoutError(f"{path}: expected a mapping of submission_<n> folders to their records "
                          "(Gradescope's Export Submissions)")
    return data


def _submitters(record) -> tuple[Person, ...]:
    people = record.get(":submitters") if isinstance(record, dict) else None
    if not isinstance(people, list):
        return ()
    return tuple(Person(_text(p.get(":name")), _text(p.get(":email")), _text(p.get(":sid")))
                 for p in people[:100] if isinstance(p, dict))


def _read_gradescope(root: Path, warn) -> list[Entry]:
    data = read_gradescope_metadata(root / GRADESCOPE_METADATA)
    folders = {p.name: p for p in _listing(root) if p.is_dir() and not _hidden(p)}
    entries = []
    for key, record in data.items():
        name = key if isinstance(key, str) else str(key)
        if name not in folders:  # also refuses '..', 'a/b', absolute paths: only real subfolders
            warn(f"{GRADESCOPE_METADATA} lists {one_line(name, 80)!r}, which is not a folder of the export: "
                 "left out")
            continue
        match = re.fullmatch(r"submission_(\d+)", name)
        record = record if isinstance(record, dict) else {}
        entries.append(Entry(student_id(name, is_file=False), _folder_or_zip(folders[name]), name,
                             people=_submitters(record), submitted_at=_text(record.get(":created_at")),
                             layout="gradescope", lms_id=match.group(1) if match else ""))
    listed = {e.original for e in entries}
    for name in sorted(set(folders) - listed):
        warn(f"folder {one_line(name, 80)!r} is not in {GRADESCOPE_METADATA}: graded without names")
        entries.append(Entry(student_id(name, is_file=False), _folder_or_zip(folders[name]), name,
                             layout="gradescope"))
    for p in _listing(root):
        if _hidden(p):
            warn(f"skipped {one_line(p.name, 80)}: {HIDDEN}")
        elif not p.is_dir() and p.name != GRADESCOPE_METADATA:
            warn(f"skipped {one_line(p.name, 80)}: not a submission folder of the export")
    return sorted(entries, key=lambda e: os.fsencode(e.original))


# ----------------------------------------------------------------------------- canvas and moodle

def _canvas_match(name: str):
    return CANVAS_ANON.fullmatch(name) or CANVAS_FILE.fullmatch(name)


def _moodle_match(p: Path):
    m = MOODLE.fullmatch(p.name)
    if m is None or (p.is_dir() and m.group("file")) or (not p.is_dir() and not m.group("file")):
        return None
    return m


def _kernel_name(filename: str) -> str | None:
    """The kernel file a platform's file name stands for (Canvas renames a
    re-upload ``w8a8-1.py``), or None."""
    if filename in kernel_files():
        return filename
    m = RESUBMITTED.fullmatch(filename)
    name = m.group("stem") + m.group("ext") if m else None
    return name if name in kernel_files() else None


def _pick_files(files: list[tuple[str, Path]], warn, sid: str) -> tuple[tuple[str, Path], ...]:
    """((kernel file, source), ...) from (platform file name, path) pairs. Of
    several candidates for one kernel file (``w8a8.py``, ``w8a8-1.py``, ``w8a8-2.py``)
    the highest number, Canvas's latest re-upload, wins."""
    chosen: dict[str, list[tuple[int, str, Path]]] = defaultdict(list)
    for filename, path in files:
        kernel = _kernel_name(filename)
        if kernel is not None:
            number = 0 if filename == kernel else int(RESUBMITTED.fullmatch(filename).group("n"))
            chosen[kernel].append((number, filename, path))
    picked = []
    for kernel in kernel_files():
        if chosen[kernel]:
            number, filename, path = max(chosen[kernel], key=lambda c: c[0])
            if len(chosen[kernel]) > 1:
                warn(f"{sid}: {len(chosen[kernel])} files for {kernel}; graded {one_line(filename, 80)}")
            picked.append((kernel, path))
    return tuple(picked)


def _zips(files: list[tuple[str, Path]]) -> list[Path]:
    return [p for name, p in files if name.lower().endswith(".zip")]


def _read_canvas(folder: Path, warn) -> list[Entry]:
    groups: dict[str, dict] = defaultdict(lambda: {"files": [], "late": False, "name": "", "prefix": ""})
    for p in _listing(folder):
        m = _canvas_match(p.name) if p.is_file() and not _hidden(p) else None
        if m is None:
            why = HIDDEN if _hidden(p) else "not a file of Canvas's submissions download"
            warn(f"skipped {one_line(p.name, 80)}: {why}")
            continue
        g = groups[m.group("user").lower()]
        g["files"].append((m.group("file"), p))
        g["late"] |= bool(m.group("late"))
        g["name"] = g["name"] or (m.groupdict().get("name") or "")
        g["prefix"] = g["prefix"] or p.name[: m.start("attachment") - 1]
    entries = []
    for user, g in groups.items():
        anonymous = user.startswith("anon_")
        label = user if anonymous else _label(g["name"], user)
        entry = Entry(student_id(label, is_file=False), folder.absolute(), g["prefix"],
                      people=(Person(name=_text(g["name"])),) if g["name"] else (), late=g["late"],
                      layout="canvas", lms_id="" if anonymous else user)
        entries.append(_loose_files(entry, g["files"], warn))
    return entries


def _read_moodle(folder: Path, warn) -> list[Entry]:
    groups: dict[str, dict] = defaultdict(lambda: {"files": [], "folders": [], "name": "", "prefix": ""})
    for p in _listing(folder):
        m = _moodle_match(p) if not _hidden(p) else None
        if m is None:
            why = HIDDEN if _hidden(p) else "not a submission of Moodle's download"
            warn(f"skipped {one_line(p.name, 80)}: {why}")
            continue
        g = groups[m.group("user")]
        g["name"] = g["name"] or m.group("name")
        g["prefix"] = g["prefix"] or f"{m.group('name')}_{m.group('user')}"
        if m.group("plugin") != "file":  # online text and other plugins hold no kernel files
            warn(f"skipped {one_line(p.name, 80)}: Moodle's {m.group('plugin')} submission, not a file "
                 "upload (only uploaded files are graded)")
            continue
        if p.is_dir():
            g["folders"].append(p)
        else:
            g["files"].append((m.group("file"), p))
    entries = []
    for user, g in groups.items():
        entry = Entry(student_id(_label(g["name"], user), is_file=False), folder.absolute(), g["prefix"],
                      people=(Person(name=_text(g["name"])),), layout="moodle", lms_id=user)
        if len(g["folders"]) == 1 and not g["files"]:
            entries.append(replace(entry, path=_folder_or_zip(g["folders"][0])))
            continue
        files = list(g["files"])
        for inner in g["folders"]:
            files += [(p.name, p) for p in sorted(inner.rglob("*")) if p.is_file() and not p.is_symlink()]
        entries.append(_loose_files(entry, files, warn))
    return entries


def _loose_files(entry: Entry, files: list[tuple[str, Path]], warn) -> Entry:
    """The entry for a student whose files came loose: their only .zip as it
    is, else their kernel files, to be staged under the entry's id."""
    picked = _pick_files(files, warn, entry.sid)
    zips = _zips(files)
    if not picked and len(zips) == 1:
        return replace(entry, path=zips[0].absolute())
    if picked and zips:
        warn(f"{entry.sid}: has kernel files and a .zip; the kernel files are graded")
    return replace(entry, stage=True, loose=picked)


# ----------------------------------------------------------------------------- detection

def detect(folder: Path) -> tuple[str, str]:
    """(layout, why) for a submissions folder."""
    if _gradescope_root(folder) is not None:
        return "gradescope", f"it holds Gradescope's {GRADESCOPE_METADATA}"
    paths = [p for p in _listing(folder) if not _hidden(p)]
    if not paths:
        return "plain", "it is empty"
    canvas = sum(1 for p in paths if p.is_file() and _canvas_match(p.name))
    moodle = sum(1 for p in paths if _moodle_match(p))
    for layout, n, platform in (("moodle", moodle, "Moodle's"), ("canvas", canvas, "Canvas's")):
        if n and 2 * n >= len(paths):
            return layout, f"{n} of its {len(paths)} entries are named like {platform} downloads"
    return "plain", "one folder or .zip per student"


def read_layout(folder: Path, layout: str = "auto", warn=None) -> Found:
    """Read the submissions folder as ``layout`` ("auto": detected). ``warn``
    receives one line per entry left out or doubtful."""
    warn = warn or (lambda line: None)
    if layout not in ("auto", *LAYOUTS):
        raise LayoutError(f"unknown layout {layout!r}; expected auto or one of {', '.join(LAYOUTS)}")
    how = "given with --layout"
    if layout == "auto":
        layout, how = detect(folder)
    root = folder
    if layout == "gradescope":
        root = _gradescope_root(folder)
        if root is None:
            raise LayoutError(f"{folder}: no {GRADESCOPE_METADATA} in it or in its only subfolder; expected "
                              "Gradescope's Export Submissions, unzipped")
        entries = _read_gradescope(root, warn)
    elif layout == "canvas":
        entries = _read_canvas(folder, warn)
    elif layout == "moodle":
        entries = _read_moodle(folder, warn)
    else:
        entries = find_entries(folder, on_skip=lambda p, why: warn(f"skipped {one_line(p.name, 80)}: {why}, "
                                                                   "not a submission"))
    entries = unique_ids(sorted(entries, key=lambda e: os.fsencode(e.original)))
    return Found(layout, root, mark_same_person(entries), how)


def stage_files(entries: list[Entry], staged: Path) -> list[Entry]:
    """Copy each loose submission's kernel files into ``staged/<id>/`` (rebuilt
    from scratch) and return the entries with their paths there."""
    shutil.rmtree(staged, ignore_errors=True)
    out = []
    for e in entries:
        if e.stage:
            staged.mkdir(parents=True, exist_ok=True)
            d = staged / e.sid
            d.mkdir()
            for folder in (staged, d):
                os.chmod(folder, DIR_MODE)
            for kernel, src in e.loose:
                _copy_capped(src, d / kernel)
            e = replace(e, path=d)
        out.append(e)
    return out


def _copy_capped(src: Path, dst: Path) -> None:
    """Copy at most MAX_FILE_BYTES + 1 bytes of a regular file (no link followed)."""
    fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_mode & 0o170000 != 0o100000:
            return
        data = f.read(MAX_FILE_BYTES + 1)
    dst.write_bytes(data)
    os.chmod(dst, FILE_MODE)
