"""Docs that are generated stay in step with their data."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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


@pytest.mark.slow
def test_handout_local_check_script_runs():
    """The script of the handout's "Test your kernel locally" runs: against the
    reference solutions every error is small, against the stubs each task says
    it is not implemented (one task at a time: a stub does not stop the others)."""
    import re

    text = (ROOT / "handout.md").read_text()
    section = text[text.index("### Test your kernel locally"):]
    script = re.search(r"```python\n(.*?)```", section, re.S)[1]
    assert 10 <= len(script.strip().splitlines()) <= 24, "keep the script short enough to paste"
    ran = subprocess.run([sys.executable, "-c", script.replace("from assignment", "from solutions")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    errors = dict(line.split() for line in ran.stdout.splitlines())
    assert errors.keys() == {"W8A8", "W4A16", "DDS"} and all(float(e) < 1e-3 for e in errors.values()), errors
    stub = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert stub.returncode == 0, stub.stderr[-2000:]
    said = {line.split()[0]: line for line in stub.stdout.splitlines()}
    assert said.keys() == {"W8A8", "W4A16", "DDS"}, stub.stdout
    assert all("not implemented:" in line for line in said.values()), stub.stdout


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["w4a16_bug_scale_group", "w4a16_bug_no_k_mask", "w8a8_bug_no_clamp"])
def test_handout_local_check_script_catches_the_edges_it_names(variant, tmp_path):
    """Group-wise scales, a K that is not a multiple of the tile: the script's shapes
    make each of these bugs show as a large error (the clamp is the grader's: the
    script says it does not test it, and it must still run)."""
    import re
    import shutil

    text = (ROOT / "handout.md").read_text()
    section = text[text.index("### Test your kernel locally"):]
    script = re.search(r"```python\n(.*?)```", section, re.S)[1]
    pkg = tmp_path / "assignment"
    shutil.copytree(ROOT / "assignment", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for task in ("w8a8", "w4a16", "dds"):
        shutil.copyfile(ROOT / "solutions" / f"{task}.py", pkg / f"{task}.py")
    task = variant.split("_")[0]
    shutil.copyfile(ROOT / "tests" / "variants" / f"{variant}.py", pkg / f"{task}.py")
    ran = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    errors = dict(line.split() for line in ran.stdout.splitlines())
    others = [float(e) for name, e in errors.items() if name != task.upper()]
    assert all(e < 1e-3 for e in others), errors
    if variant != "w8a8_bug_no_clamp":
        assert not float(errors[task.upper()]) < 1e-2, errors   # a large error, or nan
