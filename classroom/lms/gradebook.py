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
moodle       Moodle's offline grading worksheet (an assignment's "Upload grading
             worksheet", mod/assign/feedback/offline): the worksheet's columns,
             ``Identifier`` = ``Participant <participant id>`` (known from a Moodle
             download's folder names), ``Grade`` and ``Last modified (grade)``
             being the ones Moodle reads.

``merge``: Gradescope ran correctness on the CPU, a GPU batch ran
performance. The merged score of a student is Gradescope's Total Score
(their ``Download Grades`` CSV) plus the performance points of the GPU
batch's class.csv, matched by email, then SID. Where both name a Gradescope
submission id (a GPU batch of Gradescope's export), they must agree.

Only final scores go into an upload. A row is left out, and listed with the
reason (exit status 1), when it is not graded yet, a grader error, present
twice (a duplicate the TA must settle), or has nothing to match it by; and,
unless the TA accepts that kind with ``--allow KIND`` (ALLOWABLE), when it
is a CPU-only partial score (performance never measured: the score is out of
the correctness points only), was made under another rubric than the
batch's, or is missing a kernel file (the submission could not be found or
read whole: often a platform or staging problem rather than the student's).
What was accepted is written beside the upload file, in
``<upload>.accepted.txt``, row by row. ``merge`` never takes a row whose
performance was not measured.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from .csvio import CsvError, column, read_rows, to_csv, write_atomic

FORMATS = ("gradescope", "canvas", "moodle")
SCORES = ("total", "correctness", "performance")
# Rows that no flag can make final: (flag in class.csv, why).
NO_SCORE_FLAGS = {"not_graded": "not graded yet", "grader_error": "grader error: regrade it first",
                  "no_submission": "no submission"}
# Rows a TA may accept knowingly, --allow KIND: kind -> what it means.
ALLOWABLE = {
    "cpu-partial": "CPU-only partial score: performance was never measured, the score is out of the "
                   "correctness points only",
    "stale-rubric": "made under another rubric than the batch's",
    "missing-files": "a kernel file was missing or unreadable (scored 0 for that task)",
    "visible-only": "graded by the course runner on the visible tests only: the hidden tests' points were "
                    "never run (a runner export)",
}
MISSING_FLAGS = ("missing_file", "unreadable")
MOODLE_HEADER = ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                 "Grade can be changed", "Last modified (submission)", "Last modified (grade)",
                 "Feedback comments"]
MOODLE_PARTICIPANT = "Participant "   # Moodle's string 'hiddenuser': Identifier = this + participant id
ACCEPTED_SUFFIX = ".accepted.txt"


class AllowError(ValueError):
    """--allow names a kind that does not exist."""


def parse_allow(values) -> frozenset[str]:
    """The kinds of --allow (each value may list several, comma-separated)."""
    kinds = {k.strip() for v in values or () for k in v.split(",") if k.strip()}
    unknown = sorted(kinds - set(ALLOWABLE))
    if unknown:
        raise AllowError(f"--allow {','.join(unknown)}: expected some of {', '.join(ALLOWABLE)}")
    return frozenset(kinds)


@dataclass(frozen=True)
class Student:
    name: str
    email: str
    sid: str
    canvas_id: str = ""
    moodle_id: str = ""
    graded_at: str = ""
    submitted_at: str = ""


@dataclass
class Upload:
    """What an upload file holds, who was left out of it (and why), and the rows
    taken only because the TA allowed their kind."""
    header: list[str]
    fmt: str = "gradescope"
    rows: list[list] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)   # (who, why)
    not_submitted: int = 0                                          # roster members without a submission
    notes: list[str] = field(default_factory=list)
    accepted: list[tuple[str, str, str]] = field(default_factory=list)   # (kind, who, detail)
    allow: frozenset = frozenset()


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
    lms = row.get("lms_id", "")
    canvas = lms if row.get("layout") == "canvas" else ""
    moodle = lms if row.get("layout") == "moodle" else ""
    return [Student(names[i] if i < len(names) else "", emails[i] if i < len(emails) else "",
                    sids[i] if i < len(sids) else "", canvas, moodle, row.get("graded_at", ""),
                    row.get("submitted_at", "")) for i in range(n)]


