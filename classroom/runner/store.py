"""Everything the runner keeps, in one SQLite file: DIR/runner.sqlite (WAL).

    students  id, the sha256 of their token, revoked
    jobs      one per upload: student, state, when, attempts, the lease of the
              worker grading it, the display name it opted in to the board with,
              each interruption (``retries``: when and what really happened)
    files     the kernel files of a job, as bytes (never a path from a client);
              kept after the grade, so that a TA can requeue it
    reports   report.json and report.md of a finished job
    workers   the worker of each slot: process id, the job it holds, heartbeat
    grants    runs a TA gave back to a student (they count in the quota's window)
    extensions  a student's own deadline, later than the course's (meta close_at)

A job is ``queued``, ``running`` (a worker holds its lease), ``done`` (a
report is stored: a grade, or the grader error that stood in for one) or
``replaced`` (a later upload of the same student took its place before it
ran). A run counts against the quota while it waits or runs, and once it is
graded; a job the grader could not grade (``done`` with an ``error``) does not:
the run is given back. The server process and every worker process open the file; each change
is one ``BEGIN IMMEDIATE`` transaction, so two processes never act on one
job at once.

Leases make "graded once" hold: a worker takes a job by writing its own owner
id and a deadline into the job, renews the deadline while it grades, and
stores a report only while the job is still running under its lease. A job
whose worker died (the server notices and gives it back) or went silent (its
lease ran out) or whose grade was killed by a signal is queued again, in front
of the others, and the attempt is spent; the old worker, should it still be
alive, can no longer store a report for it. A job given back by a clean stop
of the server spends no attempt. A job interrupted ``MAX_ATTEMPTS`` times gets
a grader-error report (which says each time what happened) instead of a
fourth try.

Tokens are never stored: only their sha256. A token is compared with every
student's hash with ``hmac.compare_digest``, each comparison made whatever the
ones before found, so the time taken says nothing about which hash, or how
much of it, matched. Students are added by the roster, never removed (a
revoked token keeps its student's jobs and reports).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from .names import holders, name_key

DB_NAME = "runner.sqlite"
SCHEMA_VERSION = 2
MAX_ATTEMPTS = 3          # a job given back this many times is not tried again
TOKEN_BYTES = 24          # 192 random bits: 48 hex digits (no CSV cell ever reads one as a formula)
BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS students (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0,
    issued REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    student TEXT NOT NULL REFERENCES students(id),
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'replaced')),
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    requeued INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_until REAL,
    remote TEXT,
    display_name TEXT,
    score REAL,
    max_score REAL,
    error TEXT,
    retries TEXT NOT NULL DEFAULT '[]',
    device TEXT,
    reached_kernels INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, student);
CREATE INDEX IF NOT EXISTS jobs_student ON jobs(student, created);
CREATE TABLE IF NOT EXISTS files (
    job TEXT NOT NULL REFERENCES jobs(id),
    name TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (job, name)
);
CREATE TABLE IF NOT EXISTS reports (
    job TEXT PRIMARY KEY REFERENCES jobs(id),
    report_json TEXT NOT NULL,
    report_md TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS grants (
    student TEXT NOT NULL REFERENCES students(id),
    runs INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS extensions (
    student TEXT PRIMARY KEY REFERENCES students(id),
    until REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (
    slot TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    pid INTEGER,
    job TEXT,
    started REAL NOT NULL,
    heartbeat REAL NOT NULL
);
"""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token() -> str:
    return secrets.token_hex(TOKEN_BYTES)


class QuotaUsed(Exception):
    """The student has used their runs of the window; ``renews_at`` (epoch seconds) frees one."""

    def __init__(self, limit: int, window_h: float, renews_at: float):
        super().__init__(limit, window_h, renews_at)
        self.limit, self.window_h, self.renews_at = limit, window_h, renews_at


class Closed(Exception):
    """Uploads are closed for this student (the deadline, ``until``: epoch seconds, or None)."""

    def __init__(self, until: float | None):
        super().__init__(until)
        self.until = until


class NameTaken(Exception):
    """Another student holds this display name (names.py: the same after NFKC, case folding and
    whitespace collapse; held by the first graded run that carried it)."""


