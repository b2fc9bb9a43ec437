"""The stubs (assignment/) leave the thinking to the student, and still run.

- ``give_aways(source)`` reads a kernel file with ``ast`` and names what in it
  is the answer rather than the contract: a call to ``tl.load``, ``tl.store``
  or ``tl.dot`` (or the ``@`` product) inside a ``@triton.jit`` function, a loop
  inside one, and numeric constants that only a solution needs (the
  round-half-to-even constant, the int4 unpacking shift and mask, the fp16
  bit tricks), however they are spelled (``12582912.0``, ``1.5 * 2**23``,
  ``0x4B400000``).
- No stub gives anything away. The reference solutions and the tutorial-style
  kernels do: a stub into which either is pasted fails this test.
- Every stub raises NotImplementedError naming its task and its file.
- Every stub's scaffold is sound: with the tutorial-style kernel body of
  calibration/naive/ spliced in (the two share the kernel's signature) and the
  ``raise`` removed, the stub's wrapper computes the grader's reference.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from grader.compare import check_task_output
from tests.helpers import problem

ROOT = Path(__file__).resolve().parents[2]
TASKS = {"w8a8": "w8a8_mm", "w4a16": "w4a16_mm", "dds": "dds_mm"}

# Constants that only an answer needs, anywhere in a stub file.
ANSWER_CONSTANTS = {
    12582912: "1.5 * 2**23, the round-half-to-even constant",
    0x4B400000: "the float32 bits of 1.5 * 2**23 (the rounding constant)",
    8388608: "2**23, the rounding constant for non-negative values",
    0x6400: "the fp16 bits of 1024 (integer to fp16 by bit arithmetic)",
    1032: "1024 + 8, the offset of the fp16 bit trick for signed nibbles",
    0x88888888: "the mask that flips the sign bit of every nibble",
    -0x77777778: "0x88888888 as an int32 (flips the sign bit of every nibble)",
}
# Constants that answer the unpacking question when they appear in a kernel.
KERNEL_CONSTANTS = {
    0xF: "the nibble mask",
    28: "the shift that puts a nibble's sign bit at bit 31",
}
DATA_MOVES = {"load", "store", "dot"}


# ------------------------------------------------------------------ the check

def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted path, from the file's imports."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``tl.load`` -> ``triton.language.load`` (None for anything but a name chain)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([aliases.get(node.id, node.id), *reversed(parts)])


def _is_kernel(fn: ast.FunctionDef, aliases: dict[str, str]) -> bool:
    for d in fn.decorator_list:
        name = _dotted(d.func if isinstance(d, ast.Call) else d, aliases)
        if name in ("triton.jit", "triton.runtime.jit.jit", "triton.runtime.jit"):
            return True
    return False


def _fold(node: ast.AST):
    """The value of a pure-constant arithmetic expression (``1.5 * 2**23``), or None."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    try:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
            v = _fold(node.operand)
            return None if v is None else {ast.USub: lambda: -v, ast.UAdd: lambda: v,
                                           ast.Invert: lambda: ~v}[type(node.op)]()
        if isinstance(node, ast.BinOp):
            a, b = _fold(node.left), _fold(node.right)
            if a is None or b is None or (isinstance(node.op, ast.Pow) and abs(b) > 64):
                return None
            ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                   ast.Pow: lambda: a ** b, ast.LShift: lambda: a << b, ast.RShift: lambda: a >> b,
                   ast.BitOr: lambda: a | b, ast.BitAnd: lambda: a & b, ast.BitXor: lambda: a ^ b,
                   ast.Div: lambda: a / b, ast.FloorDiv: lambda: a // b}
            return ops[type(node.op)]() if type(node.op) in ops else None
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


def _constants(node: ast.AST, table: dict, where: str) -> list[str]:
    found = []
    for n in ast.walk(node):
        v = _fold(n)
        if v is not None and not isinstance(v, bool) and v in table:
            found.append(f"line {n.lineno}: {where}constant {v!r}: {table[v]}")
    return found


