"""Display names on the leaderboard: what a name may be, and when two names are the same name.

A name is read after Unicode NFKC (fullwidth "Ａｌｉｃｅ" is "Alice"), with runs of
whitespace collapsed to one space and none at its ends; what remains must be 1 to
``MAX_LEN`` ASCII letters, digits, spaces, '_', '.' or '-', starting with a letter
or digit (so no script's look-alike letters and no markup). Two names are the same
when they are equal after case folding as well ("alice a" is "Alice A").
"""

from __future__ import annotations

import re
import unicodedata

MAX_LEN = 32
_ALLOWED = re.compile(rf"[A-Za-z0-9][A-Za-z0-9 _.\-]{{0,{MAX_LEN - 1}}}")
RULE = f"1 to {MAX_LEN} letters, digits, spaces, '_', '.' or '-', starting with a letter or digit"


def display_name(raw: str) -> str | None:
    """The name as it is stored and shown, or None when it is not a valid name."""
    name = " ".join(unicodedata.normalize("NFKC", raw).split())
    return name if _ALLOWED.fullmatch(name) else None


def name_key(name: str) -> str:
    """What two names are compared by: NFKC, case folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold()).split())


def holders(graded: list[tuple[str, str]]) -> dict[str, str]:
    """{name key: student} from (student, display name) of graded runs, oldest first: a name is held
    by the first student whose graded run carried it. An upload that never ran, or whose run the
    grader could not grade, holds no name (no student can reserve classmates' names)."""
    held: dict[str, str] = {}
    for student, name in graded:
        held.setdefault(name_key(name), student)
    return held
