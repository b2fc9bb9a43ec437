"""One worker of the runner: takes the queue's jobs one at a time and grades each with the engine.

    python -m classroom.runner.worker DIR SLOT OWNER     (started by the server, one per slot)

The server (dispatch.py) starts one worker per GPU (``CUDA_VISIBLE_DEVICES``
set to it), or per CPU slot, or per Slurm job it may have running at once,
each under the process supervisor (grader/harness/proc.py): when the server
ends, so does every worker and every grade. The settings are the server's,
read from DIR/serve.json.

For each job: lease it (store.py), write its kernel files under fixed names
into a fresh folder DIR/work/<job>-<attempt>/submission/, run

    python -m grader grade submission --report-dir reports --rubric R --device D --tests visible

there under its own supervisor with the grade's own time limit (the batch's:
classroom.grade_process.grade_timeout), renew the lease while it runs, and store
report.json and report.md, with the job's id and times added. A grade killed
by a signal (the OOM killer, a TA) is not the student's doing: the job goes
back to the queue, first in line, as a dead worker's does (store.retry). A
grade that fails otherwise (the grader's crash, the time limit, no usable
report) gets the report the batch writes in that case, score 0 and the
reason, and the run is given back (store._COUNTED). The folder of a grade
that did not end in a report (its log, the files, what the grader wrote) is
kept as DIR/failed/<job>/<attempt>/ for the TA. When the lease is lost (the
server gave the job back), the grade is killed and its report, if any,
dropped: the job is graded once, by whoever holds it.

With ``executor`` slurm (or local, the same path on this machine) the grade
runs as a submitit job instead (``grade_remote``, through the executor the
batch's cluster mode builds); DIR must then be on a file system the nodes see.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.harness import proc
from grader.report import error_result, write_reports
from grader.rubric import DEFAULT_RUBRIC, load_rubric, visible_only

from ..grade_process import ROOT, _check_reports, _last_line, _tail
from ..reports import REPORT_JSON_BYTES
from .store import Job, Store

SETTINGS_FILE = "serve.json"
IDLE_POLL_S = 0.5
WAIT_STEP_S = 0.5


def file_name(slot: str) -> str:
    """A slot's name as a file name (a MIG slot's name has slashes)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", slot)


def read_settings(data_dir: Path) -> dict:
    return json.loads((Path(data_dir) / SETTINGS_FILE).read_text(encoding="utf-8"))


def grade_command(settings: dict) -> list[str]:
    """The engine's command, run in the job's folder (the report then names ``submission``)."""
    return [sys.executable, "-m", "grader", "grade", "submission", "--report-dir", "reports",
            "--rubric", settings["rubric"], "--device", settings["device"], "--tests", settings["tests"]]


def grade_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def grade_remote(cmd: list[str], work: str, timeout_s: float) -> int | None:
    """Run in a cluster job: the grade of ``work`` under its supervisor; its exit status, None on timeout."""
    with open(Path(work) / "grade.log", "wb") as log:
        p = proc.start(cmd, env=grade_env(), cwd=work, stdin=subprocess.DEVNULL, stdout=log,
                       stderr=subprocess.STDOUT, deadline_s=timeout_s)
    try:
        rc = p.wait()
        return None if p.timed_out else rc
    finally:
        p.kill()


def report_rubric(settings: dict):
    """The rubric of every report the runner makes itself (a grader error): with the hidden tests off,
    the visible one, as the grade's own report would be, so that no report names a hidden test and
    its total reads out of the visible maximum."""
    rubric = load_rubric(settings["rubric"] or DEFAULT_RUBRIC)
    return visible_only(rubric) if settings["tests"] == "visible" else rubric


def describe_status(rc: int | None) -> str:
    """An exit status in words: 'killed by signal 9 (SIGKILL)', 'exit status 1'."""
    if rc is not None and rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = "unknown"
        return f"killed by signal {-rc} ({name})"
    return f"exit status {rc}"


