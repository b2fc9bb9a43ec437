"""The course GPU runner against make grade, on one GPU: python -m tools.runner_gpu_check OUT.

Starts the runner (``python -m classroom serve``) with one worker on GPU 0,
submits three students' files at once with three tokens, as ``make submit``
does: the reference (``solutions/``), the tutorial-style kernels
(``calibration/naive/``) and a buggy DDS kernel (tests/variants/, with the
stubs for the other two tasks); waits for the three reports, stops the
runner, then grades the same files with ``python -m grader grade --tests
visible`` on the same GPU with the seed each report names. Each test must
agree: correctness tests in status and points; performance tests in status,
kernel times within ``NOISE`` of each other and points within what that
time difference explains (plus one points step). About 8 minutes on an H100.

Writes OUT/runner-gpu.json (the ``runner`` entry of that day's results file:
each submission's runner and local score, wall time and every test side by
side), OUT/runner/<name>/ and OUT/local/<name>/ (the reports), OUT/server.log
and the workers' logs in OUT/data/logs/. Exit 0 when every test agrees, 1 when
one does not, 2 when the runner could not be run.

``--device cpu --rubric R`` runs the same check in Triton's interpreter (the
check of this script itself, on a machine without a GPU).
"""

from __future__ import annotations

import argparse
import datetime as dt
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
           str(out / "data"), "--port", str(port), "--device", device, "--quota", "0"]
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
    p.add_argument("out")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--rubric", default=None)
    p.add_argument("--wait-s", type=float, default=480.0, help="how long the three runner grades may take")
    args = p.parse_args(argv)
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    rubric = str(Path(args.rubric).absolute()) if args.rubric else None
    from grader.rubric import DEFAULT_RUBRIC, load_rubric, visible_only
    shown = visible_only(load_rubric(rubric or DEFAULT_RUBRIC))
    thresholds = {t.name: (t.full_ratio, t.zero_ratio) for t in shown.tests if t.kind == "performance"}
    subs = submissions(out)
    started = time.time()
    try:
        server, url, tokens = start_server(out, list(subs), args.device, rubric)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 2
    runner: dict[str, dict] = {}
    try:
        jobs = {}
        for name, path in subs.items():   # three students at once
            files = {k: (path / k).read_bytes() for k in KERNELS}
            jobs[name] = client.request(url, "/api/submissions", tokens[name], client.pack(files))["job"]
            print(f"{name}: job {jobs[name]} queued", flush=True)
        deadline = time.time() + args.wait_s
        while len(runner) < len(jobs) and time.time() < deadline:
            for name, job in jobs.items():
                if name not in runner:
                    state = client.request(url, f"/api/submissions/{job}", tokens[name])
                    if state["state"] == "done":
                        runner[name] = state["report"]
                        (out / "runner" / name).mkdir(parents=True, exist_ok=True)
                        (out / "runner" / name / "report.json").write_text(json.dumps(state["report"], indent=2))
                        (out / "runner" / name / "report.md").write_text(state["report_md"])
                        print(f"{name}: runner report {state['report']['score']}/{state['report']['max_score']} "
                              f"({state['report'].get('seconds')} s)", flush=True)
            time.sleep(2)
    except (client.Refused, ConnectionError) as e:
        print(f"the runner failed: {e}", file=sys.stderr)
        return 2
    finally:
        stop(server)
    if len(runner) < len(subs):
        print(f"only {sorted(runner)} graded by the runner within {args.wait_s:g} s; see {out / 'server.log'}",
              file=sys.stderr)
        return 2
    record = {"date": dt.date.today().isoformat(), "device": args.device, "noise": NOISE, "submissions": {}}
    agree = True
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
                       "gpu": mine.get("gpu"), "seed": mine["seed"]},
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
    print(f"\n{'every test agrees' if agree else 'SOME TESTS DIFFER'}; largest kernel-time spread "
          f"{record['largest_kernel_time_spread']}; {out / 'runner-gpu.json'} ({record['wall_s']} s)")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
