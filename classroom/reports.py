"""The reports: each student's report.json read defensively, and the class files
(class.csv, the class view of summary.py) rebuilt from whatever reports exist.
class.csv's columns are the interface of the uploads (lms/gradebook.py) and are
documented in docs/classroom.md.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from grader.report import one_line
from grader.submission import escape_name

from .history import previous
from .lms.csvio import to_csv
from .lms.csvio import write_atomic as _write_atomic
from .lms.layouts import Entry
from .summary import write_summary

REPORT_JSON_BYTES = 8 << 20      # largest report.json the batch reads
MAX_ITEMS = 10_000               # most tests, tasks, flags or notes read from one report
_HASH = re.compile(r"[0-9a-f]{6,64}")
_FLAG_KIND = re.compile(r"[a-z][a-z0-9_]{0,39}")
TEST_STATUSES = ("passed", "partial", "failed", "not_run")
# class.csv's columns, in this order, the rubric's tasks between head and tail (docs/classroom.md documents each).
CSV_FIELDS_HEAD = ["id", "name", "email", "sid", "total", "max", "correctness", "bonus", "performance"]
CSV_FIELDS_TAIL = ["flags", "submitted_at", "graded_at", "rubric_hash", "device", "partial", "seed",
                   "layout", "lms_id", "original_name", "error"]


class BadReport(ValueError):
    """A report.json the class files cannot use."""


def _num(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadReport(f"{what} is not a number")
    return value


def _num_or_none(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _items(value, what: str) -> list:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise BadReport(f"{what} is not a list of at most {MAX_ITEMS}")
    return value


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise BadReport(f"{what} is not text")
    return value[:10_000]


def load_report(path: Path) -> dict:
    """Read a report.json defensively (an earlier, hostile run may have made
    it): size cap, no symlink, JSON depth errors caught, and every field the
    batch uses checked for its type. Returns only those fields."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise BadReport(f"cannot open: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_mode & 0o170000 != 0o100000:
            raise BadReport("not a plain file")
        raw = f.read(REPORT_JSON_BYTES + 1)
    if len(raw) > REPORT_JSON_BYTES:
        raise BadReport(f"larger than {REPORT_JSON_BYTES >> 20} MB")
    return parse_report(raw)


def parse_report(raw: bytes | str) -> dict:
    """The fields the class files use of one report.json's text (load_report's checks)."""
    try:
        data = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except (ValueError, RecursionError, MemoryError) as e:
        raise BadReport(f"not valid JSON ({type(e).__name__})") from None
    if not isinstance(data, dict):
        raise BadReport("not a JSON object")
    if "grader_error" in data:
        try:
            max_score = _num(data.get("max_score_all_tests"), "max_score_all_tests")
        except BadReport:
            max_score = None
        return {"grader_error": one_line(_text(data["grader_error"], "grader_error"), 1000),
                "max_score": max_score, "rubric_hash": _report_hash(data)}
    out = {"score": _num(data.get("score"), "score"), "max_score": _num(data.get("max_score"), "max_score"),
           "partial": data.get("partial"), "seed": data.get("seed"), "gpu": data.get("gpu"),
           "started": _text(data.get("started"), "started"), "rubric_hash": _report_hash(data)}
    hidden = data.get("hidden_points", 0)
    out["hidden_points"] = hidden if _num_or_none(hidden) else 0
    if not isinstance(out["partial"], bool):
        raise BadReport("partial is not true or false")
    if out["seed"] is not None and (isinstance(out["seed"], bool) or not isinstance(out["seed"], int)):
        raise BadReport("seed is not an integer")
    if out["gpu"] is not None:
        _text(out["gpu"], "gpu")
    out["tests"] = []
    for i, t in enumerate(_items(data.get("tests"), "tests")):
        if not isinstance(t, dict):
            raise BadReport(f"tests[{i}] is not an object")
        out["tests"].append({"kind": _text(t.get("kind"), f"tests[{i}].kind"),
                             "score": _num(t.get("score"), f"tests[{i}].score"),
                             "bonus": t.get("bonus") is True,
                             # for the class view only: a test without them is left out of its table
                             "name": one_line(t["name"], 100) if isinstance(t.get("name"), str) else "",
                             "status": t["status"] if t.get("status") in TEST_STATUSES else "",
                             "cause": _cause(t.get("message"))})
    out["tasks"] = []
    for i, t in enumerate(_items(data.get("tasks"), "tasks")):
        if not isinstance(t, dict):
            raise BadReport(f"tasks[{i}] is not an object")
        flags = _items(t.get("flags", []), f"tasks[{i}].flags")
        out["tasks"].append({"task": _text(t.get("task"), f"tasks[{i}].task"),
                             "score": _num(t.get("score"), f"tasks[{i}].score"),
                             "status": _text(t.get("status", "ok"), f"tasks[{i}].status"),
                             "flags": [_flag(f, f"tasks[{i}].flags") for f in flags]})
    return out


