"""The built Gradescope zip, run as Gradescope runs it: run_autograder in a
temporary folder laid out as /autograder (source/ unzipped, submission/, results/),
with correct, buggy, crashing and hanging submissions; and the packaging's own
checks (a rubric that would not grade is never zipped).

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

from grader.gradescope import GRACE_S
from grader.rubric import load_rubric
from tests.fakes import submission
from tests.helpers import scaled, validate_gradescope
from tools.gradescope_zip import build, main

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ("w8a8.py", "w4a16.py", "dds.py")
SOLUTION_DDS = (ROOT / "solutions" / "dds.py").read_text()
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_stubs_get_zero_with_a_reason(tmp_path, bundle):
    results, _ = _run(_autograder(tmp_path, bundle, _files(ROOT / "assignment")))
    assert results["score"] == 0 and results["tests"]
    assert all("NotImplementedError" in t["output"] for t in results["tests"]), results["tests"][0]


def _by_task(results: dict) -> dict:
    by_task = {}
    for t in results["tests"]:
        by_task.setdefault(t["name"].split("/")[0], []).append(t)
    return by_task


@pytest.mark.slow
def test_a_bug_and_a_crash_cost_their_own_tests_only(tmp_path, bundle):
    """W8A8 with a bug (no clamp), DDS raising in every call, W4A16 correct: one run."""
    bug = (ROOT / "tests" / "variants" / "w8a8_bug_no_clamp.py").read_text()
    crash = submission("w8a8_raises").replace("def w8a8_mm(x, qweight_t, input_scale, weight_scale)",
                                              "def dds_mm(x, weight_bsr)")
    results, _ = _run(_autograder(tmp_path, bundle, _files(ROOT / "solutions", w8a8=bug, dds=crash)))
    by_task = _by_task(results)
    lost = [t for t in by_task["w8a8"] if t["score"] < t["max_score"]]
    assert lost and all("likely cause" in t["output"] or "tolerance" in t["output"] for t in lost), lost[0]
    assert all(t["score"] == 0 and "my kernel broke" in t["output"] for t in by_task["dds"]), by_task["dds"][0]
    assert all(t["score"] == t["max_score"] for t in by_task["w4a16"])
    w4a16 = sum(t["score"] for t in by_task["w4a16"])      # 20 + 4 bonus, which makes up lost points
    assert results["score"] == sum(t["score"] for t in by_task["w8a8"]) + w4a16 and w4a16 == 24
    lines = {line.split(":")[0]: line for line in results["output"].splitlines()}
    assert "some tests failed" in lines["w8a8"] and lines["dds"].startswith("dds: 0/20: ")
    assert "ran to completion" not in results["output"]
    assert any(t["name"].endswith("(bonus)") for t in by_task["w4a16"])     # bonus tests say so


@pytest.mark.slow
def test_a_task_whose_grade_process_dies_costs_that_task_only(tmp_path, monkeypatch):
    """The wrapper's own backstop: a task's grade process killed (the memory
    limit) or past its share leaves that task's tests at 0 with the reason; the
    other tasks' reports are merged and scored as one grade."""
    import json

    from grader import gradescope as gs
    from grader.report import write_reports
    from tests.fakes import grade_files

    graded = grade_files(tmp_path, {"dds": SOLUTION_DDS}, ["dds"])   # one real report, reused as a canned one

    def fake_run(cmd, deadline_s):
        task = cmd[cmd.index("--tasks") + 1]
        report_dir = Path(cmd[cmd.index("--report-dir") + 1])
        if task == "w8a8":
            return -9, False                     # killed: no report
        if task == "w4a16":
            return None, True                    # past its share
        write_reports(graded, report_dir)
        return 0, False
    monkeypatch.setattr(gs, "run_with_deadline", fake_run)
    results = gs.run(tmp_path, 300, seed=5)
    validate_gradescope(results)
    by_task = _by_task(results)
    assert all(t["score"] == 0 and "killed (SIGKILL, most likely out of memory)" in t["output"]
               for t in by_task["w8a8"] if "perf" not in t["name"])
    assert all("time limit of this task (100 s on Gradescope) ran out" in t["output"] for t in by_task["w4a16"])
    assert results["score"] == sum(t["score"] for t in by_task["dds"]) > 0
    lost = [t for t in load_rubric().tests if t.task in ("w8a8", "w4a16") and t.kind == "correctness"]
    assert json.dumps(results).count("not graded: ") == len(lost)   # every correctness test of the two lost tasks


