"""A class too big for one machine: its students sharded over a job array
through submitit (https://github.com/facebookincubator/submitit).

    python -m classroom batch SUBS --out OUT --executor slurm --slurm-partition gpu --gpus-per-task 1
    make batch EXECUTOR=slurm SLURM_PARTITION=gpu GPUS_PER_TASK=1

The submitting process (a login node) reads the submissions (loose files are
staged in OUT/staged), decides who to grade as a local batch does, and
splits them into shards, one array task each. A shard grades its students
as a local batch does, with the same grade command and the same atomic
install into OUT/students/<id>/: one at a time on its GPU, or one per GPU
when the task has several. When every shard has ended, the submitting
process writes class.csv, summary.md and the rest as a local batch does,
so a cluster run and a single-machine run give the same files.
``--executor local`` runs the shards as local processes (submitit's local
executor): the same path, used by the tests.

OUT, the project and its Python (.venv) must be on a file system that every
node sees; the jobs run the submitting process's Python in the same folder.

Resume works across executors: a student is finished once their report
folder is installed, whoever graded them, and a later run (local or
cluster) grades only the others. OUT/cluster/jobs.json records the shards in
flight, so a run that finds shards of an earlier run still alive (its
submitting process was killed) waits for them instead of grading their
students a second time. A shard that died (a node failure, the time limit,
scancel) left its unfinished students: they are graded again by a second
wave of shards, and, if that dies too, by the next run.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from grader.report import one_line

from . import batch
from .cluster_jobs import JOBS_FILE, record, shards_in_flight  # noqa: F401 - JOBS_FILE: API
from .gpus import visible_gpus
from .grade_process import ROOT, STOP_SIGNALS, _stop
from .slots import cpu_slots, gpu_slots

EXECUTORS = ("local", "slurm")
STUDENTS_PER_SHARD = 10     # default shard size
POLL_S = 2.0


@dataclass
class Shard:
    """What one array task grades, and how (everything it needs travels pickled)."""
    students: Path
    entries: list
    rubric: object
    timeout_s: float
    seed: int | None
    gpus_per_task: int
    jobs: int
    since_ns: int           # a student installed after this (by an earlier try of this shard) is done
    command: object = None  # makes the grade command (batch.grade_command)


def grade_shard(shard: Shard) -> dict:
    """Run in the array task: grade the shard's students not yet graded by this run."""
    todo = [e for e in shard.entries if not batch._is_finished(shard.students, e.sid, shard.since_ns)]
    if shard.gpus_per_task > 1 and os.environ.get("CUDA_VISIBLE_DEVICES"):
        slots = gpu_slots(visible_gpus("all"))
    else:
        slots = cpu_slots(shard.jobs) if shard.jobs > 1 else []
    batch.grade_entries(todo, shard.students, shard.rubric, shard.timeout_s, slots, shard.seed, shard.command)
    return {"graded": [e.sid for e in todo], "host": os.uname().nodename}


def split(todo: list, shards: int) -> list[list]:
    """``todo`` in ``shards`` contiguous parts of nearly equal size (none empty)."""
    n = max(1, min(shards, len(todo)))
    size, extra = divmod(len(todo), n)
    parts, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        parts.append(todo[start:end])
        start = end
    return [p for p in parts if p]


def _executor(kind: str, folder: Path, partition: str | None, gpus_per_task: int, jobs: int, timeout_min: int,
              parallel: int, options: dict):
    import submitit
    ex = submitit.AutoExecutor(folder=folder, cluster=kind)
    setup = [f"cd {ROOT}", f"export PYTHONPATH={ROOT}${{PYTHONPATH:+:$PYTHONPATH}}"]
    params = dict(name="grade-class", timeout_min=timeout_min, gpus_per_node=gpus_per_task,
                  cpus_per_task=4 * gpus_per_task if gpus_per_task else 2 * jobs, nodes=1, tasks_per_node=1,
                  local_setup=setup, slurm_setup=setup, slurm_array_parallelism=parallel)
    if partition:
        params["slurm_partition"] = partition
    if options:
        params["slurm_additional_parameters"] = options
    ex.update_parameters(**params)
    return ex


# ----------------------------------------------------------------------------- the run

