"""The task registry and the run -> judge -> score pipeline changed no score.

tests/fixtures/scores_before_registry.json holds what the grader gave, before
that rework, to the project's fixtures (the reference, the tutorial-style
kernels, the stubs, the kernels written from the handout, one bug variant per
task) on the CPU with seed 7 and this rubric's tests. The grader of today must
give every test the same status and points. A deliberate change of points in
the rubric changes this file too: regenerate it with the grader you trust.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader.grade import grade
from grader.rubric import load_rubric

ROOT = Path(__file__).resolve().parent.parent
BEFORE = json.loads((ROOT / "tests" / "fixtures" / "scores_before_registry.json").read_text())["fixtures"]
BUGS = {"w8a8": "w8a8_bug_half_away", "w4a16": "w4a16_bug_unsigned_unpack", "dds": "dds_bug_transposed_block"}


def _folder(name: str, tmp_path: Path) -> Path:
    if name == "bug_variants":
        folder = tmp_path / "bugs"
        folder.mkdir()
        for task, variant in BUGS.items():
            shutil.copyfile(ROOT / "tests" / "variants" / f"{variant}.py", folder / f"{task}.py")
        return folder
    return ROOT / {"reference": "solutions", "naive": "calibration/naive", "stubs": "assignment",
                   "from_the_handout": "tests/fixtures/from_the_handout"}[name]


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_scores_are_what_they_were(name, tmp_path):
    result = grade(_folder(name, tmp_path), load_rubric(), seed=7, device="cpu", log=lambda *_: None)
    now = {t.name: [t.status, t.score] for t in result.tests}
    assert now == BEFORE[name]["tests"]
    assert result.score == BEFORE[name]["score"]