def give_aways(source: str) -> list[str]:
    """What in a kernel file gives the answer away, one line per finding (none for a stub)."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found = _constants(tree, ANSWER_CONSTANTS, "")
    for fn in ast.walk(tree):
        if not (isinstance(fn, ast.FunctionDef) and _is_kernel(fn, aliases)):
            continue
        for n in ast.walk(fn):
            if isinstance(n, ast.Call):
                name = _dotted(n.func, aliases) or ""
                if name.startswith("triton.language.") and name.rsplit(".", 1)[1] in DATA_MOVES:
                    found.append(f"line {n.lineno}: {fn.name} calls {name.replace('triton.language', 'tl')}")
            elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
                found.append(f"line {n.lineno}: {fn.name} multiplies tiles with @")
            elif isinstance(n, (ast.For, ast.While)):
                found.append(f"line {n.lineno}: {fn.name} has a loop")
        found += _constants(fn, KERNEL_CONSTANTS, f"{fn.name}: ")
    return sorted(set(found), key=lambda f: (int(f.split()[1].rstrip(":")), f))


# --------------------------------------------------------------- the stubs

@pytest.mark.parametrize("task", TASKS)
def test_stub_gives_nothing_away(task):
    found = give_aways((ROOT / "assignment" / f"{task}.py").read_text())
    assert found == [], f"assignment/{task}.py gives the answer away:\n" + "\n".join(found)


@pytest.mark.parametrize("task", TASKS)
def test_a_pasted_reference_or_tutorial_kernel_is_caught(task):
    """Each solution and each tutorial-style kernel, pasted into a stub, fails the check above."""
    for tree in ("solutions", "calibration/naive"):
        found = give_aways((ROOT / tree / f"{task}.py").read_text())
        assert any(" calls tl.load" in f for f in found), f"{tree}/{task}.py: {found}"
        assert any(" calls tl.dot" in f or "with @" in f for f in found), f"{tree}/{task}.py: {found}"
        assert any(" calls tl.store" in f for f in found), f"{tree}/{task}.py: {found}"
        assert any("has a loop" in f for f in found), f"{tree}/{task}.py: {found}"
    if task == "w8a8":  # the rounding constant, in both
        for tree in ("solutions", "calibration/naive"):
            assert any("round-half-to-even" in f for f in give_aways((ROOT / tree / "w8a8.py").read_text()))
    if task == "w4a16":  # the unpacking shift (tutorial) and the fp16 bit trick (reference)
        assert any("bit 31" in f for f in give_aways((ROOT / "calibration/naive/w4a16.py").read_text()))
        assert any("fp16 bits" in f for f in give_aways((ROOT / "solutions/w4a16.py").read_text()))


@pytest.mark.parametrize("spelling", [
    "R = 12582912.0", "R = 1.5 * 2**23", "R = tl.constexpr(0x4B400000)", "R = 3 << 22", "R = 2.0 ** 23",
    "B = 0x6400", "X = -0x77777778", "X = 0x88888888",
])
def test_every_spelling_of_an_answer_constant_is_caught(spelling):
    assert give_aways(f"import triton.language as tl\n{spelling}\n")


def test_kernel_calls_are_caught_however_triton_is_imported():
    src = ("import triton\nfrom triton import language as L\nfrom triton.language import store\n"
           "@triton.jit\ndef k(p, q):\n    a = L.load(p)\n    b = triton.language.dot(a, a)\n"
           "    store(q, (b >> 28) & 0xF)\n")
    found = give_aways(src)
    assert {f.split(": ", 1)[1] for f in found} >= {
        "k calls tl.load", "k calls tl.dot", "k calls tl.store",
        "k: constant 28: the shift that puts a nibble's sign bit at bit 31", "k: constant 15: the nibble mask"}


def test_ordinary_numbers_are_not_answers():
    src = ("import triton\nimport triton.language as tl\nBLOCK = 32\n@triton.jit\n"
           "def k(x_ptr, BLOCK_K: tl.constexpr):\n    '''A plan.'''\n    pass\n"
           "def f(x):\n    return (0, 1, 2, 8, 16, 64, 128, 1024, x.shape[0] // 8)\n")
    assert give_aways(src) == []


@pytest.mark.parametrize("shape", [(1, 96, 128), (33, 64, 96), (0, 64, 64)])
@pytest.mark.parametrize("task", TASKS)
def test_stub_raises_not_implemented_naming_task_and_file(task, shape):
    module = importlib.import_module(f"assignment.{task}")
    args, _ = problem(task, shape, seed=0)
    with pytest.raises(NotImplementedError) as err:
        getattr(module, TASKS[task])(*args)
    message = str(err.value)
    assert message.startswith(task.upper() + ":") and f"assignment/{task}.py" in message, message


# ------------------------------------------------- the scaffold is sound

def _splice(task: str) -> str:
    """The stub with calibration/naive's kernel body (and module constants) and without its raise."""
    stub = (ROOT / "assignment" / f"{task}.py").read_text()
    naive = (ROOT / "calibration" / "naive" / f"{task}.py").read_text()
    stub_tree, naive_tree = ast.parse(stub), ast.parse(naive)

    def kernel(tree):
        return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_"))

    s_kernel, n_kernel = kernel(stub_tree), kernel(naive_tree)
    assert ast.dump(s_kernel.args) == ast.dump(n_kernel.args), f"{task}: the stub's kernel signature changed"
    wrapper = next(n for n in stub_tree.body if isinstance(n, ast.FunctionDef) and n.name == TASKS[task])
    raise_ = next(n for n in wrapper.body if isinstance(n, ast.Raise))
    lines = stub.splitlines(keepends=True)
    naive_lines = naive.splitlines(keepends=True)
    body = "".join(naive_lines[n_kernel.body[1].lineno - 1:n_kernel.end_lineno])  # after the docstring
    constants = "".join(ast.get_source_segment(naive, n) + "\n" for n in naive_tree.body if isinstance(n, ast.Assign))
    start = s_kernel.decorator_list[0].lineno - 1
    before = "".join(lines[:start]) + constants
    head = "".join(lines[start:s_kernel.body[0].end_lineno])  # the kernel up to its docstring
    middle = "".join(lines[s_kernel.end_lineno:raise_.lineno - 1])
    tail = "".join(lines[raise_.end_lineno:])
    return before + head + body + middle + tail


