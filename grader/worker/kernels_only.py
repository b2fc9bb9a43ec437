"""The kernel file's kernels without its host code: what the executor and the gate load.

The executor holds the real inputs, so none of the submission's host code may
run there: not its module body (a thread, a patch of the executor, a
computation at import), not its wrapper. This module builds the submission's
module from the file's syntax tree with only

- imports of Triton, ``math``, ``torch`` (type hints), ``typing`` and the
  grader's own ``.utils`` (what a kernel or its constants may name);
- ``@triton.jit`` functions, their other decorators dropped (autotune and
  heuristics are host code: the program says which config each launch ran);
- top-level constants made of literals, Triton's and ``math``'s names and
  earlier constants (``BLOCK: tl.constexpr = 64``, ``LOG2E = tl.constexpr(1.4427)``).

Everything else (host functions, classes, other assignments, ``if``, ``try``,
expressions) is left out, so it cannot run. A kernel that names something left
out fails to compile in the gate (``NameError`` in words the student can act
on: a kernel's globals must be ``tl.constexpr`` constants or ``@triton.jit``
functions, as on the GPU). Line numbers and the file name are the file's own,
so tracebacks and the executor's lookup by ``def`` line point at the student's
lines.

This file runs in the sandboxed executor and its gate child; it depends on the
standard library only.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types

IMPORTABLE = ("triton", "math", "torch", "typing")   # and the package's own .utils
CONST_CALLS = {"constexpr", "cdiv", "next_power_of_2", "float32", "int32"}   # callables a constant may use


def _jit_decorator(dec: ast.expr) -> ast.expr | None:
    """The ``triton.jit`` / ``jit`` / ``triton.jit(...)`` decorator, or None."""
    target = dec.func if isinstance(dec, ast.Call) else dec
    if isinstance(target, ast.Attribute) and target.attr == "jit":
        return dec
    if isinstance(target, ast.Name) and target.id == "jit":
        return dec
    return None


def _import_kept(node) -> bool:
    if isinstance(node, ast.Import):
        return all(a.name.split(".")[0] in IMPORTABLE for a in node.names)
    if isinstance(node, ast.ImportFrom):
        if node.level == 1:
            return node.module == "utils"
        return node.level == 0 and (node.module or "").split(".")[0] in IMPORTABLE
    return False


def _constant(expr: ast.expr, known: set[str]) -> bool:
    """An expression made of literals, known names and the calls of ``CONST_CALLS``."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id not in known:
            return False
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            return False
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name not in CONST_CALLS:
                return False
        if isinstance(node, (ast.Lambda, ast.NamedExpr, ast.Starred, ast.Await, ast.Yield, ast.YieldFrom,
                             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Subscript)):
            return False
    return True


def kernel_tree(source: str, filename: str) -> ast.Module:
    """The file's syntax tree with only its imports, ``@triton.jit`` functions and constants."""
    tree = ast.parse(source, filename)
    kept, known = [], set()
    for node in tree.body:
        if _import_kept(node):
            kept.append(node)
            known |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef):
            jit = next((d for d in map(_jit_decorator, node.decorator_list) if d is not None), None)
            if jit is not None:
                node.decorator_list = [jit]
                kept.append(node)
                known.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) for t in targets) and _constant(node.value, known):
                kept.append(node)
                known |= {t.id for t in targets}
    tree.body = kept
    return tree


def load(package: str, name: str) -> types.ModuleType:
    """``package.name`` built from its kernels alone (see the module docstring), registered in sys.modules."""
    full = f"{package}.{name}" if package else name
    if package:
        importlib.import_module(package)   # the grader's own (empty) package: no code of the submission
    spec = importlib.util.find_spec(full)
    if spec is None or not spec.origin:
        raise ImportError(f"no {full}")
    with open(spec.origin, encoding="utf-8") as f:
        source = f.read()
    module = types.ModuleType(full)
    module.__file__, module.__package__, module.__spec__ = spec.origin, package, spec
    sys.modules[module.__name__] = module
    code = compile(kernel_tree(source, spec.origin), spec.origin, "exec")
    exec(code, module.__dict__)   # noqa: S102 - imports, @triton.jit defs and constants only
    return module
