"""The built Gradescope zip, run as Gradescope runs it: run_autograder in an /autograder layout.

Every results.json must validate against Gradescope's fields
(tests/fixtures/gradescope_results.schema.json), whatever the submission does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from grader.rubric import load_rubric
from tests.helpers import validate_gradescope
from tools.gradescope_zip import build

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ("w8a8.py", "w4a16.py", "dds.py")
HANG = "def w8a8_mm(x, qweight_t, input_scale, weight_scale):\n    n = 0\n    while True:\n        n += 1\n"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("gs") / "autograder.zip")


def _autograder(tmp_path: Path, bundle: Path, files: dict[str, bytes], budget_s: float | None = None) -> Path:
    root = tmp_path / "autograder"
    source = root / "source"
    with zipfile.ZipFile(bundle) as zf:
        zf.extractall(source)
    (source / "run_autograder").chmod(0o755)
    if budget_s is not None:
        rubric = source / "grader" / "rubric.toml"
        rubric.write_text(re.sub(r"^gradescope_budget_s = .*$", f"gradescope_budget_s = {budget_s:g}",
                                 rubric.read_text(), flags=re.M))
    sub = root / "submission"
    sub.mkdir(parents=True)
    for name, data in files.items():
        (sub / name).write_bytes(data)
    return root


def _run(root: Path, prefix: tuple = (), timeout: float = 600) -> tuple[dict, float]:
    env = {**os.environ, "AUTOGRADER_ROOT": str(root),
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env.pop("TRITON_INTERPRET", None)
    t0 = time.monotonic()
    proc = subprocess.run([*prefix, "bash", str(root / "source" / "run_autograder")], env=env,
                          capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads((root / "results" / "results.json").read_text())
    validate_gradescope(results)
    return results, wall


def _files(folder: Path, **override: str) -> dict[str, bytes]:
    files = {name: (folder / name).read_bytes() for name in KERNELS}
    files.update({k + ".py": v.encode() for k, v in override.items()})
    return files


def test_reference_gets_every_correctness_point(tmp_path, bundle):
    results, _ = _run(_autograder(tmp_path, bundle, _files(ROOT / "solutions")))
    rubric = load_rubric()
    assert results["score"] == sum(t.points for t in rubric.tests if t.kind == "correctness" and not t.bonus)
    assert "graded separately on a GPU" in results["output"] and "Seed " in results["output"]
    assert not any("perf" in t["name"] for t in results["tests"])      # rubric default: omit
    assert all(t.get("status") == "passed" for t in results["tests"] if t["max_score"])
    # The speed estimate: one informational entry per task, no points, never a failure.
    estimates = [t for t in results["tests"] if not t["max_score"]]
    assert len(estimates) == 3 and all("speed predicted" in t["name"] and "status" not in t for t in estimates)


def test_stubs_get_zero_with_a_reason(tmp_path, bundle):
    results, _ = _run(_autograder(tmp_path, bundle, _files(ROOT / "assignment")))
    assert results["score"] == 0 and results["tests"]
    assert all("NotImplementedError" in t["output"] for t in results["tests"]), results["tests"][0]


def test_a_hanging_kernel_finishes_within_the_budget(tmp_path, bundle):
    budget = 60
    results, wall = _run(_autograder(tmp_path, bundle, _files(ROOT / "solutions", w8a8=HANG), budget_s=budget))
    assert wall < budget + 30, f"took {wall:.0f} s for a budget of {budget} s"
    by_task = {}
    for t in results["tests"]:
        by_task.setdefault(t["name"].split("/")[0], []).append(t)
    assert all(t["score"] == 0 and "time limit" in t["output"] for t in by_task["w8a8"]), by_task["w8a8"][0]
    assert sum(t["score"] for t in by_task["dds"]) > 0      # the other tasks keep their points


@pytest.mark.skipif(not shutil.which("prlimit"), reason="needs util-linux prlimit")
def test_a_memory_limited_run_still_leaves_a_results_json(tmp_path, bundle):
    # 256 MiB of address space: the wrapper (it imports no torch) runs, the grade cannot start.
    results, _ = _run(_autograder(tmp_path, bundle, _files(ROOT / "solutions")),
                      prefix=("prlimit", f"--as={256 << 20}", "--"))
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"].startswith("The autograder could not finish: the grader exited with code"), \
        results["output"]
    assert "Seed " in results["output"] and results["extra_data"]["grader_error"]
