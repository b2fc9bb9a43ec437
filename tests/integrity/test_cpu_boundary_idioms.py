"""The idiom corpus (tests/idioms/) graded end to end on the CPU: full correctness, no flag
(docs/integrity.md, "Honest idioms pass"). Split from test_cpu_boundary.py so that the
suite's workers share the grades.
"""

from __future__ import annotations

import pytest

from tests.fakes import correctness
from tests.integrity.test_cpu_boundary import ROOT, _flags, _grade_one

pytestmark = pytest.mark.slow   # every test grades in the interpreter

IDIOMS = ROOT / "tests" / "idioms"
CORPUS = sorted(p.stem for p in IDIOMS.glob("*_*.py") if p.stem.split("_")[0] in ("w8a8", "w4a16", "dds"))


@pytest.mark.parametrize("name", CORPUS)
def test_the_idiom_corpus_passes_through_the_grader(tmp_path, name):
    """Block pointers, tensor descriptors, autotune (both forms, every config), heuristics, helpers,
    split-K atomics, persistent kernels: full correctness, no flag, no static finding."""
    task = name.split("_")[0]
    result = _grade_one(tmp_path, task, IDIOMS / f"{name}.py")
    assert correctness(result, task) == 4, [t.message for t in result.tests if t.task == task]
    assert not _flags(result, task)
    if "autotune" in name:   # the report says every config was checked
        assert all("every autotune config checked" in t.message for t in result.tests
                   if t.task == task and t.kind == "correctness"), [t.message for t in result.tests]
