"""The queue as students see it: places, running jobs, ETAs; and the leaderboard.

The order itself is the store's (store._FAIR_ORDER): a job given back by a
dead worker first, then round-robin by student (whoever was served least
recently), then the oldest upload. With one queued job per student (a new
upload replaces it) no student can push others back by uploading often.

ETAs come from how long the last grades on this device that reached the
kernels took (a stub's quick grade says nothing of a real one): their
``ETA_PERCENTILE``-th percentile, so that most reports come before the time
announced, or ``DEFAULT_JOB_S`` before there are any. Each queued job, in
order, starts when the first of the workers frees up, and ends one job's
time later.
"""

from __future__ import annotations

import heapq
import json
import math
import time
from dataclasses import dataclass

from .names import holders, name_key
from .store import Store

DEFAULT_JOB_S = {"cuda": 300.0, "cpu": 120.0}   # a grade's wall time before any was measured here
ETA_PERCENTILE = 90


@dataclass(frozen=True)
class Place:
    job: str
    student: str
    position: int       # 1: next to start
    eta_s: float        # until its report, from now


@dataclass(frozen=True)
class Running:
    job: str
    student: str
    slot: str
    elapsed_s: float
    eta_s: float        # until its report, from now


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def job_seconds(store: Store, device: str) -> float:
    durations = [d for d in store.durations(device) if d is not None and d > 0]
    return percentile(durations, ETA_PERCENTILE) if durations else DEFAULT_JOB_S.get(device, 120.0)


def snapshot(store: Store, workers: int, device: str, now: float | None = None) -> tuple[list[Place], list[Running]]:
    """(the queue in order, the running jobs), each with its ETA."""
    now = time.time() if now is None else now
    per_job = job_seconds(store, device)
    slots = {w["job"]: w["slot"] for w in store.workers() if w["job"]}
    running = []
    free = []
    for job in store.running():
        elapsed = max(0.0, now - (job.started or now))
        left = max(per_job - elapsed, 0.1 * per_job)   # past its usual time: soon, not "now"
        running.append(Running(job.id, job.student, slots.get(job.id, "?"), elapsed, left))
        free.append(left)
    free = sorted(free)[:max(workers, 0)]
    free += [0.0] * max(0, workers - len(free))
    heapq.heapify(free)
    places = []
    for i, job in enumerate(store.queue(), 1):
        start = heapq.heappop(free) if free else math.inf
        places.append(Place(job.id, job.student, i, start + per_job))
        heapq.heappush(free, start + per_job)
    return places, running


def finished_recently(store: Store, device: str, now: float | None = None,
                      window_s: float = 3600) -> tuple[list[dict], float | None]:
    """([{ago_s, took_s}] of the jobs finished in the last ``window_s``, newest first; the median
    time of the recent grades on this device that reached the kernels, or None)."""
    now = time.time() if now is None else now
    done = [{"ago_s": max(0.0, now - f), "took_s": (f - s) if s else None}
            for f, s in store.finished_since(now - window_s)]
    real = [d for d in store.durations(device) if d and d > 0]
    return done, (sorted(real)[len(real) // 2] if real else None)


# ----------------------------------------------------------------------------- the leaderboard

def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def board_numbers(report: dict) -> tuple[dict[str, float], dict[str, float]]:
    """({task: performance points}, {performance test: kernel ms}) of one report. A test's time
    counts only when its task ran clean (no flag, every correctness test passed) and the judge
    trusted the time: the test earned points (passed or partial). A time the judge rejected (timed
    outputs wrong, below the memory floor) or voided (a flag on the task) is no record."""
    tests = [t for t in report.get("tests", []) if isinstance(t, dict)]
    tasks = {t.get("task"): t for t in report.get("tasks", []) if isinstance(t, dict)}
    points: dict[str, float] = {}
    times: dict[str, float] = {}
    for t in tests:
        if t.get("kind") != "performance" or not _finite(t.get("score")) or t.get("status") == "not_run":
            continue
        task = t.get("task")
        points[task] = points.get(task, 0.0) + t["score"]
        clean = tasks.get(task, {}).get("status") == "ok" and all(
            c.get("status") == "passed" for c in tests if c.get("task") == task and c.get("kind") == "correctness")
        ms = (t.get("details") or {}).get("kernel_ms")
        trusted = t.get("status") in ("passed", "partial") and t["score"] > 0
        if clean and trusted and _finite(ms) and ms > 0:
            times[t["name"]] = float(ms)
    return points, times


@dataclass
class BoardRow:
    name: str
    points: dict          # task -> best performance points
    times: dict           # performance test -> best kernel ms
    total: float
    correctness: float = 0.0   # the best correctness points of the student's runs
    rank: int = 0              # 1 for the best total; equal totals share a rank


def leaderboard(store: Store) -> list[BoardRow]:
    """One row per student who opted in and has a trusted timing: their latest display name, per
    task the best performance points and per test the best kernel time of their opted-in reports,
    their best correctness points; best total first, equal totals ranked equal (then listed by
    time). Without timings (CPU grades) there is no board."""
    rows: dict[str, BoardRow] = {}
    jobs = store.board_jobs()
    held = holders([(student, name) for student, name, _, _ in jobs])
    for student, name, _, text in jobs:
        if held[name_key(name)] != student:
            continue   # queued before its holder's run was graded: shown under no name of another's
        try:
            report = json.loads(text)
        except ValueError:
            continue
        if not isinstance(report, dict) or "grader_error" in report:
            continue
        points, times = board_numbers(report)
        correct = sum(t["score"] for t in report.get("tests", []) if isinstance(t, dict)
                      and t.get("kind") == "correctness" and _finite(t.get("score")) and not t.get("bonus"))
        row = rows.setdefault(student, BoardRow(name, {}, {}, 0.0))
        row.correctness = max(row.correctness, correct)
        row.name = name   # the latest choice (jobs come oldest first)
        for k, v in points.items():
            row.points[k] = max(v, row.points.get(k, v))
        for k, v in times.items():
            row.times[k] = min(v, row.times.get(k, v))
    board = [r for r in rows.values() if r.times]
    for row in board:
        row.total = sum(row.points.values())
    board.sort(key=lambda r: (-r.total, sum(r.times.values()), r.name))
    for i, row in enumerate(board):
        row.rank = board[i - 1].rank if i and row.total == board[i - 1].total else i + 1
    return board