@dataclass(frozen=True)
class Quota:
    limit: int            # runs per window (0: no limit)
    window_h: float

    def since(self, now: float) -> float:
        return now - self.window_h * 3600


@dataclass(frozen=True)
class Job:
    id: str
    student: str
    state: str
    created: float
    started: float | None
    finished: float | None
    attempts: int
    display_name: str | None
    lease_owner: str | None = None
    remote: str | None = None
    error: str | None = None
    retries: tuple = ()            # ({"at": epoch seconds, "why": one line, "counted": bool}, ...)
    score: float | None = None
    max_score: float | None = None


def _job(row) -> Job:
    return Job(row["id"], row["student"], row["state"], row["created"], row["started"], row["finished"],
               row["attempts"], row["display_name"], row["lease_owner"], row["remote"], row["error"],
               tuple(json.loads(row["retries"] or "[]")), row["score"], row["max_score"])


# The runs that count against a student's quota: waiting, running, or graded (not a grader error).
_COUNTED = "(state IN ('queued', 'running') OR (state = 'done' AND error IS NULL))"
_MIGRATIONS = {1: ["ALTER TABLE jobs ADD COLUMN retries TEXT NOT NULL DEFAULT '[]'",
                   "ALTER TABLE jobs ADD COLUMN device TEXT",
                   "ALTER TABLE jobs ADD COLUMN reached_kernels INTEGER NOT NULL DEFAULT 0"]}


# The fair order of the queue: a job given back by a dead worker first, then round-robin by
# student: whoever was served least recently (never, first), then the oldest upload.
_FAIR_ORDER = """
    ORDER BY j.requeued DESC,
             COALESCE((SELECT MAX(k.started) FROM jobs k WHERE k.student = j.student AND k.id != j.id), 0),
             j.seq
"""


