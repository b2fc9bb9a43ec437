"""Upload files for a gradebook, made from class.csv; the CPU + GPU merge.

Formats (one row per student; a group submission gives each member a row):

gradescope   ``Name,SID,Email,Total Score``: the identifying columns and the
             score column of Gradescope's own grade export, so its score upload
             (an offline assignment's "Upload Scores") matches students by Email
             or SID.
canvas       Canvas's gradebook import: ``Student,ID,SIS User ID,SIS Login ID,Section,
             <assignment>`` and a ``Points Possible`` row. Canvas matches a row by
             ID (the Canvas user id, known from a Canvas download) or SIS User ID
             (the SID); name the assignment column as in Canvas's own export,
             ``Title (assignment id)``, to fill that assignment, or give a new
             title to create one.

``merge``: Gradescope ran correctness on the CPU, a GPU batch ran
performance. The merged score of a student is Gradescope's Total Score
(their ``Download Grades`` CSV) plus the performance points of the GPU
batch's class.csv, matched by email, then SID. Where both name a Gradescope
submission id (a GPU batch of Gradescope's export), they must agree.

A student is left out of an upload, and listed, when their score is not
final: not graded yet, a grader error, no email/SID to match them by, or
present in two rows (a duplicate the TA must settle). Exit status 1 then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from .csvio import CsvError, column, read_rows, to_csv, write_atomic

FORMATS = ("gradescope", "canvas")
SCORES = ("total", "correctness", "performance")
NO_SCORE_FLAGS = {"not_graded": "not graded yet", "grader_error": "grader error: regrade it first",
                  "no_submission": "no submission"}


@dataclass(frozen=True)
class Student:
    name: str
    email: str
    sid: str
    canvas_id: str = ""


@dataclass
class Upload:
    """What an upload file holds and who was left out of it (and why)."""
    header: list[str]
    rows: list[list] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)   # (who, why)
    not_submitted: int = 0                                          # roster members without a submission
    notes: list[str] = field(default_factory=list)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _fmt(x: float) -> str:
    return f"{round(x, 4):g}"


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(";")] if text else []


def people(row: dict) -> list[Student]:
    """The students of a class.csv row (several for a group submission)."""
    names, emails, sids = _split(row.get("name", "")), _split(row.get("email", "")), _split(row.get("sid", ""))
    n = max(len(names), len(emails), len(sids))
    canvas = row.get("lms_id", "") if row.get("layout") == "canvas" else ""
    return [Student(names[i] if i < len(names) else "", emails[i] if i < len(emails) else "",
                    sids[i] if i < len(sids) else "", canvas) for i in range(n)]


def read_class_csv(path: str | Path) -> list[dict]:
    header, rows = read_rows(path, "class CSV")
    keys = {h.strip().lower() for h in header}
    missing = {"id", "total", "max", "performance", "flags"} - keys
    if missing:
        raise CsvError(f"class CSV {path}: no {', '.join(sorted(missing))} column; expected the class.csv "
                       "that make batch writes")
    return rows


def _who(s: Student, row: dict | None = None) -> str:
    return s.email or s.sid or s.name or (row or {}).get("id", "?")


def _identified(fmt: str, s: Student) -> bool:
    return bool(s.email or s.sid) if fmt == "gradescope" else bool(s.canvas_id or s.sid)


def _new_upload(fmt: str, assignment: str, max_points: float | None) -> Upload:
    if fmt == "gradescope":
        return Upload(["Name", "SID", "Email", "Total Score"])
    up = Upload(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", assignment])
    up.rows.append(["Points Possible", "", "", "", "", _fmt(max_points) if max_points is not None else ""])
    return up


def _add(up: Upload, fmt: str, s: Student, score: float) -> None:
    if fmt == "gradescope":
        up.rows.append([s.name, s.sid, s.email, _fmt(score)])
    else:
        up.rows.append([s.name, s.canvas_id, s.sid, "", "", _fmt(score)])


def _keys(s: Student) -> set[str]:
    """What identifies a student in an upload: email, SID, Canvas user id."""
    return {k for k in (f"e:{s.email.casefold()}" if s.email else "", f"s:{s.sid}" if s.sid else "",
                        f"c:{s.canvas_id}" if s.canvas_id else "") if k}


def _repeated(candidates: list[tuple[Student, dict]]) -> set[str]:
    """Keys that appear for more than one row of class.csv."""
    rows_of: dict[str, set[int]] = {}
    for s, row in candidates:
        for k in _keys(s):
            rows_of.setdefault(k, set()).add(id(row))
    return {k for k, rows in rows_of.items() if len(rows) > 1}


def gradebook(rows: list[dict], fmt: str, score: str = "total", assignment: str = "Triton kernels") -> Upload:
    """The upload file for ``fmt`` from class.csv's rows, with ``score`` as the score."""
    maxes = [m for m in (_number(r.get("max", "")) for r in rows) if m is not None]
    max_points = max(maxes) if score == "total" and maxes else None
    up = _new_upload(fmt, assignment, max_points)
    candidates = []
    for row in rows:
        flags = set(_split(row.get("flags", "")))
        if "no_submission" in flags:
            up.not_submitted += 1
            continue
        students = people(row)
        why = next((w for f, w in NO_SCORE_FLAGS.items() if f in flags), None)
        value = _number(row.get(score, ""))
        if why is None and value is None:
            why = f"no {score} score"
        if not students:
            up.left_out.append((row.get("id", "?"), why or "no name, email or SID (give a roster)"))
            continue
        for s in students:
            if why:
                up.left_out.append((_who(s, row), why))
            elif not _identified(fmt, s):
                need = "email or SID" if fmt == "gradescope" else "Canvas user id or SID"
                up.left_out.append((_who(s, row), f"no {need} to match them by (give a roster)"))
            else:
                candidates.append((s, row, value))
    twice = _repeated([(s, row) for s, row, _ in candidates])
    for s, row, value in candidates:
        if _keys(s) & twice:
            up.left_out.append((_who(s, row), "in more than one submission (duplicate): keep one, then "
                                              "run this again"))
        else:
            _add(up, fmt, s, value)
    return up


