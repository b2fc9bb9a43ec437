"""Honest kernel files pass the static check (grader/staticcheck/), by construction.

The corpus is every honest kernel file in the repository (the reference solutions, the
stubs, the tutorial-style kernels, the faithful and the buggy-but-honest variants, the
handout's and the tuned student's files, the slow fixtures, the honest student, the idiom
corpus of tests/idioms/) and one
small file per idiom of Triton's tutorials that an earlier check refused or could
refuse (tests/fixtures/static/idioms/). A false cheating verdict on honest code is the
worst bug a grader can have: each file must give no finding at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.staticcheck import check_source

ROOT = Path(__file__).resolve().parents[2]
IDIOMS = ROOT / "tests" / "fixtures" / "static" / "idioms"
_GLOBS = ("solutions/*.py", "assignment/w8a8.py", "assignment/w4a16.py", "assignment/dds.py", "calibration/naive/*.py",
          "tests/variants/*.py", "tests/fixtures/from_the_handout/*.py", "tests/fixtures/tuned_student/*.py",
          "tests/fixtures/static/honest_student.py", "tests/fixtures/slow/*/*.py", "tests/fixtures/static/idioms/*.py",
          "tests/idioms/w8a8_*.py", "tests/idioms/w4a16_*.py", "tests/idioms/dds_*.py",
          "tests/fixtures/validation/*/*/*.py")
CORPUS = sorted({p for g in _GLOBS for p in ROOT.glob(g) if p.name != "__init__.py"})
# each idiom that the corpus must hold a file for (the list)
IDIOM_FILES = {"autotune_as_function.py", "own_decorator.py", "tensor_descriptors.py", "block_pointers.py",
               "persistent_split_k.py", "own_classes.py"}


def test_the_corpus_is_what_it_says():
    names = {p.relative_to(ROOT).as_posix() for p in CORPUS}
    assert {"solutions/w8a8.py", "solutions/w4a16.py", "solutions/dds.py", "assignment/w8a8.py",
            "tests/fixtures/static/honest_student.py"} <= names
    assert len([n for n in names if n.startswith("tests/variants/")]) >= 20
    assert len([n for n in names if n.startswith("tests/fixtures/slow/")]) >= 8
    assert len([n for n in names if n.startswith("tests/idioms/")]) >= 15
    assert len([n for n in names if n.startswith("tests/fixtures/validation/")]) == 18
    assert IDIOM_FILES == {p.name for p in IDIOMS.glob("*.py")}


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_honest_kernel_file_gives_no_finding(path):
    assert [str(f) for f in check_source(path.read_bytes(), set())] == []


IDIOM_SNIPPETS = {
    "x * (1.0 / s) in a kernel": "@triton.jit\ndef k(p, s):\n    x = tl.load(p)\n    tl.store(p, x * (1.0 / s))",
    "Config.all_kwargs and .kwargs": "c = triton.Config({'B': 32}, num_warps=4)\nd = c.all_kwargs()\ne = c.kwargs",
    "autotune kept as a function, launched": (
        "@triton.jit\ndef _k(p, B: tl.constexpr):\n    pass\n"
        "k = triton.autotune(configs=[triton.Config({'B': 32})], key=[])(_k)\ndef f(x):\n    k[(1,)](x)"),
    "heuristics kept as a function, launched": (
        "@triton.jit\ndef _k(p, B: tl.constexpr):\n    pass\n"
        "k = triton.heuristics({'B': lambda a: 32})(_k)\ndef f(x):\n    k[(1,)](x)\n    return k.best_config"),
    "a host decorator of the file's own": ("def deco(f):\n    return f\n@deco\ndef g(x):\n    return x"),
    "tl.static_range, tl.range with num_stages and flatten": (
        "@triton.jit\ndef k(p, n, S: tl.constexpr):\n    for i in tl.static_range(S):\n        pass\n"
        "    for j in tl.range(tl.program_id(0), n, tl.num_programs(0), num_stages=2, flatten=True):\n"
        "        tl.atomic_add(p, 1)"),
    "block pointers": ("@triton.jit\ndef k(p, M, N):\n"
                       "    b = tl.make_block_ptr(p, (M, N), (N, 1), (0, 0), (16, 16), (1, 0))\n"
                       "    x = tl.load(b, boundary_check=(0, 1), padding_option='zero')\n"
                       "    tl.store(tl.advance(b, (16, 0)), x, boundary_check=(0,))"),
    "tensor descriptors": ("from triton.tools.tensor_descriptor import TensorDescriptor\n"
                           "@triton.jit\ndef k(d, p, M):\n    e = tl.make_tensor_descriptor(p, shape=[M], strides=[1], "
                           "block_shape=[16])\n    e.store([0], d.load([0]))\n"
                           "def f(x):\n    k[(1,)](TensorDescriptor.from_tensor(x, [16]), x, x.shape[0])"),
    "an own attribute on an annotated parameter": "class C:\n    B = 64\ndef f(c: 'C'):\n    return c.B",
    "a dunder method of the ordinary protocols": ("class C:\n    def __init__(self):\n        self.n = 1\n"
                                                  "    def __repr__(self):\n        return f'C({self.n})'\n"
                                                  "    def __eq__(self, o: 'C'):\n        return self.n == o.n"),
    "type(x).__name__ and type(x) is C": "def f(x):\n    return type(x).__name__ if type(x) is int else None",
    "str.format on a literal": "def f(x):\n    return 'shape {0} {1.shape} {d[k]}'.format(1, x, d={'k': 2})",
    "if __name__": "if __name__ == '__main__':\n    print('run me through the grader')",
}
HEADER = "import torch\nimport triton\nimport triton.language as tl\n"


@pytest.mark.parametrize("name", list(IDIOM_SNIPPETS))
def test_each_honest_idiom_gives_no_finding(name):
    assert [str(f) for f in check_source(HEADER + IDIOM_SNIPPETS[name])] == []
