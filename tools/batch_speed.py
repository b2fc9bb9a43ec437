"""How much faster a class is graded with JOBS=N: python -m tools.batch_speed OUT [--students 10] [--jobs 2]
[--repeats 2].

Builds a Canvas "Download Submissions" folder of STUDENTS students from the
project's own kernels (the reference, the tutorial-style kernels, kernels
written from the handout, faithful and buggy variants, the stubs, a student
with one file, a re-upload), then grades it serially and with ``--jobs N``,
back to back, REPEATS times (serial first each time), each into a fresh
output folder with the same --seed. Prints and writes OUT/batch-speed.json:
each run's wall time, the 1-minute load average before and after it, the
machine's cores, and whether the class.csv of every run is the same, student
by student (the columns that say when aside).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
V = ROOT / "tests" / "variants"
STUDENTS = [  # (canvas name, user id, {kernel file: source file})
    ("referenceann", {f: ROOT / "solutions" / f for f in ("w8a8.py", "w4a16.py", "dds.py")}),
    ("tutorialtom", {f: ROOT / "calibration" / "naive" / f for f in ("w8a8.py", "w4a16.py", "dds.py")}),
    ("handoutharriet", {f: ROOT / "tests" / "fixtures" / "from_the_handout" / f
                        for f in ("w8a8.py", "w4a16.py", "dds.py")}),
    ("stubsam", {f: ROOT / "assignment" / f for f in ("w8a8.py", "w4a16.py", "dds.py")}),
    ("buggybea", {"w8a8.py": V / "w8a8_bug_no_clamp.py", "w4a16.py": V / "w4a16_bug_nibble_order.py",
                  "dds.py": V / "dds_bug_transposed_block.py"}),
    ("faithfulfred", {"w8a8.py": V / "w8a8_faithful_reciprocal.py", "w4a16.py": V / "w4a16_faithful_split_k.py",
                      "dds.py": V / "dds_faithful_two_blocks.py"}),
    ("onefileoscar", {"w8a8.py": ROOT / "solutions" / "w8a8.py"}),
    ("mixedmia", {"w8a8.py": ROOT / "solutions" / "w8a8.py", "w4a16.py": ROOT / "calibration" / "naive" / "w4a16.py",
                  "dds.py": ROOT / "assignment" / "dds.py"}),
    ("reuploadrita", {"w8a8-1.py": ROOT / "solutions" / "w8a8.py", "w4a16.py": V / "w4a16_bug_scale_group.py",
                      "dds.py": ROOT / "solutions" / "dds.py"}),
    ("variantvic", {"w8a8.py": V / "w8a8_faithful_div_rn.py", "w4a16.py": V / "w4a16_faithful_fp32_dequant.py",
                    "dds.py": V / "dds_bug_grid_misses_rows.py"}),
]


def canvas_download(folder: Path, n: int) -> Path:
    """A Canvas download of ``n`` students (the list above, repeated with new ids past its end)."""
    folder.mkdir(parents=True)
    for i in range(n):
        name, files = STUDENTS[i % len(STUDENTS)]
        user = 4000 + i
        for j, (dest, src) in enumerate(sorted(files.items())):
            shutil.copyfile(src, folder / f"{name}{i // len(STUDENTS) or ''}_{user}_{90000 + 10 * i + j}_{dest}")
    return folder


def _rows(path: Path) -> dict:
    with open(path, encoding="utf-8", newline="") as f:
        return {r["id"]: {k: v for k, v in r.items() if k != "graded_at"} for r in csv.DictReader(f)}


def run(folder: Path, out: Path, jobs: int, seed: int) -> dict:
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "classroom", "batch", str(folder), "--out", str(out), "--jobs",
                           str(jobs), "--seed", str(seed)], cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    return {"jobs": jobs, "wall_s": round(time.monotonic() - t0, 1), "exit": proc.returncode,
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.batch_speed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--students", type=int, default=10)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    out = Path(args.out)
    folder = canvas_download(out / "canvas", args.students)
    runs, first = [], None
    for r in range(args.repeats):
        for jobs in (1, args.jobs):
            dest = out / f"run{r}-jobs{jobs}"
            result = run(folder, dest, jobs, args.seed)
            rows = _rows(dest / "class.csv")
            first = first or rows
            result["same_as_first"] = rows == first
            runs.append(result)
            print(json.dumps(result), flush=True)
    serial = [x["wall_s"] for x in runs if x["jobs"] == 1]
    parallel = [x["wall_s"] for x in runs if x["jobs"] == args.jobs]
    summary = {"students": args.students, "cores": len(os.sched_getaffinity(0)), "runs": runs,
               "speedup_each_pair": [round(s / p, 2) for s, p in zip(serial, parallel)]}
    (out / "batch-speed.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
