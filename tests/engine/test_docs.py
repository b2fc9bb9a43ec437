"""Docs that are generated stay in step with their data."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_generated_docs_match_the_results_files_and_the_rubric():
    proc = subprocess.run([sys.executable, "-m", "tools.render_results", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr + "\n(make docs regenerates them)"


def test_handout_rubric_and_report_agree_on_the_points():
    """The handout's 60 + 40 = 100 is the rubric's, and the student bundle's
    report adds hidden tests back so that its total reads the same."""
    import re

    from grader.rubric import load_rubric, parse_rubric, tomllib
    from tools.dist import public_rubric

    rubric = load_rubric()
    correctness = sum(t.points for t in rubric.tests if t.kind == "correctness" and not t.bonus)
    performance = sum(t.points for t in rubric.tests if t.kind == "performance" and not t.bonus)
    text = (ROOT / "handout.md").read_text()
    said = re.search(r"Correctness is (\d+)\s+points, performance (\d+)", text)
    assert said and (float(said[1]), float(said[2])) == (correctness, performance), "run make docs"
    assert f"not exceed {correctness + performance:g}" in text, "run make docs"
    bundle = parse_rubric(tomllib.loads(public_rubric((ROOT / "grader" / "rubric.toml").read_text())))
    visible = sum(t.points for t in bundle.tests if t.kind == "correctness" and not t.bonus)
    assert visible + sum(t.hidden_points for t in bundle.tasks.values()) == correctness


CHECK_MINE = ROOT / "assignment" / "check_mine.py"


def _check_mine(*args, cwd=ROOT, script=CHECK_MINE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_handout_local_check_script_runs(tmp_path):
    """assignment/check_mine.py, the handout's "Test your kernel locally", runs from
    anywhere: against the reference solutions every error is small, against the
    stubs each task says it is not implemented (one task at a time: a stub does
    not stop the others)."""
    text = (ROOT / "handout.md").read_text()
    section = text[text.index("### Test your kernel locally"):text.index("### Last year's course scripts")]
    assert "python assignment/check_mine.py" in section
    ran = _check_mine("solutions", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    errors = dict(line.split() for line in ran.stdout.splitlines())
    assert errors.keys() == {"W8A8", "W4A16", "DDS"} and all(float(e) < 1e-3 for e in errors.values()), errors
    stub = _check_mine()
    assert stub.returncode == 0, stub.stderr[-2000:]
    said = {line.split()[0]: line for line in stub.stdout.splitlines()}
    assert said.keys() == {"W8A8", "W4A16", "DDS"}, stub.stdout
    assert all("not implemented:" in line for line in said.values()), stub.stdout


def test_the_local_check_script_refuses_python_m_with_one_line():
    """Run with -m, the package (and Triton) load before the script can choose the
    interpreter: it says how to run it instead of failing on a kernel launch."""
    proc = subprocess.run([sys.executable, "-m", "assignment.check_mine"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and proc.stdout == ""
    said = proc.stderr.strip()
    assert said.splitlines() == [said] and "python assignment/check_mine.py" in said, proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["w4a16_bug_scale_group", "w4a16_bug_no_k_mask", "w8a8_bug_no_clamp"])
def test_handout_local_check_script_catches_the_edges_it_names(variant, tmp_path):
    """Group-wise scales, a K that is not a multiple of the tile: the script's shapes
    make each of these bugs show as a large error (the clamp is the grader's: the
    script says it does not test it, and it must still run)."""
    import shutil

    pkg = tmp_path / "assignment"
    shutil.copytree(ROOT / "assignment", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for task in ("w8a8", "w4a16", "dds"):
        shutil.copyfile(ROOT / "solutions" / f"{task}.py", pkg / f"{task}.py")
    task = variant.split("_")[0]
    shutil.copyfile(ROOT / "tests" / "variants" / f"{variant}.py", pkg / f"{task}.py")
    ran = _check_mine(script=pkg / "check_mine.py")   # the copy checks the package beside it
    assert ran.returncode == 0, ran.stderr[-2000:]
    errors = dict(line.split() for line in ran.stdout.splitlines())
    others = [float(e) for name, e in errors.items() if name != task.upper()]
    assert all(e < 1e-3 for e in others), errors
    if variant != "w8a8_bug_no_clamp":
        assert not float(errors[task.upper()]) < 1e-2, errors   # a large error, or nan


@pytest.mark.slow
def test_the_local_check_script_checks_every_autotune_config(tmp_path):
    """A multi-config @triton.autotune (the handout recommends it) cannot be timed in the
    interpreter: the script runs each config in turn and prints one line per config."""
    import shutil

    pkg = tmp_path / "assignment"
    shutil.copytree(ROOT / "assignment", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ROOT / "tests" / "idioms" / "w8a8_autotune_grouped.py", pkg / "w8a8.py")
    ran = _check_mine(script=pkg / "check_mine.py")
    assert ran.returncode == 0, ran.stderr[-2000:]
    lines = [line for line in ran.stdout.splitlines() if line.startswith("W8A8")]
    assert [line.split("(")[-1] for line in lines] == [f"autotune config {k} of 4)" for k in (1, 2, 3, 4)], lines
    assert all(float(line.split()[1]) < 1e-3 for line in lines), lines


@pytest.mark.slow
def test_the_local_check_script_checks_the_configs_prune_configs_by_keeps(tmp_path):
    """As the grader does, the script checks only the configs the file's early_config_prune
    keeps for the call: a config pruned away for this shape is never run (here it would
    store nothing), and the count says how many were kept."""
    import shutil

    pkg = tmp_path / "assignment"
    shutil.copytree(ROOT / "assignment", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    src = (ROOT / "tests" / "idioms" / "w8a8_autotune_grouped.py").read_text()
    assert src.count('key=["M", "N", "K"],\n)') == 1
    src = src.replace('key=["M", "N", "K"],\n)', 'key=["M", "N", "K"],\n    prune_configs_by={"early_config_prune": '
                      '_small_tiles_for_small_m},\n)')
    src = src.replace("@triton.autotune(", '''def _small_tiles_for_small_m(configs, named_args, **kwargs):
    return [c for c in configs if (c.kwargs["BLOCK_M"] <= 32) == (named_args["M"] <= 64)]


@triton.autotune(''', 1)
    # The 64 x 64 config stores nothing: run, it would be a large error.
    src = src.replace('triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}',
                      'triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "SKIP": 1}')
    src = src.replace("GROUP_M: tl.constexpr", "GROUP_M: tl.constexpr, SKIP: tl.constexpr = 0", 1)
    src = src.replace("tl.store(y_ptrs, y.to(tl.float16)", "tl.store(y_ptrs, (y * (1 - SKIP)).to(tl.float16)")
    (pkg / "w8a8.py").write_text(src)
    ran = _check_mine(script=pkg / "check_mine.py")
    assert ran.returncode == 0, ran.stderr[-2000:]
    lines = [line for line in ran.stdout.splitlines() if line.startswith("W8A8")]
    assert [line.split("(")[-1] for line in lines] == [f"autotune config {k} of 2)" for k in (1, 2)], lines
    assert all(float(line.split()[1]) < 1e-3 for line in lines), lines


def test_performance_doc_shows_the_newest_benchmark_of_each_gpu_and_names_the_older():
    """docs/performance.md holds one benchmark per GPU, its newest results file;
    the older files are named, not shown (tools/render_results.py)."""
    import json
    import re

    from tools.gpu_session import short_gpu_name
    from tools.render_results import PERF_BEGIN, PERF_END

    files = sorted((ROOT / "results").glob("*.json"))
    benched = [(p, json.loads(p.read_text())) for p in files]
    benched = [(p, run) for p, run in benched if run.get("bench")]
    newest = {}
    for p, run in benched:
        gpu = short_gpu_name(run["gpu"])
        if gpu not in newest or run["date"] > newest[gpu][1]["date"]:
            newest[gpu] = (p, run)
    text = (ROOT / "docs" / "performance.md").read_text()
    section = text[text.index(PERF_BEGIN):text.index(PERF_END)]
    shown = re.findall(r"^### (.+), (\d{4}-\d\d-\d\d)$", section, re.M)
    assert sorted((short_gpu_name(gpu), date) for gpu, date in shown) == \
        sorted((gpu, run["date"]) for gpu, (p, run) in newest.items())
    older = [p for p, _ in benched if p not in {q for q, _ in newest.values()}]
    assert len(benched) > len(newest) and older   # the results hold older runs: the doc must leave them out
    for p in older:
        assert f"`{p.relative_to(ROOT)}`" in section
