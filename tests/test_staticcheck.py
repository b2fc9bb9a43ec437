"""The static check of kernel files: no false positives on legitimate kernels,
and each rule of the handout's "What counts as cheating" is caught."""

from pathlib import Path

import pytest

from grader.staticcheck import check_source

ROOT = Path(__file__).resolve().parent.parent
LEGIT = [p for d in ("assignment", "solutions", "bench/naive") for p in sorted((ROOT / d).glob("*.py"))
         if p.name in ("w8a8.py", "w4a16.py", "dds.py")]


@pytest.mark.parametrize("path", LEGIT, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_legitimate_kernel_files_pass(path):
    assert check_source(path.read_text()) == []


OK_SNIPPETS = [
    "import torch\nimport triton\nimport triton.language as tl\nfrom .utils import check_dds_inputs",
    "import os\nif os.environ.get('TRITON_INTERPRET') == '1':\n    pass",
    "@triton.jit\ndef k(a, b):\n    c = tl.dot(a, b)\n    d = a @ b",
    "y = torch.empty((3, 4))\nz = y.contiguous()\nw = getattr(y, 'shape')",
    "import math\nfrom functools import lru_cache",
]


@pytest.mark.parametrize("src", OK_SNIPPETS)
def test_allowed_constructs(src):
    assert check_source(src) == []


BAD_SNIPPETS = {
    "torch.matmul(x, w)": "library matrix products",
    "y = x @ w": "@ operator",
    "torch._int_mm(a, b)": "library matrix products",
    "F.linear(x, w)": "library matrix products",
    "w.to_dense()": "library matrix products",
    "torch.nn.functional.linear(x, w)": "library matrix products",
    "import numpy": "imports numpy",
    "import sys": "imports sys",
    "from . import w8a8": "imports .",
    "import _grader_child": "imports _grader_child",
    "torch.allclose = lambda *a: True": "patching a module",
    "torch.cuda.Event.elapsed_time = None": "patching a module",
    "eval('1')": "builtin eval",
    "exec('x = 1')": "builtin exec",
    "open('/etc/passwd').read()": "builtin open",
    "getattr(torch, 'mat' + 'mul')": "computed name",
    "x.__class__.__subclasses__()": "introspection",
    "os.system('ls')": "os.system",
    "os.fork()": "os.fork",
    "torch.ops.aten.mm(a, b)": "torch.ops",
    "from torch import matmul": "imports torch's matmul",
}


@pytest.mark.parametrize("src,expected", BAD_SNIPPETS.items(), ids=list(BAD_SNIPPETS))
def test_forbidden_constructs_are_found_with_their_line(src, expected):
    findings = check_source("import torch\nimport os\n" + src)
    assert findings, f"not caught: {src}"
    assert any(expected in f.text for f in findings), [str(f) for f in findings]
    assert all(f.line == 3 for f in findings if expected in f.text)


def test_syntax_errors_are_left_to_the_child():
    assert check_source("def f(:\n") == []
