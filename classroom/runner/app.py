"""The runner's HTTP interface (FastAPI). What ``make submit`` and a browser see.

    POST /api/submissions        upload: Authorization: Bearer TOKEN; body: a zip of the kernel files
                                 (upload.py); ?display_name=NAME opts this run in to the leaderboard.
                                 201 {job, state, position, eta_s, replaced, quota}
    GET  /api/submissions        the token's own runs, newest first: [{job, state, uploaded, finished,
                                 score, max_score, error}], and the quota
    GET  /api/submissions/{job}  the job, to its owner only: {job, state, position, eta_s, attempts,
                                 retries: [{at, why}]}, and when done {report: report.json, report_md}.
                                 Another student's job, or none: 404, the same answer.
    GET  /api/status             the queue without names: [{position, eta_s}], running [{slot, elapsed_s,
                                 eta_s}], the leaderboard
    GET  /                       the same as a page (page.py)

Every refusal is a 4xx with ``{"error": one line}``: 401 no or unknown token,
413 too large (a body over the limit is still read, up to DRAIN_BYTES, so that
the sender hears the 413 rather than a broken connection), 400 an archive outside the
bounds or a bad display name, 403 uploads closed (the deadline passed, ``closed_at``), 409 a display
name another student holds, 429 the quota used (with ``renews_at``,
epoch seconds, and a Retry-After header). An error of the runner itself is a
500 with a line, logged with its traceback; never a student's input.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse

from . import page
from .names import RULE, display_name
from .scheduler import finished_recently, leaderboard, snapshot
from .store import Closed, NameTaken, Quota, QuotaUsed, Store
from .upload import UploadRefused, read_kernel_files

DRAIN_BYTES = 16 << 20   # a body over the limit is still read up to this much, so that its sender gets the 413


@dataclass(frozen=True)
class Settings:
    data_dir: str
    device: str
    workers: int
    quota: Quota
    kernel_files: tuple[str, ...]
    max_upload: int
    tests: str
    tasks: tuple[str, ...]
    performance_tests: tuple[str, ...]   # the rubric's performance tests that students see (the board's columns)


def _error(status: int, message: str, **extra) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if "retry_after" in extra:
        headers = {"Retry-After": str(max(1, int(extra.pop("retry_after"))))}
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


def create_app(settings: Settings) -> FastAPI:
    app = FastAPI(title="Course GPU runner", docs_url=None, redoc_url=None, openapi_url=None)
    local = threading.local()

    def store() -> Store:
        s = getattr(local, "store", None)
        if s is None:
            s = local.store = Store(settings.data_dir)
        return s

    def student_of(request: Request) -> str | None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return store().authenticate(token.strip()) if scheme.lower() == "bearer" else None

    def place_of(job_id: str) -> tuple[int | None, float | None]:
        places, running = snapshot(store(), settings.workers, settings.device)
        for p in places:
            if p.job == job_id:
                return p.position, p.eta_s
        for r in running:
            if r.job == job_id:
                return 0, r.eta_s
        return None, None

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception):
        traceback.print_exception(exc)
        return _error(500, f"the runner failed on this request ({type(exc).__name__}); tell a TA")

    @app.post("/api/submissions")
    async def submit(request: Request):
        if "authorization" not in request.headers:
            return _error(401, "no token: put yours in ~/.runner-token (or TOKEN_FILE=file) and make submit "
                               "SERVER=... again")
        student = student_of(request)
        if student is None:
            return _error(401, "unknown or revoked token: check TOKEN (a TA can reissue it)")
        name = request.query_params.get("display_name")
        if name is not None:
            name = display_name(name)
            if name is None:
                return _error(400, f"display name: {RULE}")
        length = request.headers.get("content-length")
        limit = settings.max_upload
        drain = max(DRAIN_BYTES, 4 * limit)
        if length is not None and not length.isdigit():
            return _error(400, "bad Content-Length")
        too_large = _error(413, f"the upload is larger than {limit // 1024} KiB")
        if length is not None and int(length) > drain:
            return too_large       # not read at all: the connection closes under the sender
        body, seen = bytearray(), 0
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > drain:
                return too_large
            if seen <= limit:
                body += chunk
        if seen > limit:           # read to its end (up to DRAIN_BYTES), so the sender hears why
            return too_large
        try:
            files = read_kernel_files(bytes(body), settings.kernel_files)
        except UploadRefused as e:
            return _error(e.status, e.message)
        try:
            job, replaced, used = store().submit(student, files, settings.quota, name)
        except QuotaUsed as e:
            wait = e.renews_at - time.time()
            return _error(429, f"quota used: {e.limit} run(s) per {e.window_h:g} h; the next one is possible at "
                               f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(e.renews_at))}",
                          renews_at=e.renews_at, retry_after=wait)
        except Closed as e:
            return _error(403, f"uploads are closed: the deadline was "
                               f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(e.until))}", closed_at=e.until)
        except NameTaken:
            return _error(409, f"display name {name!r} is taken by another student: choose another")
        position, eta = place_of(job)
        quota = store().quota_state(student, settings.quota)
        state = "running" if position == 0 else "queued"   # a free worker may have taken it already
        return JSONResponse({"job": job, "state": state, "position": position, "eta_s": eta,
                             "replaced": replaced, "quota": quota, "tests": settings.tests}, status_code=201)

    @app.get("/api/submissions")
    def my_jobs(request: Request):
        student = student_of(request)
        if student is None:
            return _error(401, "unknown or revoked token: check TOKEN (a TA can reissue it)")
        runs = [{"job": j.id, "state": j.state, "uploaded": j.created, "finished": j.finished,
                 "score": j.score, "max_score": j.max_score, "error": j.error,
                 "display_name": j.display_name} for j in store().all_jobs(student)]
        return {"runs": runs, "quota": store().quota_state(student, settings.quota)}

    @app.get("/api/submissions/{job_id}")
    def job_status(job_id: str, request: Request):
        student = student_of(request)
        if student is None:
            return _error(401, "unknown or revoked token: check TOKEN (a TA can reissue it)")
        job = store().job(job_id[:64], student)
        if job is None:
            return _error(404, "no such submission for this token")
        out = {"job": job.id, "state": job.state, "attempts": job.attempts,
               "retries": [{"at": r["at"], "why": r["why"]} for r in job.retries]}
        if job.state in ("queued", "running"):
            out["position"], out["eta_s"] = place_of(job.id)
        if job.state == "done":
            report = store().report(job.id)
            if report is not None:
                out["report"], out["report_md"] = json.loads(report[0]), report[1]
        return out

    def status_data() -> dict:
        places, running = snapshot(store(), settings.workers, settings.device)
        board = leaderboard(store())
        finished, median = finished_recently(store(), settings.device)
        return {"device": settings.device, "workers": settings.workers, "tests": settings.tests,
                "finished": [{"ago_s": round(f["ago_s"]), "took_s": None if f["took_s"] is None else round(f["took_s"])}
                             for f in finished],
                "median_grade_s": None if median is None else round(median),
                "queue": [{"position": p.position, "eta_s": round(p.eta_s)} for p in places],
                "running": [{"slot": r.slot, "elapsed_s": round(r.elapsed_s), "eta_s": round(r.eta_s)}
                            for r in running],
                "leaderboard": [{"rank": b.rank, "name": b.name, "points": b.points, "times_ms": b.times,
                                 "total": b.total, "correctness": b.correctness} for b in board],
                "tasks": list(settings.tasks), "performance_tests": list(settings.performance_tests)}

    @app.get("/api/status")
    def status():
        return status_data()

    @app.get("/", response_class=HTMLResponse)
    def index():
        return page.render(status_data())

    return app