def error_report(rubric, reason: str) -> tuple[str, str]:
    """(report.json, report.md) of a job that could not be graded: score 0 and why."""
    with tempfile.TemporaryDirectory(prefix="runner-error-") as d:
        write_reports(error_result(rubric, "submission", reason), d, error=reason)
        return (Path(d, "report.json").read_text(encoding="utf-8"),
                Path(d, "report.md").read_text(encoding="utf-8"))


# Task states of a grade that never ran a kernel: its time says nothing of a real grade's (ETAs).
NOT_RUN_STATES = frozenset({"missing_file", "unreadable", "not_implemented", "import_error", "grader_error",
                            "forbidden_code", "syntax_error"})


def _utc(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch)) if epoch else "?"


def stamp(report_json: str, report_md: str, job: Job) -> tuple[str, str, bool]:
    """The report with the job's id and times in it (``runner`` in report.json, a line under
    report.md's title), and whether the grade reached the kernels (a task that ran)."""
    try:
        data = json.loads(report_json)
    except ValueError:
        return report_json, report_md, False
    if not isinstance(data, dict):
        return report_json, report_md, False
    now = time.time()
    data["runner"] = {"job": job.id, "uploaded": _utc(job.created), "graded": _utc(now), "attempt": job.attempts}
    reached = any(isinstance(t, dict) and t.get("status") not in NOT_RUN_STATES for t in data.get("tasks") or [])
    head, sep, rest = report_md.partition("\n")
    line = f"\n- Runner job `{job.id}`: uploaded {_utc(job.created)}, graded {_utc(now)}\n"
    return json.dumps(data), head + sep + line + rest, reached


def grade_pids(data_dir: Path, job: str) -> list[int]:
    """The process ids of the grade commands (``python -m grader grade``, not their supervisors) running
    for ``job`` now, read from /proc: their folder is DIR/work/<slot>/<job>-<attempt>-*. For a TA (or a
    check) that must stop one grade, and no other process, by its id."""
    work, pids = str(Path(data_dir).absolute() / "work"), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if argv[1:4] == [b"-m", b"grader", b"grade"] and cwd.startswith(work + os.sep) \
                and Path(cwd).name.startswith(f"{job}-"):
            pids.append(int(entry.name))
    return pids


def keep_failed(work: Path, data_dir: Path, job: Job) -> None:
    """The folder of a grade that did not end in a report, for the TA: DIR/failed/<job>/<attempt>/."""
    dest = data_dir / "failed" / job.id / str(job.attempts)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(work, dest, symlinks=True)
    except OSError as e:   # a full disk must not stop the report
        print(f"job {job.id}: could not keep its folder in {dest}: {e}", flush=True)


