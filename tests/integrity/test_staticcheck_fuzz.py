"""Property-based fuzzing of the static check (grader/staticcheck/) with Hypothesis.

The property: a source that the check passes (no finding), once parsed, reaches none of
what a kernel file may not reach: no import outside the allowed modules, no dunder name
or attribute (but the few that only give text: ``__name__``, ``__doc__``, ...), none of
the builtins that reach namespaces, code or files (``getattr`` with a computed name,
``setattr``, ``globals``, ``vars``, ``eval``, ``exec``, ``__import__``, ``open``,
``compile``, ...), no attribute of frames, code objects or generators, no ``match``,
``async`` or ``except*``; and inside a ``@triton.jit`` function no attribute of a value
that Triton's language values do not have publicly (nor ``.handle``, the interpreter's
arrays), no ``hasattr``/``getattr``/``isinstance``/``str``/``type``, no host module, and
no ``tl.constexpr`` of the environment or of a callable. The oracle (``_forbidden``) is
written here, from the language and the installed Triton, not from the checker's lists.

Two generators: ``hypothesmith`` writes arbitrary valid Python from the grammar; a
vocabulary generator writes statements from the pieces a clever student combines
(dangerous names, attributes, constructs next to honest ones), which reach passing
sources far more often. Bounded in ``make test``; ``make fuzz`` runs it longer
(``STATICCHECK_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import ast
import os

import hypothesmith
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader.staticcheck import check_source

EXAMPLES = int(os.environ.get("STATICCHECK_FUZZ_EXAMPLES", "100"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 100,
                    suppress_health_check=list(HealthCheck))

# --- the oracle: independent of the checker's lists ---------------------------------------------
IMPORTABLE = ("torch", "triton", "math", "functools", "typing", "dataclasses", "itertools", "collections", "enum",
              "warnings", "os", "__future__")
TEXT_DUNDERS = {"__name__", "__qualname__", "__doc__", "__version__", "__all__", "__debug__", "__future__"}
DEF_DUNDERS = {"__init__", "__post_init__", "__repr__", "__str__", "__eq__", "__ne__", "__hash__", "__lt__", "__le__",
               "__gt__", "__ge__", "__len__", "__iter__", "__contains__", "__getitem__", "__bool__", "__call__"}
DANGEROUS_BUILTINS = {"getattr", "setattr", "delattr", "globals", "locals", "vars", "eval", "exec", "__import__",
                      "open", "compile", "breakpoint", "input", "memoryview", "dir", "help", "exit", "quit"}
FRAME_ATTRS = {"gi_frame", "gi_code", "gi_yieldfrom", "f_globals", "f_locals", "f_back", "f_builtins", "f_code",
               "tb_frame", "tb_next", "cr_frame", "cr_code", "ag_frame", "ag_code", "co_code", "co_consts",
               "mro", "func_globals"}
# inside a kernel: the public attributes of Triton's language values, read off the installed Triton
def _triton_value_attrs() -> set[str]:
    import triton.language.core as core

    classes = (core.tensor, core.dtype, core.pointer_type, core.block_type, core.constexpr, core.tensor_descriptor,
               core.tuple)
    names = {n for c in classes for n in dir(c)} | {"handle", "shape", "numel", "type", "dtype", "value", "values",
                                                     "element_ty", "strides", "name", "primitive_bitwidth"}
    return {n for n in names if not n.startswith("_")} - {"handle"}   # handle: the interpreter's arrays


TRITON_VALUE_ATTRS = _triton_value_attrs()
KERNEL_UNSAFE_CALLS = {"hasattr", "getattr", "isinstance", "str", "repr", "type", "format", "ascii", "vars", "dir"}
HOST_MODULES = {"os", "dataclasses", "functools", "itertools", "collections", "typing", "torch", "sys"}
REFUSED_NODES = (ast.Match, ast.AsyncFunctionDef, ast.AsyncFor, ast.AsyncWith, ast.Await, ast.TryStar)


def _dunder(s: str) -> bool:
    return len(s) > 4 and s.startswith("__") and s.endswith("__")


def _forbidden(tree: ast.AST) -> list[str]:
    """What the parsed file reaches that a kernel file may not."""
    bound = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            bound.add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, ast.alias):
            bound.add((n.asname or n.name).split(".")[0])
    out = []
    for n in ast.walk(tree):
        if isinstance(n, REFUSED_NODES):
            out.append(type(n).__name__)
        elif isinstance(n, ast.Import):
            out += [f"import {a.name}" for a in n.names if a.name.split(".")[0] not in IMPORTABLE]
        elif isinstance(n, ast.ImportFrom):
            if n.level and not (n.level == 1 and n.module in (None, "utils")):
                out.append(f"from {'.' * n.level}{n.module or ''}")
            elif not n.level and (n.module or "").split(".")[0] not in IMPORTABLE:
                out.append(f"from {n.module}")
        elif isinstance(n, ast.Name) and _dunder(n.id) and n.id not in TEXT_DUNDERS:
            out.append(n.id)
        elif isinstance(n, ast.Attribute) and ((_dunder(n.attr) and n.attr not in TEXT_DUNDERS | {"__init__"})
                                               or n.attr in FRAME_ATTRS):
            out.append("." + n.attr)
        elif isinstance(n, ast.Name) and n.id in DANGEROUS_BUILTINS and n.id not in bound:
            out.append(n.id)
        elif isinstance(n, ast.arg) and _dunder(n.arg):
            out.append(n.arg)
        elif isinstance(n, ast.keyword) and n.arg and _dunder(n.arg):
            out.append(n.arg + "=")
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)) and _dunder(n.name) and n.name not in DEF_DUNDERS:
            out.append(n.name)
    out += _forbidden_in_kernels(tree, bound)
    # getattr is an attribute read only with a literal, public name
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr" \
                and "getattr" not in bound:
            name = n.args[1] if len(n.args) > 1 else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and not name.value.startswith("_"):
                out.remove("getattr")
    return out


def _is_jit(fn: ast.AST) -> bool:
    return isinstance(fn, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in fn.decorator_list)


def _forbidden_in_kernels(tree: ast.AST, bound: set[str]) -> list[str]:
    """What a @triton.jit function reaches that Triton's language does not have, and what a
    tl.constexpr holds that is not a constant."""
    out = []
    aliases = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
               for a in n.names if (getattr(n, "module", None) or a.name).split(".")[0] in ("triton", "math")}
    for fn in ast.walk(tree):
        if not _is_jit(fn):
            continue
        for n in (n for stmt in fn.body for n in ast.walk(stmt)):
            if isinstance(n, ast.Attribute):
                root = n
                while isinstance(root, ast.Attribute):
                    root = root.value
                if not (isinstance(root, ast.Name) and root.id in aliases) and n.attr not in TRITON_VALUE_ATTRS:
                    out.append(f"kernel .{n.attr}")
            elif isinstance(n, ast.Name) and n.id in HOST_MODULES:
                out.append(f"kernel {n.id}")
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in KERNEL_UNSAFE_CALLS:
                out.append(f"kernel {n.func.id}()")
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "constexpr":
            for a in ast.walk(n):
                if isinstance(a, ast.Name) and a.id in HOST_MODULES | {"getattr", "hasattr", "type"}:
                    out.append(f"tl.constexpr({a.id})")
                elif isinstance(a, ast.Lambda):
                    out.append("tl.constexpr(lambda)")
    return out


def _holds(source: str) -> None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    found = check_source(source)
    if not found:
        assert not _forbidden(tree), (source, _forbidden(tree))


def test_the_oracle_sees_what_it_should():
    assert _forbidden(ast.parse("import numpy\nb = __builtins__\nx.gi_frame\ngetattr(x, n)\nmatch x:\n case 1: pass"))
    assert not _forbidden(ast.parse("import torch\ny = getattr(x, 'shape')\nprint(type(x).__name__)"))
    assert _forbidden(ast.parse("@triton.jit\ndef k(p):\n    x = p.handle"))
    assert _forbidden(ast.parse("_C = tl.constexpr(os.environ.get('X'))"))
    assert not _forbidden(ast.parse("import triton.language as tl\n_M = tl.constexpr(1.0)\n@triton.jit\n"
                                    "def k(p):\n    x = tl.load(p).to(tl.float32).T + _M.value"))


# --- generators -----------------------------------------------------------------------------------
@SETTINGS
@given(hypothesmith.from_grammar())
def test_grammar_generated_sources(source):
    _holds(source)


_NAMES = ["x", "torch", "tl", "triton", "os", "functools", "typing", "getattr", "setattr", "globals", "vars", "eval",
          "exec", "__import__", "open", "compile", "type", "object", "print", "__builtins__", "__name__", "super",
          "C", "self", "k", "f", "e", "g", "str", "dict", "input", "dir", "help", "iter", "next", "map"]
_ATTRS = ["shape", "dtype", "__class__", "__dict__", "__globals__", "__init__", "__name__", "__subclasses__",
          "gi_frame", "f_globals", "f_back", "tb_frame", "mro", "matmul", "numpy", "start", "format", "kwargs",
          "modules", "sys", "core", "knobs", "runtime", "jit", "load", "cdiv", "environ", "get", "x", "BLOCK",
          "__traceback__", "__self__", "__builtins__", "with_traceback", "item", "fn", "__wrapped__"]
_MODULES = ["numpy", "sys", "threading", "gc", "ctypes", "inspect", "importlib", "builtins", "operator", "math",
            "functools", "os", "torch.ops", "torch._C", "torch.utils.cpp_extension", "triton.runtime", "_thread"]


@st.composite
def _expr(draw, depth=0):
    choice = draw(st.integers(0, 9 if depth < 3 else 2))
    if choice <= 1:
        return draw(st.sampled_from(_NAMES))
    if choice == 2:
        return draw(st.sampled_from(["0", "'__class__'", "'shape'", "'mat' + 'mul'", "None", "'{0.__class__}'"]))
    inner = draw(_expr(depth + 1))
    if choice == 3:
        return f"{inner}.{draw(st.sampled_from(_ATTRS))}"
    if choice == 4:
        args = ", ".join(draw(st.lists(_expr(depth + 1), max_size=2)))
        return f"{inner}({args})"
    if choice == 5:
        return f"{inner}[{draw(_expr(depth + 1))}]"
    if choice == 6:
        return f"(lambda a={inner}: a)"
    if choice == 7:
        return f"({draw(st.sampled_from(['h', 'tl', 'getattr', 'q']))} := {inner})"
    if choice == 8:
        return f"f'{{{inner}!r:{{{draw(_expr(depth + 1))}}}}}'"
    return f"[{inner} for x in {draw(_expr(depth + 1))}]"


@st.composite
def _statement(draw):
    e = draw(_expr())
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return f"y = {e}"
    if kind == 1:
        return f"import {draw(st.sampled_from(_MODULES))}"
    if kind == 2:
        return f"from {draw(st.sampled_from(_MODULES))} import {draw(st.sampled_from(_ATTRS))}"
    if kind == 3:
        return f"match {e}:\n    case object({draw(st.sampled_from(_ATTRS))}=b):\n        y = b"
    if kind == 4:
        return f"@{e}\ndef f2(a):\n    return a"
    if kind == 5:
        return f"class C:\n    {draw(st.sampled_from(_ATTRS)).strip('_') or 'z'} = {e}\n    def m(self):\n" \
               f"        return self.{draw(st.sampled_from(_ATTRS))}"
    if kind == 6:
        return f"def f3(v):\n    return v.{draw(st.sampled_from(_ATTRS))}"
    if kind == 7:
        return f"try:\n    y = {e}\nexcept Exception as e:\n    y = e.{draw(st.sampled_from(_ATTRS))}"
    if kind == 8:
        return f"*{e}.{draw(st.sampled_from(_ATTRS))}, = [1]"
    return e


HEADER = "import torch\nimport triton\nimport triton.language as tl\nimport os\nimport functools\nimport typing\n"


@SETTINGS
@given(st.lists(_statement(), min_size=1, max_size=5))
def test_vocabulary_generated_sources(statements):
    _holds(HEADER + "\n".join(statements) + "\n")


# --- kernels: what a clever student writes inside @triton.jit, next to honest kernel code ---------
_K_NAMES = ["x", "p", "B", "tl", "os", "_G", "_H", "dataclasses", "hasattr", "getattr", "isinstance", "str", "type",
            "min", "range", "helper", "int", "float"]
_K_ATTRS = ["handle", "data", "astype", "dtype", "shape", "to", "T", "reshape", "value", "element_ty", "ctypes",
            "environ", "get", "load", "float16", "__class__", "_flatten_ir", "item", "sum", "numpy", "tolist",
            "primitive_bitwidth", "type", "__name__", "trans", "values"]
_G_VALUES = ["12582912.0", "os.environ.get('TRITON_INTERPRET') == '1'", "dataclasses.astuple", "tl.float16",
             "2 ** 20", "os.getenv('X')", "helper", "lambda a: a", "float('-inf')", "_H", "(1, 2)"]


@st.composite
def _kexpr(draw, depth=0):
    choice = draw(st.integers(0, 5 if depth < 3 else 1))
    if choice <= 1:
        return draw(st.sampled_from(_K_NAMES))
    inner = draw(_kexpr(depth + 1))
    if choice == 2:
        return f"{inner}.{draw(st.sampled_from(_K_ATTRS))}"
    if choice == 3:
        args = ", ".join(draw(st.lists(_kexpr(depth + 1), max_size=2)))
        return f"{inner}({args})"
    if choice == 4:
        return f"{inner}[0]"
    return f"({inner} + {draw(_kexpr(depth + 1))})"


@st.composite
def _kernel_file(draw):
    g = draw(st.sampled_from(_G_VALUES))
    h = draw(st.sampled_from(_G_VALUES))
    body = "\n".join(f"        y{i} = {draw(_kexpr())}" for i in range(draw(st.integers(1, 3))))
    branch = draw(st.sampled_from(["_G", "hasattr(p, 'handle')", "B > 1", "isinstance(p, tl.tensor)"]))
    return (HEADER + "import dataclasses\n\ndef helper(t):\n    return t\n\n"
            f"_G = tl.constexpr({g})\n_H = {h}\n\n@triton.jit\ndef kern(p, B: tl.constexpr):\n"
            f"    x = tl.load(p)\n    if {branch}:\n{body}\n    tl.store(p, x)\n")


@SETTINGS
@given(_kernel_file())
def test_vocabulary_generated_kernels(source):
    _holds(source)
