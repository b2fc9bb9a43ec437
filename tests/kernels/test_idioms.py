"""The idiom corpus (tests/idioms/, one complete kernel file per variant, written from
Triton's tutorials' patterns) is correct: every file, on fresh inputs at the rubric's CPU
shapes in the interpreter, with each config of a multi-config autotune forced in turn
(a GPU's autotuner may pick any of them). tests/idioms/check_corpus.py does the work and
also compiles each variant for sm_90; tests/idioms/README.md records today's grader verdicts.

Set IDIOM_SEED to replay a run (the seed is in every failure message).
"""

from __future__ import annotations

import os
import random
import re

import pytest

from tests.idioms.check_corpus import (
    IDIOMS,
    ROOT,
    autotuners,
    failures,
    forced,
    load,
    settings,
    variants,
)

pytestmark = pytest.mark.slow   # every variant runs in the interpreter on every CPU case

SEED = int(os.environ.get("IDIOM_SEED", random.randrange(2**31)))
NAMES = variants()

# The idioms the corpus must keep showing (issue 40): a pattern of the source that shows it.
IDIOM_PATTERNS = {
    "block pointers": r"tl\.make_block_ptr\(",
    "tl.advance": r"tl\.advance\(",
    "host tensor descriptors": r"TensorDescriptor\.from_tensor\(",
    "device tensor descriptors": r"tl\.make_tensor_descriptor\(",
    "autotune decorator": r"@triton\.autotune\(",
    "autotune function form": r"= triton\.autotune\(",
    "heuristics": r"@triton\.heuristics\(",
    "split-K atomics": r"tl\.atomic_add\(",
    "persistent loop": r"for tile in range\(pid, num_tiles, NUM_PROGRAMS\)",
    "static_range": r"tl\.static_range\(",
    "grouped ordering": r"GROUP_M",
    "reciprocal quantization": r"1\.0 / ",
    "GEMV with tl.sum": r"tl\.sum\(",
    "dot with an accumulator": r"tl\.dot\([^()]*, acc",
}


def test_corpus_covers_the_idioms():
    assert len(NAMES) >= 18, NAMES
    for task in ("w8a8", "w4a16", "dds"):
        assert sum(n.startswith(task + "_") for n in NAMES) >= 5, f"fewer than 5 {task} variants"
    sources = {n: (IDIOMS / f"{n}.py").read_text() for n in NAMES}
    missing = [idiom for idiom, pat in IDIOM_PATTERNS.items() if not any(re.search(pat, s) for s in sources.values())]
    assert not missing, f"no variant shows {missing}"
    for n, s in sources.items():
        first = s.lstrip().removeprefix('"""').split('"""')[0].strip()
        assert first, f"{n}: the module docstring names its idiom"


def test_every_autotune_config_is_forced_in_turn():
    """An autotuned variant is checked once per config, and forcing restores the list."""
    tuned = [n for n in NAMES if autotuners(load(n))]
    assert tuned, "the corpus has autotuned variants"
    for n in tuned:
        module = load(n)
        configs = [list(t.configs) for t in autotuners(module)]
        assert len(settings(module)) == sum(len(c) for c in configs) > 1
        for setting in settings(module):
            with forced(module, setting):
                assert all(len(t.configs) == 1 for t in autotuners(module))
        assert [list(t.configs) for t in autotuners(module)] == configs


def test_the_check_rejects_a_wrong_kernel():
    """The check can fail: a kernel that rounds half away from zero is caught."""
    bad = failures("w8a8_bug_half_away", SEED, seeds=1, folder=ROOT / "tests" / "variants")
    assert any("rounding_ties" in b for b in bad), bad


@pytest.mark.parametrize("name", NAMES)
def test_idiom_is_correct(name):
    bad = failures(name, SEED)
    assert not bad, f"{name} (IDIOM_SEED={SEED}):\n" + "\n".join(bad)