def read_gradescope_scores(path: str | Path) -> list[dict]:
    header, rows = read_rows(path, "Gradescope scores")
    keys = {h.strip().lower() for h in header}
    if "total score" not in keys or not keys & {"email", "sid"}:
        raise CsvError(f"Gradescope scores {path}: expected Gradescope's Download Grades CSV with an Email or "
                       f"SID column and Total Score; found {', '.join(header[:10])}")
    return rows


def merge(gradescope_rows: list[dict], class_rows: list[dict], fmt: str,
          assignment: str = "Triton kernels") -> Upload:
    """Gradescope's Total Score plus the GPU batch's performance, per student."""
    keys = set().union(*(r.keys() for r in gradescope_rows)) if gradescope_rows else set()
    name_col, first, last = column(keys, "name", "full name"), column(keys, "first name"), column(keys, "last name")
    index: dict[str, list[dict]] = {}
    for row in class_rows:
        for s in people(row):
            for k in _keys(s) - {f"c:{s.canvas_id}"}:
                index.setdefault(k, []).append(row)
    maxes = [m for m in (_number(r.get("max", "")) for r in class_rows) if m is not None]
    up = _new_upload(fmt, assignment, max(maxes) if maxes else None)
    merged_rows, used = [], set()
    for g in gradescope_rows:
        name = g.get(name_col, "") if name_col else " ".join(v for v in (g.get(first or "", ""),
                                                                          g.get(last or "", "")) if v)
        s = Student(name, g.get("email", ""), g.get("sid", ""))
        correctness = _number(g.get("total score", ""))
        if correctness is None:  # Gradescope: no submission ("Missing")
            continue
        if not (s.email or s.sid):
            up.left_out.append((s.name or "?", "no email or SID in Gradescope's row"))
            continue
        hits = index.get(f"e:{s.email.casefold()}") if s.email else None
        hits = hits or (index.get(f"s:{s.sid}") if s.sid else None) or []
        hits = list({id(h): h for h in hits}.values())
        if not hits:
            up.left_out.append((_who(s), "no GPU result in class.csv"))
            continue
        if len(hits) > 1:
            up.left_out.append((_who(s), f"in {len(hits)} rows of class.csv (duplicate): keep one, then run "
                                         "this again"))
            continue
        row = hits[0]
        flags = set(_split(row.get("flags", "")))
        why = next((w for f, w in NO_SCORE_FLAGS.items() if f in flags), None)
        performance = _number(row.get("performance", ""))
        gs_submission = g.get("submission id", "")
        if why is None and performance is None:
            why = "no performance score in class.csv"
        if why is None and row.get("layout") == "gradescope" and row.get("lms_id") and gs_submission \
                and gs_submission != row["lms_id"]:
            why = (f"the GPU graded submission {row['lms_id']}, Gradescope scored submission {gs_submission}: "
                   "export the submissions again and rerun the batch")
        if why:
            up.left_out.append((_who(s), why))
            continue
        used.add(id(row))
        canvas_id = row.get("lms_id", "") if row.get("layout") == "canvas" else ""
        merged_rows.append((Student(s.name, s.email, s.sid, canvas_id), correctness + performance))
    for s, value in merged_rows:
        _add(up, fmt, s, value)
    unmatched = sum(1 for r in class_rows if id(r) not in used and _number(r.get("performance", "")) is not None
                    and "no_submission" not in _split(r.get("flags", "")))
    if unmatched:
        up.notes.append(f"{unmatched} GPU result(s) in class.csv have no score in Gradescope's file")
    return up


def write_upload(up: Upload, out: Path) -> None:
    write_atomic(out, to_csv(up.header, up.rows))


def report_lines(up: Upload, out: Path) -> list[str]:
    """What to tell the TA: where the file is, who is not in it and why."""
    students = len(up.rows) - (1 if up.rows and up.rows[0][:1] == ["Points Possible"] else 0)
    lines = [f"{out}: {students} student(s)"]
    if up.not_submitted:
        lines.append(f"{up.not_submitted} roster student(s) without a submission are not in it")
    lines += up.notes
    if up.left_out:
        lines.append(f"{len(up.left_out)} left out:")
        lines += [f"  {who}: {why}" for who, why in up.left_out[:200]]
        if len(up.left_out) > 200:
            lines.append(f"  ... and {len(up.left_out) - 200} more")
    return lines