def run_cluster(plan: batch.Plan, rubric, executor: str = "slurm", partition: str | None = None,
                gpus_per_task: int = 1, shards: int | None = None, jobs: int = 1, seed: int | None = None,
                options: dict | None = None) -> int:
    """Grade ``plan.todo`` on a job array, wait for it, write the class files; the exit status."""
    folder = plan.out / "cluster"
    started_ns = time.time_ns()
    earlier = plan.busy    # alive shards of an earlier run: waited for; their students are not in plan.todo
    busy = {sid for r in earlier for sid in r["students"]}
    if earlier:
        print("this run waits for them before it writes the class files (and grades again what they leave)")
    entries = {e.sid: e for e in plan.entries}
    todo = plan.todo
    command = batch.grade_command   # looked up now: what this batch runs, pickled into each shard
    live: list[tuple[object, dict]] = []
    stopped_by = None
    handlers = {s: signal.signal(s, _stop) for s in STOP_SIGNALS
                if signal.getsignal(s) not in (signal.SIG_IGN, None)}
    try:
        for wave in (1, 2):
            pool = todo if wave == 1 else todo + [entries[sid] for sid in sorted(busy) if sid in entries]
            waiting = [e for e in pool
                       if not batch._is_finished(plan.students, e.sid, None if e.sid in busy else started_ns)]
            if wave == 2:
                if not waiting:
                    break
                print(f"{len(waiting)} student(s) of shards that died are graded again")
            parts = split(waiting, shards or math.ceil(len(waiting) / STUDENTS_PER_SHARD)) if waiting else []
            if parts:
                per_shard = max(len(p) for p in parts)
                timeout_min = math.ceil(per_shard * plan.timeout_s / 60 / max(1, jobs)) + 10
                ex = _executor(executor, folder, partition, gpus_per_task, jobs, timeout_min, len(parts),
                               options or {})
                specs = [batch_shard(plan, p, rubric, seed, gpus_per_task, jobs, started_ns, command) for p in parts]
                submitted = ex.map_array(grade_shard, specs)
                live = [(job, {"job_id": str(job.job_id), "executor": executor,
                               "students": [e.sid for e in part]}) for job, part in zip(submitted, parts)]
                record(folder, [*earlier, *(rec for _, rec in live)])
                print(f"submitted {len(parts)} shard(s) of up to {per_shard} student(s) ({executor}; jobs "
                      f"{', '.join(rec['job_id'] for _, rec in live)}); logs in {folder}")
            _wait(live, earlier, folder, plan, [e.sid for e in todo], started_ns)
            for job, rec in live:
                problem = _failure(job)
                if problem:
                    print(f"shard {rec['job_id']} ({len(rec['students'])} students) ended without finishing: "
                          f"{problem}")
            earlier, live = [], []
            record(folder, [])
    except KeyboardInterrupt as e:
        stopped_by = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
        for job, _ in live:
            job.cancel(check=False)
        print("\ninterrupted: the shards of this run were cancelled; finished students are kept; run the same "
              "command again to resume")
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    if plan.pending and stopped_by is None and all(batch._is_finished(plan.students, e.sid) for e in plan.todo):
        (plan.out / batch.FORCE_MARKER).unlink(missing_ok=True)
    return batch.finish_batch(plan, stopped_by)


def batch_shard(plan, part, rubric, seed, gpus_per_task, jobs, since_ns, command) -> Shard:
    return Shard(plan.students, part, rubric, plan.timeout_s, seed, gpus_per_task, jobs, since_ns, command)


def _failure(job) -> str:
    """Why a job did not end with a result ('' if it did)."""
    try:
        job.result()
    except Exception as e:  # noqa: BLE001 - submitit's FailedJobError, UncompletedJobError, ...
        return one_line(f"{type(e).__name__}: {e}", 300)
    return ""


def _wait(live, earlier, folder: Path, plan: batch.Plan, sids: list[str], since_ns: int) -> None:
    """Until every live job is done and no earlier shard is alive; one progress line as students finish."""
    installed = -1
    while True:
        running = [job for job, _ in live if not job.done()]
        alive = shards_in_flight(folder, earlier)
        done = sum(1 for sid in sids if batch._is_finished(plan.students, sid, since_ns))
        if done != installed:
            installed = done
            print(f"  {done} of {len(sids)} graded; {len(running) + len(alive)} shard(s) running", flush=True)
        if not running and not alive:
            return
        time.sleep(POLL_S)


def parse_options(values) -> dict:
    """--slurm-option KEY=VALUE ... as sbatch options for submitit."""
    out = {}
    for v in values or ():
        key, sep, value = v.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--slurm-option {v!r}: expected KEY=VALUE (an sbatch option without its dashes)")
        out[key.strip().replace("-", "_")] = value.strip()
    return out


def check_executor(kind: str) -> str | None:
    """Why ``kind`` cannot run here (submitit missing, no Slurm), or None."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "--executor needs submitit: pip install -r requirements.txt"
    if kind == "slurm" and not any(os.access(os.path.join(d, "sbatch"), os.X_OK)
                                   for d in os.environ.get("PATH", "").split(os.pathsep) if d):
        return "--executor slurm: no sbatch on PATH (run it on the cluster's login node)"
    if sys.platform != "linux":
        return "--executor needs Linux"
    return None
