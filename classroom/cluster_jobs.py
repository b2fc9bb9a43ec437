"""The shards of a cluster run in flight, recorded in OUT/cluster/jobs.json,
so that no later run, on any executor, grades their students a second time
while they are alive (cluster.py)."""

from __future__ import annotations

import json
from pathlib import Path

from .lms.csvio import write_atomic

JOBS_FILE = "jobs.json"
ACTIVE_SLURM = {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "RESIZING", "SUSPENDED",
                "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED"}


def record(folder: Path, records: list[dict]) -> None:
    """Write the shards in flight: {"job_id", "executor", "students"} each."""
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / JOBS_FILE, json.dumps(records, indent=1) + "\n")


def recorded(folder: Path) -> list[dict]:
    try:
        data = json.loads((folder / JOBS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, list):
        return []
    return [r for r in data if isinstance(r, dict) and isinstance(r.get("job_id"), str)
            and isinstance(r.get("students"), list) and all(isinstance(s, str) for s in r["students"])]


def alive(rec: dict, folder: Path) -> bool:
    """Whether a recorded shard may still be grading: a local shard's controller
    process exists; a Slurm job is in an active state, or its state is unknown."""
    if rec.get("executor") == "local":
        try:
            pid = int(rec["job_id"])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError, IndexError):
            return False
        return b"submitit.local._local" in cmdline and state != "Z"
    try:
        import submitit
    except ImportError:
        return True   # cannot ask Slurm: assume it still runs
    state = (submitit.SlurmJob(folder, rec["job_id"]).state or "UNKNOWN").split()[0].upper()
    return state in ACTIVE_SLURM or state == "UNKNOWN"


def shards_in_flight(folder: Path, records: list[dict] | None = None) -> list[dict]:
    """The recorded shards (or ``records``) that are still alive."""
    return [r for r in (recorded(folder) if records is None else records) if alive(r, folder)]
