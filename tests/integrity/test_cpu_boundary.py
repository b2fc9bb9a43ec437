"""The CPU boundary graded end to end (docs/integrity.md, "On the CPU the host never holds the
values"): honest idioms pass with full correctness and no flag, every autotune config is
checked, and the attacks that need the values on the host, or host code beside them, get
nothing. Each grade uses the small rubric of tests/fakes.py (two cases per task).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes import by_name, correctness, grade_files

pytestmark = pytest.mark.slow   # every test grades in the interpreter

ROOT = Path(__file__).resolve().parents[2]
SUBMISSIONS = ROOT / "tests" / "fixtures" / "submissions"


def _grade_one(tmp_path, task: str, path: Path, **kw):
    """One kernel file graded as ``task`` with the small rubric (shared by the test_cpu_boundary*
    files: split so that the suite's two workers share them)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    return grade_files(tmp_path, {task: path.read_text()}, [task], **kw)


def _flags(result, task: str) -> list:
    (t,) = [t for t in result.tasks if t.task == task]
    return list(t.flags)


HONEST_CONSTRUCTS = sorted((ROOT / "tests" / "fixtures" / "honest_constructs").glob("*_*.py"))


@pytest.mark.parametrize("path", HONEST_CONSTRUCTS, ids=lambda p: p.stem)
def test_honest_constructs_pass(tmp_path, path):
    """Kernels the boundary once failed (tests/fixtures/honest_constructs/README.md): full correctness."""
    task = path.stem.split("_")[0]
    result = _grade_one(tmp_path, task, path)
    assert correctness(result, task) == 4, [t.message for t in result.tests if t.task == task]
    assert not _flags(result, task)


def test_every_autotune_config_is_checked_on_the_cpu(tmp_path):
    """A quantize launch whose grid is right for one config only: the CPU runs every config, each
    in memory of its own, so the broken one fails and the message names it."""
    fresh = _grade_one(tmp_path / "fresh", "w8a8", SUBMISSIONS / "w8a8_autotune_fresh_workspace.py")
    stale = _grade_one(tmp_path / "stale", "w8a8", SUBMISSIONS / "w8a8_autotune_stale_workspace.py")
    for result in (fresh, stale):
        failed = [t for t in result.tests if t.task == "w8a8" and t.kind == "correctness" and t.status != "passed"]
        assert failed, "the config whose grid misses rows passed"
        assert any("with autotune config" in t.message and "BLOCK_M=16" in t.message for t in failed), \
            [t.message for t in failed]


def test_programs_that_read_each_others_stores_without_atomics_get_nothing(tmp_path):
    """The interpreter runs a launch's programs one after another, so a split-K that adds its
    partial tiles with a plain load and store is right there and races on a GPU. The race
    record (worker/races.py) fails it, and the message names the kernel and the programs."""
    result = _grade_one(tmp_path, "w8a8", SUBMISSIONS / "redteam7_sequential_programs_split_k.py", static=False)
    assert correctness(result, "w8a8") == 0, [t.message for t in result.tests]
    message = by_name(result)["w8a8/c0"].message
    assert "the output is right in the interpreter" in message and "with no atomic" in message, message


def test_an_honest_print_at_import_costs_nothing(tmp_path):
    """The gate answers on a pipe of its own and never imports the file: a print at import is
    harmless (it made the first version of the gate refuse every launch)."""
    result = _grade_one(tmp_path, "w8a8", SUBMISSIONS / "w8a8_honest_print_at_import.py")
    assert correctness(result, "w8a8") == 4, [t.message for t in result.tests]
    assert by_name(result)["w8a8/c0"].status == "passed"


def test_a_kernel_held_back_from_the_cpu_run_is_named_with_its_line(tmp_path):
    """A kernel that kernels_only refuses (here `BLOCK_M is 1`, which the compiler and the
    interpreter answer differently) fails its task with the reason and the line, not with the
    executor's death."""
    from tests.fakes import SOLUTION
    lines = SOLUTION["w8a8"].splitlines()
    at = next(i for i, line in enumerate(lines) if "tl.program_id" in line)
    indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
    lines[at:at] = [f"{indent}if BLOCK_M is 1:", f"{indent}    pass"]
    result = grade_files(tmp_path, {"w8a8": "\n".join(lines) + "\n"}, ["w8a8"])
    for test in [t for t in result.tests if t.kind == "correctness"]:
        assert test.score == 0 and "could not be loaded to run on the CPU" in test.message, test.message
        assert f"(line {at + 1}) uses `is`" in test.message, test.message
