"""Grade each idiom variant as a student would: ``python -m grader grade`` on a folder holding
the variant as its task's file and the untouched stubs of the other two, that task only, on
the CPU; one verdict line per variant (score, status, flags, kernels that did not compile).

    .venv/bin/python tests/idioms/grade_corpus.py [NAME ...] [--out DIR] [--summarize]

Slow (about a minute per variant; run one at a time on a shared machine). ``--summarize``
only reads the reports already in DIR (default /tmp/idiom-grades).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IDIOMS = ROOT / "tests" / "idioms"
sys.path.insert(0, str(IDIOMS))

from check_corpus import task_of, variants  # noqa: E402


def grade(name: str, out: Path, device: str = "cpu", rubric: Path | None = None, own_lock: bool = False) -> None:
    """Grade one variant. own_lock: this grade takes a GPU lock of its own (correctness only: no
    timing to disturb, so several variants may share the GPU)."""
    task = task_of(name)
    sub = out / f"sub_{name}"
    shutil.rmtree(sub, ignore_errors=True)
    sub.mkdir(parents=True)
    for stub in ("w8a8.py", "w4a16.py", "dds.py"):
        shutil.copy(ROOT / "assignment" / stub, sub / stub)
    shutil.copy(IDIOMS / f"{name}.py", sub / f"{task}.py")
    started = time.monotonic()
    with open(out / f"log_{name}.txt", "w") as log:
        extra = ["--rubric", str(rubric)] if rubric else []
        env = dict(os.environ)
        if own_lock:
            (out / f"lock_{name}").mkdir(exist_ok=True)
            env["GRADER_GPU_LOCK_DIR"] = str(out / f"lock_{name}")
        subprocess.run([sys.executable, "-m", "grader", "grade", str(sub), "--tasks", task, "--device", device,
                        "--report-dir", str(out / f"rep_{name}"), *extra], cwd=ROOT, stdout=log,
                       stderr=subprocess.STDOUT, env=env)
    print(f"{name}: graded in {time.monotonic() - started:.0f} s", file=sys.stderr)


def verdict(name: str, out: Path) -> str:
    """One line: the task's score, status and flags, kernels that failed to compile, failing tests."""
    path = out / f"rep_{name}" / "report.json"
    if not path.exists():
        return f"{name}: no report ({out / f'log_{name}.txt'})"
    report = json.loads(path.read_text())
    (task,) = [t for t in report["tasks"] if t["task"] == task_of(name)]
    parts = [f"{task['score']:g}/{task['max_score']:g}", task.get("status", "")]
    parts += [f"flag {f['kind']}: {f['detail'][:160]}" for f in task.get("flags", [])]
    parts += [f"kernel {k['kernel']} {k['status']}: {k.get('error', '')[:160]}"
              for k in task.get("kernels", []) if k.get("status") not in ("ok", None, "skipped")]
    failed = {t["message"][:200] for t in report["tests"]
              if t["task"] == task["task"] and t["kind"] == "correctness" and t["status"] != "passed"}
    parts += [f"test: {m}" for m in sorted(failed)[:2]]
    return f"{name}: " + " | ".join(p.replace("\n", " ") for p in parts if p)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--out", type=Path, default=Path("/tmp/idiom-grades"))
    parser.add_argument("--summarize", action="store_true", help="only read the reports in --out")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--correctness-only", action="store_true",
                        help="grade with the rubric's correctness tests only (a GPU check of the verdicts)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="variants graded at once (with --correctness-only on a GPU: each its own GPU lock)")
    a = parser.parse_args(argv)
    names = a.names or variants()
    a.out.mkdir(parents=True, exist_ok=True)
    rubric = None
    if a.correctness_only:
        text = (ROOT / "grader" / "rubric.toml").read_text()
        head, *tests = text.split("[[tests]]")
        rubric = a.out / "rubric-correctness.toml"
        rubric.write_text(head + "".join("[[tests]]" + t for t in tests if 'kind = "performance"' not in t))
    if not a.summarize:
        with ThreadPoolExecutor(max(1, a.jobs)) as pool:
            list(pool.map(lambda n: grade(n, a.out, a.device, rubric, own_lock=a.jobs > 1 and a.correctness_only),
                          names))
    for name in names:
        print(verdict(name, a.out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