def read_class_csv(path: str | Path) -> list[dict]:
    header, rows = read_rows(path, "class CSV")
    keys = {h.strip().lower() for h in header}
    missing = {"id", "total", "max", "performance", "flags"} - keys
    if missing:
        raise CsvError(f"class CSV {path}: no {', '.join(sorted(missing))} column; expected the class.csv "
                       "that make batch writes")
    return rows


def batch_rubric_hash(class_csv: str | Path) -> str:
    """The hash of the rubric the batch that wrote ``class_csv`` graded with
    (OUT/batch.json, written by every batch run), or ''."""
    try:
        data = json.loads((Path(class_csv).parent / "batch.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    value = data.get("rubric_hash") if isinstance(data, dict) else None
    return value if isinstance(value, str) else ""


def _who(s: Student, row: dict | None = None) -> str:
    return s.email or s.sid or s.name or (row or {}).get("id", "?")


def _unmatched(fmt: str, s: Student) -> str | None:
    """Why the platform could not match this student to one of its own, or None."""
    if fmt == "gradescope":
        return None if s.email or s.sid else "no email or SID to match them by (give a roster)"
    if fmt == "canvas":
        return None if s.canvas_id or s.sid else "no Canvas user id or SID to match them by (give a roster)"
    return None if s.moodle_id else ("no Moodle participant id (Moodle matches worksheet rows by it: grade "
                                     "the Moodle download, whose folder names carry it)")


def _new_upload(fmt: str, assignment: str, max_points: float | None, allow=frozenset()) -> Upload:
    if fmt == "gradescope":
        return Upload(["Name", "SID", "Email", "Total Score"], fmt, allow=allow)
    if fmt == "moodle":
        return Upload(list(MOODLE_HEADER), fmt, allow=allow)
    up = Upload(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", assignment], fmt, allow=allow)
    up.rows.append(["Points Possible", "", "", "", "", _fmt(max_points) if max_points is not None else ""])
    return up


def _moodle_time(iso: str) -> str:
    """A time Moodle's worksheet import reads (PHP strtotime): ISO 8601 as the report has it."""
    try:
        return dt.datetime.fromisoformat(iso).isoformat(timespec="seconds") if iso else ""
    except ValueError:
        return ""


def _add(up: Upload, s: Student, score: float, max_points: float | None) -> None:
    if up.fmt == "gradescope":
        up.rows.append([s.name, s.sid, s.email, _fmt(score)])
    elif up.fmt == "moodle":
        up.rows.append([MOODLE_PARTICIPANT + s.moodle_id, s.name, s.email, "", _fmt(score),
                        _fmt(max_points) if max_points is not None else "", "",
                        _moodle_time(s.submitted_at), _moodle_time(s.graded_at), ""])
    else:
        up.rows.append([s.name, s.canvas_id, s.sid, "", "", _fmt(score)])


def _keys(s: Student) -> set[str]:
    """What identifies a student in an upload: email, SID, Canvas user id, Moodle participant id."""
    return {k for k in (f"e:{s.email.casefold()}" if s.email else "", f"s:{s.sid}" if s.sid else "",
                        f"c:{s.canvas_id}" if s.canvas_id else "", f"m:{s.moodle_id}" if s.moodle_id else "")
            if k}


def _repeated(candidates: list[tuple[Student, dict]]) -> set[str]:
    """Keys that appear for more than one row of class.csv."""
    rows_of: dict[str, set[int]] = {}
    for s, row in candidates:
        for k in _keys(s):
            rows_of.setdefault(k, set()).add(id(row))
    return {k for k, rows in rows_of.items() if len(rows) > 1}


def not_final(row: dict, current_hash: str = "") -> tuple[str | None, list[tuple[str, str]]]:
    """Why a graded row's score is not final: (a reason no flag accepts, or None;
    [(allowable kind, detail), ...])."""
    flags = set(_split(row.get("flags", "")))
    never = next((w for f, w in NO_SCORE_FLAGS.items() if f in flags), None)
    kinds = []
    if row.get("partial", "").strip().lower() == "true":
        kinds.append(("cpu-partial", f"CPU-only partial score {row.get('total', '?')}/{row.get('max', '?')}: "
                                     "performance was never measured (no GPU)"))
    digest = row.get("rubric_hash", "")
    if current_hash and digest != current_hash:
        kinds.append(("stale-rubric", f"made under rubric {digest or '(unrecorded)'}, the batch's is "
                                      f"{current_hash}: regrade it (make regrade STUDENT=id or --force)"))
    if "visible_only" in flags:
        kinds.append(("visible-only", f"{row.get('total', '?')}/{row.get('max', '?')} on the visible tests only: "
                                      "the hidden tests were never run (the course runner's)"))
    missing = [f for f in MISSING_FLAGS if f in flags]
    if missing:
        kinds.append(("missing-files", f"{'/'.join(missing)}: a kernel file could not be found or read"))
    return never, kinds


def _refusal(kinds: list[tuple[str, str]], allow) -> str | None:
    """The reason a row is left out (its kinds the TA did not allow), or None."""
    refused = [(k, d) for k, d in kinds if k not in allow]
    if not refused:
        return None
    return "; ".join(d for _, d in refused) + f" (--allow {','.join(k for k, _ in refused)} to upload it anyway)"


def gradebook(rows: list[dict], fmt: str, score: str = "total", assignment: str = "Triton kernels",
              allow=frozenset(), current_hash: str = "") -> Upload:
    """The upload file for ``fmt`` from class.csv's rows, with ``score`` as the
    score; rows whose score is not final are left out unless ``allow`` names
    every reason they have. ``current_hash``: the batch's rubric (a row made
    under another is stale)."""
    maxes = [m for m in (_number(r.get("max", "")) for r in rows) if m is not None]
    max_points = max(maxes) if score == "total" and maxes else None
    up = _new_upload(fmt, assignment, max_points, allow)
    candidates = []
    for row in rows:
        flags = set(_split(row.get("flags", "")))
        if "no_submission" in flags:
            up.not_submitted += 1
            continue
        students = people(row)
        why, kinds = not_final(row, current_hash)
        value = _number(row.get(score, ""))
        if why is None and value is None:
            why = f"no {score} score"
        why = why or _refusal(kinds, allow)
        if not students:
            up.left_out.append((row.get("id", "?"), why or "no name, email or SID (give a roster)"))
            continue
        for s in students:
            if why:
                up.left_out.append((_who(s, row), why))
            elif _unmatched(fmt, s):
                up.left_out.append((_who(s, row), _unmatched(fmt, s)))
            else:
                candidates.append((s, row, value, kinds))
    twice = _repeated([(s, row) for s, row, _, _ in candidates])
    for s, row, value, kinds in candidates:
        if _keys(s) & twice:
            up.left_out.append((_who(s, row), "in more than one submission (duplicate): keep one, then "
                                              "run this again"))
            continue
        _add(up, s, value, _number(row.get("max", "")) if score == "total" else None)
        up.accepted += [(k, _who(s, row), d) for k, d in kinds]
    return up


def read_gradescope_scores(path: str | Path) -> list[dict]:
    header, rows = read_rows(path, "Gradescope scores")
    keys = {h.strip().lower() for h in header}
    if "total score" not in keys or not keys & {"email", "sid"}:
        raise CsvError(f"Gradescope scores {path}: expected Gradescope's Download Grades CSV with an Email or "
                       f"SID column and Total Score; found {', '.join(header[:10])}")
    return rows


def _unmeasured(row: dict) -> str | None:
    """Why a class.csv row has no measured performance, or None."""
    if row.get("partial", "").strip().lower() == "true" or row.get("device", "") == "cpu":
        return ("performance was never measured (graded without a GPU): run the batch on a GPU; merge "
                "takes performance from a GPU batch only")
    return None


def merge(gradescope_rows: list[dict], class_rows: list[dict], fmt: str,
          assignment: str = "Triton kernels", allow=frozenset(), current_hash: str = "") -> Upload:
    """Gradescope's Total Score plus the GPU batch's performance, per student."""
    keys = set().union(*(r.keys() for r in gradescope_rows)) if gradescope_rows else set()
    name_col, first, last = column(keys, "name", "full name"), column(keys, "first name"), column(keys, "last name")
    index: dict[str, list[dict]] = {}
    for row in class_rows:
        for s in people(row):
            for k in _keys(s) - {f"c:{s.canvas_id}", f"m:{s.moodle_id}"}:
                index.setdefault(k, []).append(row)
    maxes = [m for m in (_number(r.get("max", "")) for r in class_rows) if m is not None]
    up = _new_upload(fmt, assignment, max(maxes) if maxes else None, allow)
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
        why, kinds = not_final(row, current_hash)
        kinds = [(k, d) for k, d in kinds if k != "cpu-partial"]   # never allowed here: _unmeasured says why
        performance = _number(row.get("performance", ""))
        gs_submission = g.get("submission id", "")
        why = why or _unmeasured(row)
        if why is None and performance is None:
            why = "no performance score in class.csv"
        if why is None and row.get("layout") == "gradescope" and row.get("lms_id") and gs_submission \
                and gs_submission != row["lms_id"]:
            why = (f"the GPU graded submission {row['lms_id']}, Gradescope scored submission {gs_submission}: "
                   "export the submissions again and rerun the batch")
        why = why or _refusal(kinds, allow)
        target = [p for p in people(row) if _keys(p) & _keys(s)]
        found = target[0] if target else Student("", "", "")
        merged = Student(s.name, s.email, s.sid, found.canvas_id, found.moodle_id, row.get("graded_at", ""))
        why = why or _unmatched(fmt, merged)
        if why:
            up.left_out.append((_who(s), why))
            continue
        used.add(id(row))
        merged_rows.append((merged, correctness + performance, _number(row.get("max", ""))))
        up.accepted += [(k, _who(s), d) for k, d in kinds]
    for s, value, max_points in merged_rows:
        _add(up, s, value, max_points)
    unmatched = sum(1 for r in class_rows if id(r) not in used and _number(r.get("performance", "")) is not None
                    and "no_submission" not in _split(r.get("flags", "")))
    if unmatched:
        up.notes.append(f"{unmatched} GPU result(s) in class.csv have no score in Gradescope's file")
    return up


def accepted_path(out: Path) -> Path:
    return out.with_name(out.name + ACCEPTED_SUFFIX)


def accepted_text(up: Upload, out: Path) -> str:
    """The side file of an upload with allowed rows: what was accepted, row by row."""
    kinds = sorted({k for k, _, _ in up.accepted})
    lines = [f"{out.name} holds scores that are not final, accepted with --allow {','.join(kinds)}",
             f"(written {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}):", ""]
    for kind in kinds:
        mine = [(who, detail) for k, who, detail in up.accepted if k == kind]
        lines.append(f"{kind}: {len(mine)} row(s): {ALLOWABLE[kind]}")
        lines += [f"  {who}: {detail}" for who, detail in mine]
        lines.append("")
    return "\n".join(lines)


def write_upload(up: Upload, out: Path) -> None:
    """The upload file, and beside it the list of rows accepted with --allow
    (an older list is removed when nothing was accepted)."""
    write_atomic(out, to_csv(up.header, up.rows))
    side = accepted_path(out)
    if up.accepted:
        write_atomic(side, accepted_text(up, out))
    elif side.exists():
        os.unlink(side)


def report_lines(up: Upload, out: Path) -> list[str]:
    """What to tell the TA: where the file is, who is not in it and why, what was accepted."""
    students = len(up.rows) - (1 if up.rows and up.rows[0][:1] == ["Points Possible"] else 0)
    lines = [f"{out}: {students} student(s)"]
    if up.not_submitted:
        lines.append(f"{up.not_submitted} roster student(s) without a submission are not in it")
    lines += up.notes
    if up.accepted:
        kinds = sorted({k for k, _, _ in up.accepted})
        counts = ", ".join(f"{sum(1 for k2, _, _ in up.accepted if k2 == k)} {k}" for k in kinds)
        lines.append(f"accepted with --allow: {counts}; listed in {accepted_path(out)}")
    if up.left_out:
        lines.append(f"{len(up.left_out)} left out:")
        lines += [f"  {who}: {why}" for who, why in up.left_out[:200]]
        if len(up.left_out) > 200:
            lines.append(f"  ... and {len(up.left_out) - 200} more")
    return lines
