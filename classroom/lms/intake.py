"""A batch's intake: which submissions, read how, and whose.

The layout is the one given with ``--layout`` (remembered in OUT/batch.json
for later runs of the same output folder until ``--layout auto``), else
detected. The roster given with ``--roster`` is kept as OUT/roster.csv and
used by later runs that give none (``make regrade`` after a batch with a
roster still has the names). Loose kernel files are staged in OUT/staged.
"""

from __future__ import annotations

import json
from pathlib import Path

from grader.submission import escape_name

from .csvio import write_atomic
from .layouts import LAYOUTS, Entry, mark_same_person, read_layout, stage_files
from .roster import apply_roster, load_roster

SETTINGS = "batch.json"   # in OUT: a layout given with --layout (reused by later runs of the same OUT),
                          # the rubric hash of the last run (gradebook uploads refuse reports of another)
ROSTER_COPY = "roster.csv"  # in OUT: the roster last given with --roster, reused by later runs


def _settings(out: Path) -> dict:
    try:
        data = json.loads((out / SETTINGS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _choose_layout(out: Path, layout: str | None) -> tuple[str, str]:
    """(layout to read, note): --layout wins and is remembered; without it, the remembered one."""
    if layout is not None:
        settings = {k: v for k, v in _settings(out).items() if k != "layout"}
        if layout != "auto":
            settings["layout"] = layout
        write_atomic(out / SETTINGS, json.dumps(settings) + "\n")
        return layout, ""
    remembered = _settings(out).get("layout")
    if isinstance(remembered, str) and remembered in LAYOUTS:
        return remembered, " (given with --layout earlier; --layout auto detects again)"
    return "auto", ""


def remember_rubric(out: Path, digest: str) -> None:
    """Record the rubric this run grades with: the uploads' reference for stale reports."""
    settings = _settings(out)
    if settings.get("rubric_hash") != digest:
        write_atomic(out / SETTINGS, json.dumps(dict(settings, rubric_hash=digest)) + "\n")


def _load_roster(out: Path, roster: str | None):
    """The roster given (copied into OUT for later runs), else the copy of an earlier run, else None."""
    copy = out / ROSTER_COPY
    if roster is not None:
        loaded = load_roster(roster)
        write_atomic(copy, Path(roster).read_bytes().decode("utf-8-sig"))
        return loaded, f"roster: {escape_name(roster)} ({len(loaded.members)} students; kept as {copy})"
    if copy.is_file():
        loaded = load_roster(copy)
        return loaded, f"roster: {copy} (from an earlier run; --roster FILE replaces it)"
    return None, ""


def discover(folder: Path, out: Path, layout: str | None = None, roster: str | None = None, warn=None):
    """(entries to grade, roster members without a submission, lines to print)
    for a submissions folder: the layout read, loose files staged in
    OUT/staged, names and emails from the roster; ``warn`` gets one line per
    entry left out. Raises LayoutError or CsvError."""
    loaded, line = _load_roster(out, roster)  # a bad roster stops the batch before anything is staged
    layout, remembered = _choose_layout(out, layout)
    found = read_layout(folder, layout, warn=warn)
    entries = stage_files(found.entries, out / "staged")
    lines = [f"layout: {found.layout}{remembered or f' ({found.how})'}; submissions in {found.root}"]
    not_submitted = []
    if loaded is not None:
        entries, not_submitted = apply_roster(entries, loaded)
        entries = mark_same_person(entries)
        lines.append(line)
    return entries, not_submitted, lines


def select(entries: list[Entry], student: str) -> list[Entry]:
    """The entries a TA means by ``student``: its id, else its file name, else its email, SID or platform id."""
    return ([e for e in entries if e.sid == student] or [e for e in entries if e.original == student]
            or [e for e in entries if student in e.keys() or student.casefold() in e.keys()])
