"""Where the time of one grade goes: python -m tools.grade_timeline [SUBMISSION] [--out DIR] [--seed N].

Grades SUBMISSION (default: solutions/) in this process, as ``make grade``
does, with a stopwatch around each phase of the pipeline (the functions of
grader/harness/run.py, grader/harness/measure.py and grader/grade.py are
wrapped, not changed), and prints, per task, the seconds spent in:

  worker start      spawning the sandboxed workers (visible and hidden)
  worker import     waiting for a worker's hello: Python, torch, CUDA, Triton, the kernel file
  case              each correctness case: inputs, the call (the kernel's JIT compile included), the check
  compile check     compiling what the worker launched for sm_90 (CPU runs) or reading it back (GPU)
  timing            each performance test, split into: inputs and batch sizing ("setup"), the
                    worker's "prepare" (its kernel's first compile for that shape and the CUDA
                    graph capture), the timed rounds ("run", and the baseline), the copy of the
                    timed outputs into the arena ("collect") and the check of every output of
                    every round ("check")
  movement          the CPU run's data-movement count
  static check      the allowlist over the kernel files (before the workers)
  estimate          the CPU run's predicted GPU speeds (after the workers)
  judge, score      pytest over the runs, and the points

and writes them to DIR/grade-timeline.json with the score and the total.
Nothing here changes a grade: the same seed gives the same scores as
``make grade SEED=N``.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Stopwatch:
    def __init__(self):
        self.task = "-"
        self.seconds = defaultdict(float)
        self.counts = defaultdict(int)

    def add(self, phase: str, seconds: float, task: str | None = None) -> None:
        key = (task or self.task, phase)
        self.seconds[key] += seconds
        self.counts[key] += 1

    def wrap(self, module, name: str, phase: str, task_arg=None):
        """Replace ``module.name`` by the same function timed as ``phase``."""
        fn = getattr(module, name)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if task_arg is not None:
                self.task = task_arg(args)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(phase, time.perf_counter() - t0)
                if task_arg is not None:
                    self.task = "-"   # the static check, estimate, judge and score: the whole grade's
        setattr(module, name, timed)


def instrument(watch: Stopwatch) -> None:
    from grader import grade as grade_mod
    from grader.harness import measure, run, session

    watch.wrap(run, "_run_task", "task (all of it)", task_arg=lambda a: a[0].task)
    watch.wrap(run, "_check_import", "worker import")
    watch.wrap(run, "_correctness", "case")
    watch.wrap(run, "_compile_check", "compile check")
    watch.wrap(run, "timed_batches", "timing")
    watch.wrap(run, "_movement", "movement")
    watch.wrap(measure, "_batch_size", "timing: setup (batch size)")
    watch.wrap(measure, "_first_wrong", "timing: check")
    watch.wrap(grade_mod, "static_findings", "static check")
    watch.wrap(grade_mod, "add_estimates", "estimate")
    watch.wrap(grade_mod, "judge", "judge")
    watch.wrap(grade_mod, "score", "score")

    init = session.Session.__init__

    def timed_init(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return init(self, *a, **k)
        finally:
            watch.add("worker start", time.perf_counter() - t0)
    session.Session.__init__ = timed_init

    request = session.Session.request

    def timed_request(self, msg, *a, **k):
        t0 = time.perf_counter()
        try:
            return request(self, msg, *a, **k)
        finally:
            op = msg.get("op", "?") if isinstance(msg, dict) else "?"
            if op in ("prepare", "run", "collect"):
                watch.add(f"timing: worker {op}", time.perf_counter() - t0)
    session.Session.request = timed_request


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.grade_timeline", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("submission", nargs="?", default=str(ROOT / "solutions"))
    p.add_argument("--out", default="grade-timeline")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rubric", default=None)
    args = p.parse_args(argv)
    from grader.grade import grade
    from grader.rubric import DEFAULT_RUBRIC, load_rubric

    watch = Stopwatch()
    instrument(watch)
    rubric = load_rubric(args.rubric or DEFAULT_RUBRIC)
    lines = []

    def log(msg):
        lines.append((round(time.perf_counter() - t0, 2), str(msg)))
        print(f"[{lines[-1][0]:7.2f}] {msg}", flush=True)
    t0 = time.perf_counter()
    result = grade(args.submission, rubric, seed=args.seed, log=log)
    total = time.perf_counter() - t0
    rows = sorted(watch.seconds.items(), key=lambda kv: (kv[0][0], -kv[1]))
    print(f"\n{'task':8s} {'phase':32s} {'seconds':>8s} {'count':>6s}")
    for (task, phase), s in rows:
        print(f"{task:8s} {phase:32s} {s:8.2f} {watch.counts[(task, phase)]:6d}")
    print(f"\ntotal {total:.1f} s; score {result.score}/{result.max_score}; device {result.gpu or 'cpu'}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grade-timeline.json").write_text(json.dumps({
        "submission": args.submission, "seed": args.seed, "device": result.gpu or "cpu", "total_s": round(total, 2),
        "score": result.score, "max_score": result.max_score,
        "phases": [{"task": t, "phase": ph, "seconds": round(s, 3), "count": watch.counts[(t, ph)]}
                   for (t, ph), s in rows],
        "log": lines}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