def _cause(message) -> str:
    """What a test's message says went wrong, in one line: its "likely cause:"
    line (grader/diagnose.py), else its first line."""
    if not isinstance(message, str):
        return ""
    lines = [line.strip() for line in message[:20_000].splitlines() if line.strip()]
    cause = next((line for line in lines if line.startswith("likely cause:")), lines[0] if lines else "")
    return one_line(cause, 200)


def _flag(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise BadReport(f"{what} holds a flag that is not a record")
    return value


def _report_hash(data: dict) -> str | None:
    """The report's ``rubric_hash`` when it has a well-formed one (older reports have none)."""
    value = data.get("rubric_hash")
    return value if isinstance(value, str) and _HASH.fullmatch(value) else None


def _flags(report: dict) -> list[str]:
    """Flag names for the CSV, read from data only: each task's ``status`` kind
    when it is not "ok" (not_implemented, timeout, ...) and the ``kind`` of its
    flag records (library_matmul, ...)."""
    kinds = []
    for task in report["tasks"]:
        kinds.append(task["status"])
        kinds += [f.get("kind") for f in task["flags"]]
    return list(dict.fromkeys(k for k in kinds if isinstance(k, str) and k != "ok" and _FLAG_KIND.fullmatch(k)))


def _people(entry_or_people, field: str) -> str:
    """One class.csv cell for a field of every submitter ("; " between group members)."""
    people = getattr(entry_or_people, "people", entry_or_people)
    return "; ".join(getattr(p, field).replace(";", ",") for p in people) if any(
        getattr(p, field) for p in people) else ""


def _identity(entry: Entry) -> dict:
    """The columns that say whose submission a row is."""
    extra = [f for f, on in (("duplicate", entry.duplicate), ("late", entry.late)) if on]
    return {"id": entry.sid, "name": _people(entry, "name"), "email": _people(entry, "email"),
            "sid": _people(entry, "sid"), "layout": entry.layout, "lms_id": entry.lms_id,
            "original_name": escape_name(entry.original), "submitted_at": entry.submitted_at, "_extra": extra}


def _with_flags(row: dict, flags: list[str]) -> dict:
    row["flags"] = ";".join(dict.fromkeys(flags + row.pop("_extra")))
    return row


def _row(entry: Entry, report: dict, tasks: list[str]) -> dict:
    row = _identity(entry) | {"_graded": True, "total": report["score"], "max": report["max_score"]}
    for kind in ("correctness", "performance"):  # without bonus: bonus has its own column
        row[kind] = sum(t["score"] for t in report["tests"] if t["kind"] == kind and not t["bonus"])
    row["bonus"] = sum(t["score"] for t in report["tests"] if t["bonus"])
    for task in report["tasks"]:
        if task["task"] in tasks:
            row[task["task"]] = task["score"]
    row.update(partial=report["partial"], seed=report["seed"], device=report["gpu"] or "cpu",
               graded_at=report["started"], rubric_hash=report["rubric_hash"], _tests=report["tests"])
    return _with_flags(row, _flags(report))


def _error_row(entry: Entry, error: str, max_score=None) -> dict:
    row = _identity(entry) | {"total": 0, "max": max_score if max_score is not None else "", "error": error}
    return _with_flags(row, ["grader_error"])


def _previous(out: Path, sid: str) -> dict | None:
    """The score of a student's report before the last regrade (OUT/history), or None."""
    path = previous(out, sid)
    if path is None:
        return None
    try:
        report = load_report(path)
    except BadReport:
        return None
    if "grader_error" in report:
        return {"score": None, "graded_at": "", "error": report["grader_error"]}
    return {"score": report["score"], "max": report["max_score"], "graded_at": report["started"]}


def write_class_files(out: Path, entries: list[Entry], tasks: list[str], current_hash: str = "",
                      not_submitted=()) -> list[dict]:
    """Rebuild class.csv and the class view (summary.md, .html, .png) from
    whatever reports exist now. A report that cannot be used becomes that
    student's grader_error row. ``current_hash``: the rubric now in use, to
    list reports made under another. ``not_submitted``: roster members
    (classroom.lms.roster.Member) without a submission, one ``no_submission`` row each."""
    rows = []
    for entry in entries:
        path = out / "students" / entry.sid / "report.json"
        if not (path.exists() or path.is_symlink()):
            rows.append(_with_flags(_identity(entry), ["not_graded"]))
            continue
        try:
            report = load_report(path)
        except BadReport as e:
            rows.append(_error_row(entry, f"report.json unusable: {e}"))
            continue
        if "grader_error" in report:
            row = _error_row(entry, report["grader_error"], report["max_score"]) | {
                "rubric_hash": report["rubric_hash"]}
        else:
            row = _row(entry, report, tasks)
        row["_previous"] = _previous(out, entry.sid)
        rows.append(row)
    for m in not_submitted:
        rows.append({"id": m.key, "name": _people([m.person], "name"), "email": _people([m.person], "email"),
                     "sid": _people([m.person], "sid"), "flags": "no_submission"})
    fields = [*CSV_FIELDS_HEAD, *tasks, *CSV_FIELDS_TAIL]
    _write_atomic(out / "class.csv", to_csv(fields, [[r.get(f, "") for f in fields] for r in rows]))
    write_summary(out, rows, tasks, current_hash)
    return rows
