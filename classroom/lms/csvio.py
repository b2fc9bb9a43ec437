"""CSV in and out for files that come from students, platforms and TAs.

Reading is bounded (bytes, rows, cell length) and header names are matched
without regard to case or surrounding spaces. Cells written are cleaned
text that a spreadsheet never reads as a formula. Files are written
atomically and are group-readable (0640): course staff share the owner's
group, other users of the machine do not see grades.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import tempfile
from pathlib import Path

from grader.report import DIR_MODE, FILE_MODE, one_line  # noqa: F401 - the modes: the classroom's too

MAX_CSV_BYTES = 32 << 20   # largest CSV read (a roster, Gradescope's scores, class.csv)
MAX_ROWS = 100_000
CELL_CHARS = 500


class CsvError(ValueError):
    """A CSV file that cannot be used, with what was expected."""


def cell(value):
    """A CSV cell: text cleaned, bounded, and never read as a spreadsheet formula."""
    if isinstance(value, str):
        value = one_line(value, CELL_CHARS)
        if value[:1] in ("=", "+", "-", "@", "|", "%"):
            value = "'" + value
    return value


def read_capped(path: Path, limit: int, what: str, error: type[Exception] = CsvError) -> bytes:
    """The bytes of a file that may be at most ``limit`` bytes; ``error`` says why not."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise error(f"{what} {path}: cannot read it ({e.strerror})") from None
    if len(raw) > limit:
        raise error(f"{what} {path}: larger than {limit >> 20} MB")
    return raw


def read_rows(path: str | Path, what: str) -> tuple[list[str], list[dict]]:
    """(header as written, rows keyed by lower-cased stripped header names) of a
    CSV file; a byte-order mark is dropped. Raises CsvError saying what is wrong."""
    path = Path(path)
    raw = read_capped(path, MAX_CSV_BYTES, what)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CsvError(f"{what} {path}: not UTF-8 text (save it as CSV UTF-8)") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if not header:
            raise CsvError(f"{what} {path}: empty; expected a header row")
        keys = [h.strip().lower() for h in header]
        rows = []
        for i, values in enumerate(reader):
            if i >= MAX_ROWS:
                raise CsvError(f"{what} {path}: more than {MAX_ROWS} rows")
            if not any(v.strip() for v in values):
                continue
            rows.append({k: one_line(v, CELL_CHARS) for k, v in zip(keys, values) if k})
    except csv.Error as e:
        raise CsvError(f"{what} {path}: not a valid CSV file ({e})") from None
    return [one_line(h, CELL_CHARS) for h in header], rows


def column(keys, *names: str) -> str | None:
    """The first of ``names`` (lower case) that is a header of the file."""
    return next((n for n in names if n in keys), None)


def to_csv(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow([cell(h) for h in header])
    writer.writerows([cell(v) for v in r] for r in rows)
    return buf.getvalue()


def write_atomic(path: Path, text: str, mode: int = FILE_MODE) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
