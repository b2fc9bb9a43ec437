"""An optional roster CSV: who each submission belongs to.

A header row names the columns, in any order and case; at least one of
``id``, ``email``, ``sid`` is needed:

    id       the submission's id (class.csv's id), its file or folder name, or the
             platform's id (Canvas user id, Moodle participant id)
    name     full name (or ``first name`` and ``last name``; ``student`` as in Canvas)
    email    (``email address``)
    sid      student id as the gradebook knows it (``student id``, ``sis user id``)

Gradescope's roster export (First Name, Last Name, SID, Email) and Canvas's
gradebook export (Student, ID, SIS User ID, ...) can be given as they are.
A submitter is matched by email, then SID; a submission without
one by its id, name or platform id. A roster value replaces what the
platform gave (the TA's file is the authority); an empty one does not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from .csvio import CsvError, column, read_rows
from .layouts import Entry, Person

ID_COLUMNS = ("id", "student id number")
NAME_COLUMNS = ("name", "full name", "student", "student name")
EMAIL_COLUMNS = ("email", "email address", "e-mail")
SID_COLUMNS = ("sid", "student id", "sis user id")


@dataclass(frozen=True)
class Member:
    key: str      # the id column's value ('' if none)
    person: Person


class Roster:
    """Roster rows indexed by id, email (case-insensitive) and SID."""

    def __init__(self, members: list[Member]):
        self.members = members
        self.by_id = {m.key: m for m in members if m.key}
        self.by_email = {m.person.email.casefold(): m for m in members if m.person.email}
        self.by_sid = {m.person.sid: m for m in members if m.person.sid}

    def find_person(self, p: Person) -> Member | None:
        return (self.by_email.get(p.email.casefold()) if p.email else None) or \
            (self.by_sid.get(p.sid) if p.sid else None)

    def find_keys(self, keys: set[str]) -> Member | None:
        hits = {id(m): m for k in keys for m in (self.by_id.get(k), self.by_email.get(k.casefold()),
                                                  self.by_sid.get(k)) if m is not None}
        return next(iter(hits.values())) if len(hits) == 1 else None


def load_roster(path: str | Path) -> Roster:
    header, rows = read_rows(path, "roster")
    keys = [h.strip().lower() for h in header]
    id_col, email_col, sid_col = column(keys, *ID_COLUMNS), column(keys, *EMAIL_COLUMNS), column(keys, *SID_COLUMNS)
    name_col, first, last = column(keys, *NAME_COLUMNS), column(keys, "first name"), column(keys, "last name")
    if not (id_col or email_col or sid_col):
        raise CsvError(f"roster {path}: expected a header with an id, email or sid column (and name); "
                       f"found {', '.join(header[:10])}")
    members = []
    for row in rows:
        name = row.get(name_col, "") if name_col else " ".join(
            v for v in (row.get(first or "", ""), row.get(last or "", "")) if v)
        if name.strip().lower() == "points possible":  # Canvas's gradebook export has this second row
            continue
        person = Person(name=name, email=row.get(email_col, "") if email_col else "",
                        sid=row.get(sid_col, "") if sid_col else "")
        member = Member(row.get(id_col, "") if id_col else "", person)
        if member.key or person.email or person.sid:
            members.append(member)
    return Roster(members)


def _merge(base: Person, extra: Person) -> Person:
    return Person(name=extra.name or base.name, email=extra.email or base.email, sid=extra.sid or base.sid)


def apply_roster(entries: list[Entry], roster: Roster) -> tuple[list[Entry], list[Member]]:
    """(entries with the roster's names, emails and SIDs; roster members no entry matched)."""
    used: set[int] = set()
    out = []
    for e in entries:
        people, applied = [], set()
        for p in e.people:
            m = roster.find_person(p)
            if m is not None:
                applied.add(id(m))
            people.append(_merge(p, m.person) if m else p)
        ids = {e.sid, e.original, e.lms_id} | ({e.original.rsplit(".", 1)[0]} if "." in e.original else set())
        m = roster.find_keys(ids - {""})
        if m is not None and id(m) not in applied:  # one submission, or several: bob/ and bob.zip
            applied.add(id(m))
            people = [_merge(people[0], m.person), *people[1:]] if people else [m.person]
        used |= applied
        out.append(replace(e, people=tuple(people)))
    return out, [m for m in roster.members if id(m) not in used]
