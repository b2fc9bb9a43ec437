"""The course GPU runner's acceptance run, on one GPU: python -m tools.runner_gpu_check [OUT].

One command does the whole scenario (OUT defaults to $OUT, else runner-gpu-check/):

1. starts the runner (``python -m classroom serve``) with one worker on GPU 0
   and a quota of ``QUOTA`` runs, and submits three students' files at once
   with three tokens, as ``make submit`` does: the reference
   (``solutions/``), the tutorial-style kernels (``calibration/naive/``) and
   a buggy DDS kernel (tests/variants/, with the stubs for the other two
   tasks);
2. kills the first grade that runs with SIGKILL (its process, by its id);
3. restarts the server (SIGTERM, then a new start on the same DATA) while a
   later grade runs;
4. waits for the three reports, then checks the runner's books: every
   student has exactly one graded run per upload; the killed job spent one
   attempt and was graded again, the restart spent none; each student's
   quota counts one run; ``classroom runner jobs`` and ``export`` show the
   scores of the reports;
5. grades the same files with ``python -m grader grade --tests visible`` on
   the same GPU with the seed each report names. Each test must agree:
   correctness tests in status and points; performance tests in status,
   kernel times within ``NOISE`` of each other and points within what that
   time difference explains (plus one points step).

About 10 minutes on an H100 (``--short``: three tests a task, about 5). Writes OUT/runner-gpu.json (the ``runner`` entry
of that day's results file: the scenario's events and checks, each
submission's runner and local score, wall time and every test side by side),
OUT/runner/<name>/ and OUT/local/<name>/ (the reports), OUT/server.log, the
workers' logs in OUT/data/logs/ and the killed grade's folder in
OUT/data/failed/. Exit 0 when every check passes and every test agrees, 1
when one does not, 2 when the runner could not be run.

``--device cpu --rubric R`` runs the same scenario and checks in Triton's
interpreter (the check of this script itself, on a machine without a GPU; a
small rubric keeps it short).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import submit as client  # noqa: E402

NOISE = 0.15          # kernel times of the two grades may differ by this fraction of the smaller one
POINTS_STEP = 0.25    # the rubric's points_step: rounding may move a score by one step
BUGGY = "dds_bug_transposed_block"
KERNELS = ("w8a8.py", "w4a16.py", "dds.py")
QUOTA = 2             # runs per student: each must have used exactly one at the end
POLL_S = 0.5


SHORT = ("w8a8/decode_m1", "w8a8/ragged_m33", "w8a8/perf_m16", "w4a16/decode_m1", "w4a16/group32", "w4a16/perf_m1",
         "dds/density25", "dds/density5_m1", "dds/perf_m4096_d50")


def short_rubric(source: Path | None, to: Path) -> Path:
    """The rubric with only the ``SHORT`` tests (its settings and tasks as they are), written to ``to``."""
    import re

    from grader.rubric import DEFAULT_RUBRIC, load_rubric

    head, *blocks = re.split(r"(?m)^\[\[tests\]\]\n", Path(source or DEFAULT_RUBRIC).read_text())
    kept = ["[[tests]]\n" + b for b in blocks if re.search(r'(?m)^name = "([^"]+)"', b).group(1) in SHORT]
    to.write_text(head + "".join(kept))
    assert {t.name for t in load_rubric(to).tests} == set(SHORT), "the rubric lacks a test of SHORT"
    return to


def submissions(out: Path) -> dict[str, Path]:
    subs = {"reference": ROOT / "solutions", "naive": ROOT / "calibration" / "naive"}
    made = {}
    for name, src in subs.items():
        made[name] = out / "submissions" / name
        made[name].mkdir(parents=True, exist_ok=True)
        for k in KERNELS:
            shutil.copyfile(src / k, made[name] / k)
    buggy = made["buggy"] = out / "submissions" / "buggy"
    buggy.mkdir(parents=True, exist_ok=True)
    for k in ("w8a8.py", "w4a16.py"):
        shutil.copyfile(ROOT / "assignment" / k, buggy / k)      # stubs: fast, 0 points
    shutil.copyfile(ROOT / "tests" / "variants" / f"{BUGGY}.py", buggy / "dds.py")
    return made


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(out: Path, names, device: str, rubric: str | None) -> tuple[subprocess.Popen, str, dict]:
    (out / "roster.csv").write_text("id\n" + "".join(f"{n}\n" for n in names))
    port = _port()
    cmd = [sys.executable, "-m", "classroom", "serve", "--roster", str(out / "roster.csv"), "--data",
           str(out / "data"), "--port", str(port), "--device", device, "--quota", str(QUOTA)]
    cmd += ["--gpus", "0"] if device == "cuda" else ["--workers", "1"]
    cmd += ["--rubric", rubric] if rubric else []
    log = open(out / "server.log", "ab")
    server = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if server.poll() is not None:
            raise RuntimeError(f"the runner exited ({server.returncode}): see {out / 'server.log'}")
        try:
            client.request(url, "/api/status", "-")
            break
        except (ConnectionError, client.Refused):
            time.sleep(0.2)
    else:
        raise RuntimeError("the runner did not answer in 120 s")
    tokens = dict(line.split(",", 1) for line in (out / "data" / "tokens.csv").read_text().splitlines()[1:])
    return server, url, tokens


def stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _state(url: str, token: str, job: str) -> dict:
    return client.request(url, f"/api/submissions/{job}", token)


def _first_running_grade(data: Path, jobs: dict[str, str], deadline: float,
                         not_job: str | None = None) -> tuple[str, int]:
    """(student, the pid of the grade process) of the first job but ``not_job`` seen grading."""
    from classroom.runner.worker import grade_pids
    while time.time() < deadline:
        for name, job in jobs.items():
            pids = grade_pids(data, job) if job != not_job else []
            if pids:
                return name, pids[0]
        time.sleep(0.1)
    raise RuntimeError("no grade ran in time")


def scenario(out: Path, subs: dict, device: str, rubric: str | None, wait_s: float) -> tuple[dict, dict, dict]:
    """Steps 1 to 4: (the reports by student, the jobs by student, the scenario's record)."""
    server, url, tokens = start_server(out, list(subs), device, rubric)
    data = out / "data"
    events, runner = [], {}
    try:
        jobs = {}
        for name, path in subs.items():   # three students at once
            files = {k: (path / k).read_bytes() for k in KERNELS}
            jobs[name] = client.request(url, "/api/submissions", tokens[name], client.pack(files))["job"]
            print(f"{name}: job {jobs[name]} queued", flush=True)
        deadline = time.time() + wait_s
        killed, pid = _first_running_grade(data, jobs, deadline)
        time.sleep(1.0)    # the grade well started: its sandbox and workers up
        os.kill(pid, signal.SIGKILL)
        events.append({"event": "SIGKILL to a grade process", "student": killed, "job": jobs[killed], "pid": pid})
        print(f"{killed}: its grade (pid {pid}) killed with SIGKILL", flush=True)
        while not _state(url, tokens[killed], jobs[killed])["retries"]:   # the runner saw it die
            time.sleep(POLL_S)
        restarted, _ = _first_running_grade(data, jobs, deadline, not_job=jobs[killed])
        time.sleep(2.0)
        stop(server)
        events.append({"event": "server restart (SIGTERM) during a grade", "student": restarted,
                        "job": jobs[restarted]})
        print(f"{restarted}: server restarted during its grade", flush=True)
        server, url, tokens = start_server(out, list(subs), device, rubric)
        while len(runner) < len(jobs) and time.time() < deadline:
            for name, job in jobs.items():
                if name not in runner:
                    state = _state(url, tokens[name], job)
                    if state["state"] == "done":
                        runner[name] = state
                        (out / "runner" / name).mkdir(parents=True, exist_ok=True)
                        (out / "runner" / name / "report.json").write_text(json.dumps(state["report"], indent=2))
                        (out / "runner" / name / "report.md").write_text(state["report_md"])
                        print(f"{name}: runner report {state['report']['score']}/{state['report']['max_score']} "
                              f"({state['report'].get('seconds')} s)", flush=True)
            time.sleep(2)
        mine = {name: client.request(url, "/api/submissions", tokens[name]) for name in subs}
    finally:
        stop(server)
    if len(runner) < len(subs):
        raise RuntimeError(f"only {sorted(runner)} graded by the runner within {wait_s:g} s; see "
                           f"{out / 'server.log'}")
    checks = books(out, subs, jobs, runner, mine, killed, restarted)
    return runner, jobs, {"events": events, "checks": checks}


def books(out: Path, subs, jobs: dict, runner: dict, mine: dict, killed: str, restarted: str) -> dict:
    """Step 4: the runner's books after the scenario, each check True or False."""
    data = out / "data"
    checks = {}
    for name in subs:
        state, runs = runner[name], mine[name]["runs"]
        report = state["report"]
        kills = [r for r in state["retries"] if "killed by signal 9" in r["why"]]
        restarts = [r for r in state["retries"] if r["why"].startswith("the runner was restarted")]
        expected = 2 if name == killed else 1      # the kill spent an attempt; a clean restart none
        checks[f"{name}: one run, graded"] = [r["job"] for r in runs] == [jobs[name]] and \
            runs[0]["state"] == "done" and not runs[0]["error"] and "grader_error" not in report
        checks[f"{name}: attempts {expected}"] = state["attempts"] == expected
        checks[f"{name}: retries say what happened"] = (len(kills) == (name == killed)) and \
            (len(restarts) >= (name == restarted)) and len(state["retries"]) == len(kills) + len(restarts)
        checks[f"{name}: quota counts one run"] = mine[name]["quota"]["used"] == 1 and \
            mine[name]["quota"]["left"] == QUOTA - 1
        checks[f"{name}: the report names its job"] = report.get("runner", {}).get("job") == jobs[name]
    checks["the killed grade's folder kept"] = (data / "failed" / jobs[killed] / "1" / "grade.log").is_file()
    ta = subprocess.run([sys.executable, "-m", "classroom", "runner", "--data", str(data), "jobs"], cwd=ROOT,
                        capture_output=True, text=True)
    (out / "ta-jobs.txt").write_text(ta.stdout + ta.stderr)
    lines = {line.split()[0]: line for line in ta.stdout.splitlines() if line.split()}
    exported = out / "export" / "class.csv"
    exported.parent.mkdir(exist_ok=True)
    ex = subprocess.run([sys.executable, "-m", "classroom", "runner", "--data", str(data), "export", str(exported)],
                        cwd=ROOT, capture_output=True, text=True)
    rows = {r["id"]: r for r in csv.DictReader(io.StringIO(exported.read_text()))} if ex.returncode == 0 else {}
    for name in subs:
        report = runner[name]["report"]
        line = lines.get(jobs[name], "")
        checks[f"{name}: jobs shows the report's score"] = ta.returncode == 0 and \
            f"{report['score']:g}/{report['max_score']:g}" in line and name in line
        row = rows.get(name, {})
        checks[f"{name}: export holds the report's score"] = bool(row) and row["latest_job"] == jobs[name] and \
            float(row["total"]) == report["score"] and float(row["max"]) == report["max_score"] and row["runs"] == "1"
    for what, ok in checks.items():
        if not ok:
            print(f"  CHECK FAILED: {what}", flush=True)
    return checks


def local_grade(path: Path, out: Path, seed: int, device: str, rubric: str | None) -> dict:
    report_dir = out / "local" / path.name
    cmd = [sys.executable, "-m", "grader", "grade", str(path), "--report-dir", str(report_dir), "--tests",
           "visible", "--device", device, "--seed", str(seed)] + (["--rubric", rubric] if rubric else [])
    env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": "0"} if device == "cuda" else {}))
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    (out / "local" / f"{path.name}.log").write_text(proc.stdout[-20000:] + proc.stderr[-20000:])
    report = json.loads((report_dir / "report.json").read_text())
    report["_wall_s"] = round(time.time() - t0, 1)
    return report


def _ms(test: dict):
    ms = (test.get("details") or {}).get("kernel_ms")
    return ms if isinstance(ms, (int, float)) else None


def compare_test(a: dict, b: dict, thresholds: dict) -> tuple[bool, str]:
    """Whether two grades' verdicts of one test agree within the clock's noise, and why not."""
    if a["status"] != b["status"] and a["kind"] == "correctness":
        return False, f"status {a['status']} vs {b['status']}"
    if a["kind"] == "correctness":
        return (a["score"] == b["score"], "" if a["score"] == b["score"] else f"points {a['score']} vs {b['score']}")
    ma, mb = _ms(a), _ms(b)
    if (ma is None) != (mb is None):
        return False, f"timed in one grade only ({ma} vs {mb} ms)"
    if ma is None:
        return a["status"] == b["status"] and a["score"] == b["score"], f"{a['status']} vs {b['status']}"
    spread = abs(ma - mb) / min(ma, mb)
    full, zero = thresholds.get(a["name"], (None, None))
    ra, rb = (a.get("details") or {}).get("ratio"), (b.get("details") or {}).get("ratio")
    explained = POINTS_STEP
    if full and zero is not None and isinstance(ra, (int, float)) and isinstance(rb, (int, float)) and full > zero:
        explained += a["max_score"] * abs(ra - rb) / (full - zero)
    ok = spread <= NOISE and abs(a["score"] - b["score"]) <= explained + 1e-9
    return ok, "" if ok else (f"kernel {ma:.4f} vs {mb:.4f} ms ({100 * spread:.0f} %), points {a['score']} vs "
                              f"{b['score']} (the time difference explains {explained:.2f})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.runner_gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", default=os.environ.get("OUT") or "runner-gpu-check",
                   help="where everything goes (default: $OUT, else runner-gpu-check/)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--rubric", default=None)
    p.add_argument("--short", action="store_true", help="the course rubric cut to three tests a task (SHORT), "
                                                         "written to OUT/short-rubric.toml: about 5 minutes")
    p.add_argument("--wait-s", type=float, default=900.0, help="how long the runner's grades may take, the "
                                                               "killed and restarted ones included")
    args = p.parse_args(argv)
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    rubric = str(Path(args.rubric).absolute()) if args.rubric else None
    if args.short:
        rubric = str(short_rubric(Path(rubric) if rubric else None, out / "short-rubric.toml"))
    from grader.rubric import DEFAULT_RUBRIC, load_rubric, visible_only
    shown = visible_only(load_rubric(rubric or DEFAULT_RUBRIC))
    thresholds = {t.name: (t.full_ratio, t.zero_ratio) for t in shown.tests if t.kind == "performance"}
    subs = submissions(out)
    started = time.time()
    try:
        states, jobs, done = scenario(out, subs, args.device, rubric, args.wait_s)
    except (RuntimeError, client.Refused, ConnectionError) as e:
        print(f"the runner failed: {e}", file=sys.stderr)
        return 2
    runner = {name: state["report"] for name, state in states.items()}
    record = {"date": dt.date.today().isoformat(), "device": args.device, "noise": NOISE, "scenario": done,
              "submissions": {}}
    agree = all(done["checks"].values())
    # The scenario's books, kept even if the comparison with make grade below is cut short.
    (out / "runner-gpu.json").write_text(json.dumps({**record, "agree": None, "compared": False}, indent=2) + "\n")
    print(f"the runner's books: {'every check passes' if agree else 'SOME CHECKS FAIL'}", flush=True)
    for name, path in subs.items():
        mine = runner[name]
        local = local_grade(path, out, mine["seed"], args.device, rubric)
        print(f"{name}: make grade {local['score']}/{local['max_score']} ({local['_wall_s']} s)", flush=True)
        by_name = {t["name"]: t for t in local["tests"]}
        rows = []
        for t in mine["tests"]:
            other = by_name.get(t["name"])
            ok, why = (False, "not in make grade's report") if other is None else compare_test(t, other, thresholds)
            agree &= ok
            rows.append({"test": t["name"], "kind": t["kind"], "agree": ok, "why": why,
                         "runner": {"status": t["status"], "points": t["score"], "kernel_ms": _ms(t)},
                         "make_grade": None if other is None else {"status": other["status"], "points": other["score"],
                                                                   "kernel_ms": _ms(other)}})
            if not ok:
                print(f"  DIFFERS {t['name']}: {why}")
        agree &= {t["name"] for t in local["tests"]} == {t["name"] for t in mine["tests"]}
        record["submissions"][name] = {
            "runner": {"score": mine["score"], "max_score": mine["max_score"], "seconds": mine.get("seconds"),
                       "gpu": mine.get("gpu"), "seed": mine["seed"], "job": jobs[name],
                       "attempts": states[name]["attempts"], "retries": [r["why"] for r in states[name]["retries"]]},
            "make_grade": {"score": local["score"], "max_score": local["max_score"], "seconds": local.get("seconds"),
                           "gpu": local.get("gpu")},
            "tests": rows}
    record["agree"] = agree
    record["wall_s"] = round(time.time() - started)
    spreads = [abs(r["runner"]["kernel_ms"] - r["make_grade"]["kernel_ms"]) / min(r["runner"]["kernel_ms"],
                                                                                   r["make_grade"]["kernel_ms"])
               for s in record["submissions"].values() for r in s["tests"]
               if r["make_grade"] and r["runner"]["kernel_ms"] and r["make_grade"]["kernel_ms"]]
    record["largest_kernel_time_spread"] = round(max(spreads), 4) if spreads else None
    (out / "runner-gpu.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"\n{'every check passes and every test agrees' if agree else 'SOME CHECKS FAIL OR TESTS DIFFER'}; "
          f"largest kernel-time spread "
          f"{record['largest_kernel_time_spread']}; {out / 'runner-gpu.json'} ({record['wall_s']} s)")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
