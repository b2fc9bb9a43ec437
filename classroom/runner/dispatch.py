"""The server's side of the workers: one worker process per slot, kept alive; jobs of a dead one given back.

A slot is a GPU (``CUDA_VISIBLE_DEVICES`` set to it, from ``--gpus``), a CPU
slot (``--device cpu``), or one cluster job at a time (``--executor slurm``).
Each worker is started under the process supervisor (grader/harness/proc.py)
with its output in DIR/logs/worker-<slot>.log. Every ``TICK_S`` the
dispatcher:

- finds each worker that ended (it crashed, or was killed), gives its job back
  to the queue (first in line; a cluster job it had started is cancelled) and
  starts a new worker for the slot, later each time it dies young;
- gives back every job whose lease ran out (a worker that hangs);
- closes a job interrupted ``store.MAX_ATTEMPTS`` times with a grader-error
  report that says what happened each time (the run is given back to the
  student), so that no job is lost and none loops forever.

``stop()`` (the server's shutdown) pauses the queue, gives the running jobs
back without spending an attempt, and kills every worker and its grade: the
next start grades them from the beginning.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.harness import proc

from ..grade_process import ROOT
from .store import Job, Store
from .worker import describe_status, error_report, file_name, read_settings, report_rubric

TICK_S = 0.5
RESTART_S = (1.0, 60.0)   # the wait before restarting a worker that died young: first, most


@dataclass
class Slot:
    name: str
    env: dict
    process: object = None        # proc.Supervised
    owner: str = ""
    started: float = 0.0
    backoff: float = 0.0
    restart_at: float = 0.0
    restarts: int = 0
    log: Path = field(default=None)


def cancel_remote(remote: str | None, folder: Path) -> None:
    """Cancel the cluster job a dead worker had started (``executor:job id``), best effort."""
    if not remote:
        return
    kind, _, job_id = remote.partition(":")
    try:
        if kind == "slurm":
            from submitit.slurm.slurm import SlurmJob
            SlurmJob(folder, job_id).cancel(check=False)
        # local: the job was a child of the worker: its supervisor killed it with the worker
    except Exception as e:  # noqa: BLE001 - the lease is gone either way: its result is never stored
        print(f"runner: could not cancel {remote}: {e}", file=sys.stderr)


class Dispatcher:
    def __init__(self, data_dir: Path, slots: list[tuple[str, dict]]):
        self.dir = Path(data_dir)
        self.slots = [Slot(name, env) for name, env in slots]
        self.rubric = report_rubric(read_settings(self.dir))
        self.logs = self.dir / "logs"
        self.logs.mkdir(mode=0o700, exist_ok=True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------- life cycle

    def start(self) -> None:
        store = Store(self.dir)
        try:
            store.set_paused(False)
            back = store.give_back(expired_before=float("inf"),    # a previous server's running jobs
                                   why="the runner stopped without a clean shutdown while it was being graded")
            for job in back:
                cancel_remote(job.remote, self.dir / "cluster")
            if back:
                print(f"runner: {len(back)} job(s) that were running when the server stopped are queued again")
        finally:
            store.close()
        self._thread = threading.Thread(target=self._loop, name="runner-dispatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        store = Store(self.dir)
        why = "the runner was restarted (a clean stop): graded again from the start; no attempt spent"
        try:
            # The queue paused and the jobs given back first: a worker that sees its grade die under
            # the kill below no longer holds the lease, so nothing is spent and nothing new is taken.
            store.set_paused(True)
            for slot in self.slots:
                store.give_back(owner=slot.owner, why=why, spent=False)
            for slot in self.slots:
                if slot.process is not None:
                    slot.process.kill()
                for job in store.give_back(owner=slot.owner, why=why, spent=False):
                    cancel_remote(job.remote, self.dir / "cluster")
            store.set_paused(False)
        finally:
            store.close()

    def _loop(self) -> None:
        store = Store(self.dir)
        try:
            while not self._stop.is_set():
                try:
                    self.tick(store)
                except Exception as e:  # noqa: BLE001 - a failed round is tried again, never the end of the runner
                    print(f"runner: dispatch error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                self._stop.wait(TICK_S)
        finally:
            store.close()

    # ------------------------------------------------------------------------- one round

    def tick(self, store: Store) -> None:
        now = time.time()
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is not None:
                self._ended(store, slot, now)
            if slot.process is None and now >= slot.restart_at:
                self._start_worker(store, slot)
        for job in store.give_back(expired_before=now, why="its worker stopped answering (its lease ran out)"):
            print(f"runner: job {job.id}: its worker's lease ran out; queued again", flush=True)
            cancel_remote(job.remote, self.dir / "cluster")
        for job in store.exhausted():
            self._close(store, job)

    def _ended(self, store: Store, slot: Slot, now: float) -> None:
        rc = slot.process.returncode
        lived = now - slot.started
        back = store.give_back(owner=slot.owner, why=f"its worker process died ({describe_status(rc)})")
        for job in back:
            cancel_remote(job.remote, self.dir / "cluster")
        print(f"runner: worker {slot.name} ended (status {rc}, after {lived:.0f} s)"
              + (f"; job {', '.join(j.id for j in back)} queued again" if back else ""), flush=True)
        slot.process = None
        slot.backoff = 0.0 if lived > 60 else min(RESTART_S[1], max(RESTART_S[0], 2 * slot.backoff))
        slot.restart_at = now + slot.backoff

    def _start_worker(self, store: Store, slot: Slot) -> None:
        slot.owner = f"{slot.name}/{secrets.token_hex(6)}"
        slot.log = self.logs / f"worker-{file_name(slot.name)}.log"
        cmd = [sys.executable, "-m", "classroom.runner.worker", str(self.dir), slot.name, slot.owner]
        env = dict(os.environ, **slot.env)
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(slot.log, "ab") as log:
            slot.process = proc.start(cmd, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT)
        slot.started = time.time()
        slot.restarts += 1

    def _close(self, store: Store, job: Job) -> None:
        what = "; ".join(dict.fromkeys(r["why"] for r in job.retries if r.get("counted", True))) or "interrupted"
        reason = (f"grading was interrupted {job.attempts} times ({what}); it is not tried again and this run "
                  "does not count against your quota: a TA can requeue it")
        report_json, report_md = error_report(self.rubric, reason)
        if store.close_exhausted(job.id, report_json, report_md, reason):
            print(f"runner: job {job.id}: {reason}", flush=True)