class Worker:
    def __init__(self, data_dir: Path, slot: str, owner: str):
        self.dir, self.slot, self.owner = Path(data_dir), slot, owner
        self.settings = read_settings(self.dir)
        self.store = Store(self.dir)
        self.lease_s = float(self.settings["lease_s"])
        self.rubric = report_rubric(self.settings)
        # One folder per slot, emptied at the start: what a killed worker's grade left goes with it.
        (self.dir / "work").mkdir(mode=0o700, exist_ok=True)
        self.work_root = self.dir / "work" / file_name(slot)
        shutil.rmtree(self.work_root, ignore_errors=True)
        self.work_root.mkdir(mode=0o700)

    def run_forever(self) -> None:
        self.store.register_worker(self.slot, self.owner, os.getpid())
        print(f"worker {self.slot} ({self.owner}, pid {os.getpid()}) ready", flush=True)
        while True:
            job = self.store.lease(self.owner, self.slot, self.lease_s)
            if job is None:
                time.sleep(IDLE_POLL_S)
                continue
            self.grade(job)

    def grade(self, job: Job) -> None:
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix=f"{job.id}-{job.attempts}-", dir=self.work_root))
        print(f"job {job.id} (attempt {job.attempts}) in {work}", flush=True)
        try:
            sub = work / "submission"
            sub.mkdir(mode=0o700)
            for name, data in self.store.files(job.id).items():
                (sub / name).write_bytes(data)   # a name of the registry's (upload.py), never the client's
            rc, held = self._run(job, work)
            if not held:
                print(f"job {job.id}: the lease was lost; this attempt's grade is dropped", flush=True)
                return
            reports = work / "reports"
            timeout = self.settings["timeout_s"]
            if rc is not None and rc < 0:
                why = f"the grade process was {describe_status(rc)}"
                keep_failed(work, self.dir, job)
                retried = self.store.retry(self.owner, job.id, why)
                print(f"job {job.id}: {why}; {'queued again' if retried else 'the lease was lost'}", flush=True)
                return
            if rc is None:
                reason = f"grading took longer than {timeout:g} s; it was stopped"
            elif rc != 0:
                reason = f"the grader exited with code {rc}: {_last_line(_tail(work / 'grade.log'))}"
            else:
                reason = _check_reports(reports)
            if reason:
                keep_failed(work, self.dir, job)
                report_json, report_md = error_report(self.rubric, reason)
            else:
                report_json = (reports / "report.json").read_bytes()[:REPORT_JSON_BYTES].decode("utf-8", "replace")
                report_md = (reports / "report.md").read_bytes()[:REPORT_JSON_BYTES].decode("utf-8", "replace")
            report_json, report_md, reached = stamp(report_json, report_md, job)
            stored = self.store.finish(self.owner, job.id, report_json, report_md, error=reason or None,
                                       device=self.settings["device"], reached_kernels=reached and not reason)
            print(f"job {job.id}: {'graded' if stored else 'lease lost, report dropped'} in "
                  f"{time.monotonic() - started:.0f} s{': ' + reason if reason else ''}", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _run(self, job: Job, work: Path) -> tuple[int | None, bool]:
        """(the grade's exit status or None on timeout, whether the lease is still held)."""
        cmd, timeout = grade_command(self.settings), float(self.settings["timeout_s"])
        renew_every = self.lease_s / 3
        if self.settings.get("executor"):
            return self._run_remote(job, work, cmd, timeout, renew_every)
        with open(work / "grade.log", "wb") as log:
            p = proc.start(cmd, env=grade_env(), cwd=work, stdin=subprocess.DEVNULL, stdout=log,
                           stderr=subprocess.STDOUT, deadline_s=timeout)
        try:
            renewed = time.monotonic()
            while (rc := p.wait(WAIT_STEP_S)) is None:
                if time.monotonic() - renewed >= renew_every:
                    if not self.store.renew(self.owner, job.id, self.lease_s):
                        return None, False
                    renewed = time.monotonic()
            return (None if p.timed_out else rc), self.store.renew(self.owner, job.id, self.lease_s)
        finally:
            p.kill()

    def _run_remote(self, job: Job, work: Path, cmd, timeout: float, renew_every: float):
        from ..cluster import _executor
        s = self.settings
        folder = self.dir / "cluster"
        ex = _executor(s["executor"], folder, s.get("slurm_partition"), int(s.get("gpus_per_task", 1)), 1,
                       int(timeout // 60) + 10, 1, s.get("slurm_options") or {})
        remote = ex.submit(grade_remote, cmd, str(work), timeout)
        self.store.set_remote(self.owner, job.id, f"{s['executor']}:{remote.job_id}")
        renewed = time.monotonic()
        try:
            while not remote.done():
                time.sleep(WAIT_STEP_S)
                if time.monotonic() - renewed >= renew_every:
                    if not self.store.renew(self.owner, job.id, self.lease_s):
                        remote.cancel(check=False)
                        return None, False
                    renewed = time.monotonic()
            try:
                rc = remote.result()
            except Exception as e:  # noqa: BLE001 - the cluster job failed: the grade's error
                (work / "grade.log").write_text(f"cluster job {remote.job_id} failed: {type(e).__name__}: {e}\n")
                rc = 1
            return rc, self.store.renew(self.owner, job.id, self.lease_s)
        except BaseException:
            remote.cancel(check=False)
            raise


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        print("usage: python -m classroom.runner.worker DIR SLOT OWNER (started by python -m classroom serve)",
              file=sys.stderr)
        return 2
    Worker(Path(argv[0]), argv[1], argv[2]).run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
