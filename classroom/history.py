"""A regrade keeps what it replaces: OUT/history/<id>/<n>/ holds the n-th
earlier report folder of a student (report.md, report.json, results.json as
they were), n counting from 1; summary.md shows each regraded student's
previous score next to the current one."""

from __future__ import annotations

import os
from pathlib import Path

from .lms.csvio import DIR_MODE

HISTORY = "history"


def keep_previous(old: Path, out: Path, sid: str) -> None:
    """Move a replaced report folder ``old`` into OUT/history/<sid>/ (a rename:
    it is there whole or not at all). Anything but a folder with a report.json
    is left where it is (the caller removes it)."""
    if old.is_symlink() or not old.is_dir() or not (old / "report.json").is_file():
        return
    folder = out / HISTORY / sid
    folder.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    for d in (out / HISTORY, folder):
        os.chmod(d, DIR_MODE)
    n = 1 + max((int(p.name) for p in folder.iterdir() if p.name.isdigit()), default=0)
    os.replace(old, folder / str(n))


def previous(out: Path, sid: str) -> Path | None:
    """The report.json of a student's latest earlier report, or None."""
    folder = out / HISTORY / sid
    try:
        numbers = [int(p.name) for p in folder.iterdir() if p.name.isdigit()]
    except OSError:
        return None
    return folder / str(max(numbers)) / "report.json" if numbers else None