@pytest.mark.parametrize("task", TASKS)
def test_stub_scaffold_with_a_tutorial_kernel_body_is_correct(task, tmp_path):
    path = tmp_path / f"{task}.py"
    path.write_text(_splice(task))
    package = "_filled_stubs"
    if package not in sys.modules:  # a package whose utils is assignment/utils.py, as the grader stages it
        pkg = types.ModuleType(package)
        pkg.__path__ = [str(ROOT / "assignment")]
        sys.modules[package] = pkg
    spec = importlib.util.spec_from_file_location(f"{package}.{task}_{tmp_path.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases = [((1, 96, 128), {}), ((33, 64, 96), {}), ((0, 64, 64), {})]
    if task == "w8a8":   # fp16 scales reach the kernel as float32: the wrapper converts them
        cases.append(((5, 64, 96), {"scale_dtype": "float16"}))
    for shape, options in cases:
        args, _ = problem(task, shape, seed=1, **options)
        check = check_task_output(getattr(module, TASKS[task])(*args), task, args)
        assert check.passed, f"{task} {shape} {options}: {check.message}"


@pytest.mark.slow
def test_a_submission_written_from_the_stubs_and_handout_alone_passes(tmp_path):
    """tests/fixtures/from_the_handout/: kernels written from the bundle alone get
    every correctness point on the CPU (and were graded on a GPU: results/)."""
    from grader.grade import grade
    from grader.rubric import load_rubric

    result = grade(ROOT / "tests" / "fixtures" / "from_the_handout", load_rubric(), seed=17, device="cpu",
                   log=lambda *_: None)
    failed = [(t.name, t.message) for t in result.tests if t.kind == "correctness" and t.status != "passed"]
    assert not failed, failed
    assert all(t.status == "ok" for t in result.tasks), [t.summary for t in result.tasks]
