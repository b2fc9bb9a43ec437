"""The grader gives the project's fixtures what it gave them before: a guard on reworks.

tests/fixtures/fixture_scores.json holds, for each fixture (the reference, the
tutorial-style kernels, the stubs, the kernels written from the handout, one
bug variant per task) graded on the CPU with seed 7 under grader/rubric.toml's
tests, every test's status and its share of the test's points. Shares, not
points: changing a test's points or a threshold in the rubric changes nothing
here. A change that should change a verdict (a new test, a renamed one, a
tolerance, a new check) changes this file too; regenerate it with

    python -m tests.engine.test_scores_unchanged --write

which grades every fixture with the grader of the checkout (a few minutes on
the CPU): run it with a grader you trust, and read the diff.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if __name__ == "__main__":   # the regeneration command grades as the CPU tests do (tests/conftest.py)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from grader.grade import grade  # noqa: E402
from grader.rubric import load_rubric  # noqa: E402

pytestmark = pytest.mark.slow  # full grades of every fixture

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "fixtures" / "fixture_scores.json"
REGENERATE = "python -m tests.engine.test_scores_unchanged --write"
FIXTURES = ("bug_variants", "from_the_handout", "naive", "reference", "stubs")
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


def shares(name: str, tmp_path: Path) -> dict[str, list]:
    """{test: [status, score / points]} of fixture ``name`` graded now."""
    result = grade(_folder(name, tmp_path), load_rubric(), seed=7, device="cpu", log=lambda *_: None)
    return {t.name: [t.status, round(t.score / t.max_score, 6) if t.max_score else 0.0] for t in result.tests}


@pytest.mark.parametrize("name", FIXTURES)
def test_scores_are_what_they_were(name, tmp_path):
    before = json.loads(DATA.read_text())["fixtures"][name]
    now = shares(name, tmp_path)
    assert now.keys() == before.keys(), (
        f"the rubric's tests changed ({sorted(now.keys() ^ before.keys())}): if that is meant, {REGENERATE}")
    changed = {t: (before[t], now[t]) for t in now if now[t] != before[t]}
    assert not changed, f"verdicts changed (before, now): {changed}; if that is meant, {REGENERATE}"


def _dump(data: dict) -> str:
    """The data file: one line per test, so that a regeneration's diff reads test by test."""
    head = {k: v for k, v in data.items() if k != "fixtures"}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + [' "fixtures": {']
    names = sorted(data["fixtures"])
    for i, name in enumerate(names):
        tests = data["fixtures"][name]
        lines.append(f"  {json.dumps(name)}: {{")
        lines += [f"   {json.dumps(t)}: {json.dumps(v)}{',' if j < len(tests) - 1 else ''}"
                  for j, (t, v) in enumerate(sorted(tests.items()))]
        lines.append("  }" + ("," if i < len(names) - 1 else ""))
    return "\n".join(lines + [" }", "}"]) + "\n"


def main() -> None:
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {REGENERATE}")
    data = json.loads(DATA.read_text())
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = ""
    with tempfile.TemporaryDirectory() as tmp:
        data["fixtures"] = {name: shares(name, Path(tmp) / name) for name in FIXTURES
                            if not (Path(tmp) / name).mkdir()}
    data["graded_by"] = f"the grader of commit {commit or '?'} (and what is not committed), {REGENERATE}"
    DATA.write_text(_dump(data))
    print(f"wrote {DATA.relative_to(ROOT)}: read the diff (git diff {DATA.relative_to(ROOT)})")


if __name__ == "__main__":
    main()