@pytest.mark.slow
def test_a_hanging_kernel_costs_its_own_task_budget_only(tmp_path, bundle):
    """Each task has its own share of the budget: the hang uses up w8a8's, and
    the tasks after it still get theirs, however slow the machine. The share is
    what a correct task needs here now (scaled to this machine's load)."""
    share = round(scaled(45))
    budget = 3 * share
    results, wall = _run(_autograder(tmp_path, bundle, _files(ROOT / "solutions", w8a8=HANG), budget_s=budget),
                         timeout=budget + 3 * GRACE_S + scaled(300))
    assert wall < budget + 3 * GRACE_S + scaled(30), f"took {wall:.0f} s for a budget of {budget} s"
    by_task = _by_task(results)
    assert all(t["score"] == 0 and "time limit" in t["output"] for t in by_task["w8a8"]), by_task["w8a8"][0]
    assert sum(t["score"] for t in by_task["dds"]) == 20 and sum(t["score"] for t in by_task["w4a16"]) >= 20


def test_packaging_refuses_a_rubric_that_would_not_grade(tmp_path, capsys):
    """A typo'd key used to be zipped with exit 0 (every submission then scored 0 on Gradescope)."""
    from tools import dist
    good = (ROOT / "grader" / "rubric.toml").read_text()
    for text, expected in ((good.replace("points_step =", "poinst_step ="), "unknown key 'poinst_step'"),
                           (good.replace('task = "w8a8"', 'task = "w8a9"', 1), "task must be one of"),
                           (good + "\n[[tests\n", "not valid TOML")):
        bad = tmp_path / "rubric.toml"
        bad.write_text(text)
        assert main([str(tmp_path / "gs.zip"), "--rubric", str(bad)]) == 2
        assert dist.main([str(tmp_path / "dist"), "--rubric", str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 2 and all(line.startswith("rubric error: ") and expected in line for line in err), err
        assert not (tmp_path / "gs.zip").exists() and not (tmp_path / "dist").exists()
    assert main([str(tmp_path / "gs.zip")]) == 0 and (tmp_path / "gs.zip").exists()


def test_the_zip_ships_the_rubric_given(tmp_path):
    text = (ROOT / "grader" / "rubric.toml").read_text().replace("gradescope_budget_s = 480",
                                                                  "gradescope_budget_s = 900")
    (tmp_path / "r.toml").write_text(text)
    with zipfile.ZipFile(build(tmp_path / "gs.zip", tmp_path / "r.toml")) as zf:
        assert zf.read("grader/rubric.toml").decode() == text
        assert sorted(n for n in zf.namelist() if n == "grader/rubric.toml") == ["grader/rubric.toml"]


@pytest.mark.skipif(not shutil.which("prlimit"), reason="needs util-linux prlimit")
def test_a_memory_limited_run_still_leaves_a_results_json(tmp_path, bundle):
    # 256 MiB of address space: the wrapper (it imports no torch) runs, the grade cannot start.
    results, _ = _run(_autograder(tmp_path, bundle, _files(ROOT / "solutions")),
                      prefix=("prlimit", f"--as={256 << 20}", "--"))
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"].startswith("The autograder could not finish: the grader exited with code"), \
        results["output"]
    assert "Seed " in results["output"] and results["extra_data"]["grader_error"]