class Store:
    """One connection to DIR/runner.sqlite. Not shared between threads: each
    thread or process opens its own (``Store(dir)`` is cheap)."""

    def __init__(self, data_dir: str | os.PathLike, create: bool = False):
        self.dir = Path(data_dir)
        path = self.dir / DB_NAME
        if not create and not path.is_file():
            raise FileNotFoundError(f"{path}: no runner database here (python -m classroom serve creates it)")
        self.db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                  check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self.db.execute("PRAGMA foreign_keys=ON")
        if create:
            with self.transaction() as db:
                old = db.execute("SELECT name FROM sqlite_master WHERE name = 'meta'").fetchone() and \
                    db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                for stmt in _MIGRATIONS.get(int(old[0]), []) if old else []:
                    db.execute(stmt)   # a runner of the previous version: its data kept
                for stmt in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(stmt)
                if not old or int(old[0]) in _MIGRATIONS:
                    db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            os.chmod(path, 0o600)   # token hashes, reports: the TA's alone
        version = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if version is None or int(version[0]) != SCHEMA_VERSION:
            raise RuntimeError(f"{path}: schema version {version and version[0]}, expected {SCHEMA_VERSION}")

    def close(self) -> None:
        self.db.close()

    @contextlib.contextmanager
    def transaction(self):
        """One write transaction, taken at once (BEGIN IMMEDIATE): no other process writes meanwhile."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # ------------------------------------------------------------------------- students and tokens

    def add_students(self, ids: list[str], now: float | None = None) -> dict[str, str]:
        """Give every id not yet known a fresh token; {id: token} of those added (the only time a
        token exists in clear, besides DIR/tokens.csv)."""
        now = time.time() if now is None else now
        fresh = {}
        with self.transaction() as db:
            known = {r[0] for r in db.execute("SELECT id FROM students")}
            for sid in ids:
                if sid not in known and sid not in fresh:
                    fresh[sid] = new_token()
                    db.execute("INSERT INTO students (id, token_hash, issued) VALUES (?, ?, ?)",
                               (sid, token_hash(fresh[sid]), now))
        return fresh

    def students(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT id, revoked, issued FROM students ORDER BY id").fetchall()

    def reissue(self, sid: str) -> str:
        """A new token for ``sid`` (the old one stops working); KeyError when unknown."""
        token = new_token()
        with self.transaction() as db:
            if db.execute("UPDATE students SET token_hash = ?, revoked = 0, issued = ? WHERE id = ?",
                          (token_hash(token), time.time(), sid)).rowcount != 1:
                raise KeyError(sid)
        return token

    def revoke(self, sid: str) -> None:
        with self.transaction() as db:
            if db.execute("UPDATE students SET revoked = 1 WHERE id = ?", (sid,)).rowcount != 1:
                raise KeyError(sid)

    def authenticate(self, token: str | None) -> str | None:
        """The student whose live token this is, or None. Constant time in the token."""
        if not token:
            return None
        wanted = token_hash(token).encode()
        found = None
        for row in self.db.execute("SELECT id, token_hash, revoked FROM students"):
            same = hmac.compare_digest(wanted, row["token_hash"].encode())
            if same and not row["revoked"]:
                found = row["id"]
        return found

    # ------------------------------------------------------------------------- uploads

    def submit(self, student: str, files: dict[str, bytes], quota: Quota, display_name: str | None = None,
               now: float | None = None) -> tuple[str, str | None, int]:
        """Queue a job; (its id, the id of the queued job it replaced or None, runs used in the window
        with this one). QuotaUsed when the window's runs are used; NameTaken when another student
        shows under ``display_name``. A replaced job that never ran does not count."""
        now = time.time() if now is None else now
        job = secrets.token_urlsafe(12)
        with self.transaction() as db:
            until = self._deadline(db, student)
            if until is not None and now >= until:
                raise Closed(until)
            if display_name is not None and holders(self._named_runs(db)).get(
                    name_key(display_name), student) != student:
                raise NameTaken(display_name)
            queued = db.execute("SELECT id FROM jobs WHERE student = ? AND state = 'queued'", (student,)).fetchone()
            counted = self._counted(db, student, quota, now, but=queued[0] if queued else "")
            limit = quota.limit + self._granted(db, student, quota, now) if quota.limit else 0
            if limit and len(counted) >= limit:
                raise QuotaUsed(quota.limit, quota.window_h, counted[-limit] + quota.window_h * 3600)
            if queued:
                db.execute("UPDATE jobs SET state = 'replaced', finished = ? WHERE id = ?", (now, queued[0]))
                db.execute("DELETE FROM files WHERE job = ?", (queued[0],))
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            db.execute("INSERT INTO jobs (id, seq, student, state, created, display_name) "
                       "VALUES (?, ?, ?, 'queued', ?, ?)", (job, seq, student, now, display_name))
            db.executemany("INSERT INTO files (job, name, data) VALUES (?, ?, ?)",
                           [(job, name, sqlite3.Binary(data)) for name, data in sorted(files.items())])
        return job, queued[0] if queued else None, len(counted) + 1

    def _counted(self, db, student: str, quota: Quota, now: float, but: str = "") -> list[float]:
        """Upload times of the student's runs in the window that count (_COUNTED), oldest first."""
        return [r[0] for r in db.execute(
            f"SELECT created FROM jobs WHERE student = ? AND created > ? AND {_COUNTED} AND id != ? "
            "ORDER BY created", (student, quota.since(now), but))]

    def _granted(self, db, student: str, quota: Quota, now: float) -> int:
        """Runs a TA gave back to the student within the window."""
        return db.execute("SELECT COALESCE(SUM(runs), 0) FROM grants WHERE student = ? AND at > ?",
                          (student, quota.since(now))).fetchone()[0]

    def quota_state(self, student: str, quota: Quota, now: float | None = None) -> dict:
        now = time.time() if now is None else now
        counted = self._counted(self.db, student, quota, now)
        limit = quota.limit + self._granted(self.db, student, quota, now) if quota.limit else 0
        renews = counted[-limit] + quota.window_h * 3600 if limit and len(counted) >= limit else None
        return {"limit": limit, "window_h": quota.window_h, "used": len(counted), "renews_at": renews,
                "left": max(0, limit - len(counted)) if limit else None}

    # ------------------------------------------------------------------------- the TA's levers

    def grant(self, student: str, runs: int, now: float | None = None) -> None:
        """Give ``student`` ``runs`` more runs in the quota's current window; KeyError when unknown."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM students WHERE id = ?", (student,)).fetchone() is None:
                raise KeyError(student)
            db.execute("INSERT INTO grants (student, runs, at) VALUES (?, ?, ?)",
                       (student, runs, time.time() if now is None else now))

    def set_close_at(self, when: float | None) -> None:
        """The deadline for uploads (epoch seconds; None: open)."""
        with self.transaction() as db:
            if when is None:
                db.execute("DELETE FROM meta WHERE key = 'close_at'")
            else:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('close_at', ?)", (repr(float(when)),))

    def close_at(self) -> float | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'close_at'").fetchone()
        return float(row[0]) if row else None

    def extend(self, student: str, until: float | None) -> None:
        """A student's own deadline (None: the course's again); KeyError when unknown."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM students WHERE id = ?", (student,)).fetchone() is None:
                raise KeyError(student)
            db.execute("DELETE FROM extensions WHERE student = ?", (student,))
            if until is not None:
                db.execute("INSERT INTO extensions (student, until) VALUES (?, ?)", (student, until))

    def extensions(self) -> dict[str, float]:
        return {r[0]: r[1] for r in self.db.execute("SELECT student, until FROM extensions ORDER BY student")}

    def _deadline(self, db, student: str) -> float | None:
        """When uploads close for ``student``: their extension, when later than the course's deadline."""
        row = db.execute("SELECT value FROM meta WHERE key = 'close_at'").fetchone()
        if row is None:
            return None
        ext = db.execute("SELECT until FROM extensions WHERE student = ?", (student,)).fetchone()
        return max(float(row[0]), ext[0]) if ext else float(row[0])

    def requeue(self, job_id: str) -> Job:
        """Grade a job again (a TA's decision): its report dropped, its attempts reset, first in line.
        KeyError when there is no such job, ValueError when it cannot be (replaced, or running)."""
        with self.transaction() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise KeyError(job_id)
            if row["state"] not in ("done", "queued"):
                raise ValueError(f"job {job_id} is {row['state']}: "
                                 + ("it never ran, and its files are gone" if row["state"] == "replaced"
                                    else "it is being graded now"))
            if not db.execute("SELECT 1 FROM files WHERE job = ?", (job_id,)).fetchone():
                raise ValueError(f"job {job_id}: its kernel files are no longer kept")
            db.execute("DELETE FROM reports WHERE job = ?", (job_id,))
            db.execute("UPDATE jobs SET state = 'queued', requeued = 1, attempts = 0, finished = NULL, score = NULL, "
                       "max_score = NULL, error = NULL, retries = '[]' WHERE id = ?", (job_id,))
        return self.job(job_id)

    def all_jobs(self, student: str | None = None) -> list[Job]:
        """Every job but the replaced ones, newest first (one student's with ``student``)."""
        where, args = ("AND student = ?", (student,)) if student else ("", ())
        return [_job(r) for r in self.db.execute(
            f"SELECT * FROM jobs WHERE state != 'replaced' {where} ORDER BY created DESC, seq DESC", args)]

    # ------------------------------------------------------------------------- reading jobs

    def job(self, job_id: str, student: str | None = None) -> Job | None:
        """The job, or None; with ``student``, None unless it is theirs."""
        row = self.db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None or (student is not None and not hmac.compare_digest(row["student"].encode(),
                                                                             student.encode())):
            return None
        return _job(row)

    def files(self, job_id: str) -> dict[str, bytes]:
        return {r["name"]: bytes(r["data"]) for r in self.db.execute(
            "SELECT name, data FROM files WHERE job = ?", (job_id,))}

    def report(self, job_id: str) -> tuple[str, str] | None:
        row = self.db.execute("SELECT report_json, report_md FROM reports WHERE job = ?", (job_id,)).fetchone()
        return (row[0], row[1]) if row else None

    def queue(self) -> list[Job]:
        """The queued jobs in the order workers will take them."""
        return [_job(r) for r in self.db.execute(f"SELECT j.* FROM jobs j WHERE j.state = 'queued' {_FAIR_ORDER}")]

    def running(self) -> list[Job]:
        return [_job(r) for r in self.db.execute("SELECT * FROM jobs WHERE state = 'running' ORDER BY started")]

    def durations(self, device: str, last: int = 50) -> list[float]:
        """How long the last ``last`` grades on ``device`` (cpu, cuda) that reached the kernels took,
        newest first: a stub's quick grade says nothing of a real one."""
        return [r[0] for r in self.db.execute(
            "SELECT finished - started FROM jobs WHERE state = 'done' AND error IS NULL AND started IS NOT NULL "
            "AND reached_kernels = 1 AND device = ? ORDER BY finished DESC LIMIT ?", (device, last))]

    def _named_runs(self, db) -> list[tuple[str, str]]:
        """(student, display name) of every graded run that opted in to the board, oldest first."""
        return [(r[0], r[1]) for r in db.execute(
            "SELECT student, display_name FROM jobs WHERE state = 'done' AND error IS NULL "
            "AND display_name IS NOT NULL ORDER BY finished, seq")]

    def finished_since(self, since: float) -> list[tuple[float, float | None]]:
        """(finished, started) of the jobs done since ``since``, newest first."""
        return [(r[0], r[1]) for r in self.db.execute(
            "SELECT finished, started FROM jobs WHERE state = 'done' AND finished >= ? ORDER BY finished DESC",
            (since,))]

    def board_jobs(self) -> list[tuple[str, str, float, str]]:
        """(student, display name, finished, report.json) of every finished job that opted in to the board."""
        return [(r[0], r[1], r[2], r[3]) for r in self.db.execute(
            "SELECT j.student, j.display_name, j.finished, r.report_json FROM jobs j JOIN reports r ON r.job = j.id "
            "WHERE j.state = 'done' AND j.display_name IS NOT NULL AND j.error IS NULL ORDER BY j.finished, j.seq")]

    # ------------------------------------------------------------------------- workers and leases

    def register_worker(self, slot: str, owner: str, pid: int) -> None:
        now = time.time()
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO workers (slot, owner, pid, job, started, heartbeat) "
                       "VALUES (?, ?, ?, NULL, ?, ?)", (slot, owner, pid, now, now))

    def workers(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM workers ORDER BY slot").fetchall()

    def set_paused(self, paused: bool) -> None:
        """While the server stops, no worker takes a job."""
        with self.transaction() as db:
            db.execute("DELETE FROM meta WHERE key = 'paused'")
            if paused:
                db.execute("INSERT INTO meta VALUES ('paused', '1')")

    def lease(self, owner: str, slot: str, lease_s: float, now: float | None = None) -> Job | None:
        """Take the first job of the fair order for ``owner``, or None when the queue is empty (or
        paused: the server is stopping)."""
        now = time.time() if now is None else now
        with self.transaction() as db:
            paused = db.execute("SELECT 1 FROM meta WHERE key = 'paused'").fetchone()
            row = None if paused else db.execute(
                f"SELECT j.* FROM jobs j WHERE j.state = 'queued' AND j.attempts < ? {_FAIR_ORDER} LIMIT 1",
                (MAX_ATTEMPTS,)).fetchone()
            if row is None:
                db.execute("UPDATE workers SET heartbeat = ?, job = NULL WHERE slot = ? AND owner = ?",
                           (now, slot, owner))
                return None
            db.execute("UPDATE jobs SET state = 'running', started = ?, attempts = attempts + 1, requeued = 0, "
                       "lease_owner = ?, lease_until = ?, remote = NULL WHERE id = ?",
                       (now, owner, now + lease_s, row["id"]))
            db.execute("UPDATE workers SET heartbeat = ?, job = ? WHERE slot = ? AND owner = ?",
                       (now, row["id"], slot, owner))
            return self.job(row["id"])

    def renew(self, owner: str, job_id: str, lease_s: float) -> bool:
        """Extend the lease; False when ``owner`` no longer holds it (stop grading that job)."""
        now = time.time()
        with self.transaction() as db:
            held = db.execute("UPDATE jobs SET lease_until = ? WHERE id = ? AND state = 'running' AND lease_owner = ?",
                              (now + lease_s, job_id, owner)).rowcount == 1
            db.execute("UPDATE workers SET heartbeat = ? WHERE owner = ?", (now, owner))
        return held

    def set_remote(self, owner: str, job_id: str, remote: str) -> None:
        """Record where a job runs (a Slurm job id), so that it can be cancelled if its worker dies."""
        with self.transaction() as db:
            db.execute("UPDATE jobs SET remote = ? WHERE id = ? AND lease_owner = ?", (remote, job_id, owner))

    def finish(self, owner: str, job_id: str, report_json: str, report_md: str, error: str | None = None,
               now: float | None = None, device: str | None = None, reached_kernels: bool = False) -> bool:
        """Store the job's report and mark it done, only while ``owner`` holds its lease; False otherwise
        (the job was given back: the report of this attempt is dropped). ``device`` and
        ``reached_kernels``: what the ETAs learn from this grade (durations)."""
        now = time.time() if now is None else now
        try:
            data = json.loads(report_json)
            score, max_score = float(data.get("score", 0)), float(data.get("max_score", 0))
        except (ValueError, TypeError, AttributeError):
            score = max_score = None
        with self.transaction() as db:
            if db.execute("UPDATE jobs SET state = 'done', finished = ?, lease_owner = NULL, lease_until = NULL, "
                          "score = ?, max_score = ?, error = ?, device = ?, reached_kernels = ? "
                          "WHERE id = ? AND state = 'running' AND lease_owner = ?",
                          (now, score, max_score, error, device, int(reached_kernels), job_id, owner)).rowcount != 1:
                return False
            db.execute("INSERT INTO reports (job, report_json, report_md) VALUES (?, ?, ?)",
                       (job_id, report_json, report_md))
            db.execute("UPDATE workers SET job = NULL, heartbeat = ? WHERE owner = ?", (now, owner))
        return True

    def give_back(self, owner: str | None = None, expired_before: float | None = None, why: str = "",
                  spent: bool = True) -> list[Job]:
        """Queue again the running jobs of ``owner`` (a worker that ended), or those whose lease ran
        out before ``expired_before``; they go first, and ``why`` is kept with each (what the student
        and the TA read). ``spent`` False (a clean stop of the server): the attempt is not spent.
        Returns them as they were (``remote`` set where a cluster job may still run)."""
        with self.transaction() as db:
            if owner is not None:
                rows = db.execute("SELECT * FROM jobs WHERE state = 'running' AND lease_owner = ?", (owner,)).fetchall()
            else:
                rows = db.execute("SELECT * FROM jobs WHERE state = 'running' AND lease_until < ?",
                                  (expired_before,)).fetchall()
            for r in rows:
                self._requeue(db, r, why, spent)
        return [_job(r) for r in rows]

    def retry(self, owner: str, job_id: str, why: str) -> bool:
        """The worker gives its job back (its grade was killed by a signal): queued again, first, the
        attempt spent; False when ``owner`` no longer holds the lease."""
        with self.transaction() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ? AND state = 'running' AND lease_owner = ?",
                             (job_id, owner)).fetchone()
            if row is None:
                return False
            self._requeue(db, row, why, spent=True)
            db.execute("UPDATE workers SET job = NULL WHERE owner = ?", (owner,))
        return True

    @staticmethod
    def _requeue(db, row, why: str, spent: bool) -> None:
        retries = json.loads(row["retries"] or "[]") + [{"at": time.time(), "why": why or "interrupted",
                                                         "counted": spent}]
        db.execute("UPDATE jobs SET state = 'queued', requeued = 1, lease_owner = NULL, lease_until = NULL, "
                   "attempts = attempts - ?, retries = ? WHERE id = ?", (0 if spent else 1, json.dumps(retries),
                                                                       row["id"]))

    def exhausted(self) -> list[Job]:
        """Queued jobs already interrupted MAX_ATTEMPTS times (each time, ``retries`` says how)."""
        return [_job(r) for r in self.db.execute("SELECT * FROM jobs WHERE state = 'queued' AND attempts >= ?",
                                                 (MAX_ATTEMPTS,))]

    def close_exhausted(self, job_id: str, report_json: str, report_md: str, error: str) -> bool:
        """A job given back MAX_ATTEMPTS times: done, with the grader-error report made for it."""
        now = time.time()
        with self.transaction() as db:
            if db.execute("UPDATE jobs SET state = 'done', finished = ?, error = ?, score = 0, max_score = NULL "
                          "WHERE id = ? AND state = 'queued' AND attempts >= ?",
                          (now, error, job_id, MAX_ATTEMPTS)).rowcount != 1:
                return False
            db.execute("INSERT INTO reports (job, report_json, report_md) VALUES (?, ?, ?)",
                       (job_id, report_json, report_md))
        return True
