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
  earlier constants (``BLOCK = tl.constexpr(64)``, ``LOG2E = tl.constexpr(1.4427)``; an annotated
  ``BLOCK: tl.constexpr = 64`` is kept too, and refused by the compiler in the gate, as on a GPU).

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
import builtins
import importlib
import importlib.util
import sys
import types

IMPORTABLE = ("triton", "math", "torch", "typing")   # and the package's own .utils
SAFE_BUILTINS = ("range", "min", "max", "len", "abs", "float", "int", "bool", "tuple", "list", "zip", "enumerate",
                 "print", "round", "divmod", "pow", "all", "any", "reversed", "sorted", "slice",
                 "ValueError", "TypeError", "AssertionError", "RuntimeError", "IndexError", "KeyError",
                 "NotImplementedError", "Exception", "True", "False", "None")
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


# Names a kernel body may not use, whatever the static check said: Python's ways to attributes by
# name, to modules, code and frames. Names starting with "__" are refused too.
# isinstance and `is` tell a constexpr from an int: the compiler and the interpreter answer differently.
REFUSED_NAMES = {"hasattr", "getattr", "setattr", "delattr", "__import__", "eval", "exec", "compile", "open",
                 "isinstance", "issubclass",
                 "globals", "vars", "locals", "dir", "type", "id", "object", "super", "memoryview", "breakpoint",
                 "input", "classmethod", "staticmethod", "property"}
# Attributes a kernel body may use that are not in dir() of Triton's classes (set per instance).
INSTANCE_ATTRS = {"dtype", "shape", "type", "numel", "value", "element_ty", "block_type", "base", "block_shape",
                  "strides", "layout"}


class KernelRefused(ValueError):
    """A @triton.jit function reaches past Triton's language (the interpreter's internals)."""


def kernel_attributes() -> set[str]:
    """What may follow a dot in a kernel body: the public names of Triton's language values and
    modules (tl.*, its tensors, dtypes, descriptors, libdevice) and of ``math``; never ``handle``."""
    import math

    import triton
    import triton.language as tl

    names = set(INSTANCE_ATTRS)
    owners = [tl, triton, math, tl.tensor, tl.dtype, tl.constexpr, tl.pointer_type, tl.block_type]
    owners += [getattr(tl, n) for n in ("tensor_descriptor", "tuple", "math") if hasattr(tl, n)]
    try:   # tl.extra.cuda.libdevice.rint(x) and `from triton.language.extra import libdevice`
        import triton.language.extra.cuda as cuda
        from triton.language.extra import libdevice
        owners += [tl.extra, cuda, libdevice]
    except ImportError:  # pragma: no cover
        pass
    for owner in owners:
        for n in dir(owner):
            value = getattr(owner, n, None)
            # A module only where it is part of the language (tl.math, tl.extra.cuda.libdevice): never
            # triton.runtime, os, sys or anything a module imported for itself.
            if isinstance(value, types.ModuleType) and not value.__name__.startswith("triton.language"):
                continue
            if not n.startswith("_"):
                names.add(n)
    return names - {"handle", "data", "core", "semantic", "standard", "target_info", "builder"}


def _check_kernel(fn: ast.FunctionDef, allowed: set[str]) -> None:
    for node in ast.walk(fn):
        if isinstance(node, ast.Attribute) and node.attr not in allowed:
            raise KernelRefused(f"{fn.name} (line {node.lineno}) uses .{node.attr}, which is not part of Triton's "
                                "language (the interpreter's internals are not a kernel's to use)")
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.ClassDef, ast.Lambda)):
            raise KernelRefused(f"{fn.name} (line {node.lineno}) has {type(node).__name__.lower()} statement or "
                                "expression, which has no place in a kernel")
        if isinstance(node, ast.Name) and (node.id in REFUSED_NAMES or node.id.startswith("__")):
            raise KernelRefused(f"{fn.name} (line {node.lineno}) uses {node.id}, which has no place in a kernel")
        if isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.Is, ast.IsNot)) and not (isinstance(right, ast.Constant) and right.value is None)
                for op, right in zip(node.ops, node.comparators)):
            # The compiler unwraps constexprs before `is`, the interpreter does not: `tl.constexpr(B) is B`
            # is True in one and False in the other, a branch the gate would compile and never see run.
            raise KernelRefused(f"{fn.name} (line {node.lineno}) uses `is` (other than `is None`), which Triton's "
                                "compiler and its interpreter answer differently: compare with ==")


# The names Triton's code generator finds when neither the kernel's scope nor the module has them
# (CodeGenerator.builtin_namespace, Triton 3.6).
CODEGEN_BUILTINS = {"len", "list", "range", "float", "int", "isinstance", "getattr", "hasattr", "print", "min", "max"}


def _check_scopes(fn: ast.FunctionDef, module_names: set[str]) -> None:
    """Refuse the names whose scope Triton's compiler and Python read differently.

    (A comprehension's variable, which the compiler leaves bound to the last item, is bound the
    same way in the executor's copy: compiled_sites._Instrument._comprehension.)

    - A local that is also a module-level name or one of the compiler's builtins: a name first
      set inside a loop or a run-time ``if`` is forgotten by the compiler when the block ends, and
      the next read finds the module's (a constant), where Python reads the local."""
    params = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in params \
                and (node.id in module_names or node.id in CODEGEN_BUILTINS):
            raise KernelRefused(
                f"{fn.name} (line {node.lineno}) sets a local {node.id}, which is also a "
                + ("module-level name" if node.id in module_names else "builtin")
                + " of the kernel file; Triton's compiler forgets a name first set inside a loop or a run-time "
                "`if` when the block ends and then reads the module's, where Python reads the local: rename it")
    _check_loop_variables(fn)


def _ends(node: ast.AST) -> tuple[int, int]:
    return (node.end_lineno or node.lineno, node.end_col_offset or 0)


def _check_loop_variables(fn: ast.FunctionDef) -> None:
    """- The variable of a run-time ``for`` loop read after the loop: the compiler leaves it
      undefined there (the loop's placeholder, ``ub.poison``), where Python keeps the last index,
      or the name's earlier value when the loop made no trip (red team round 8). A
      ``tl.static_range`` loop is unrolled, and both keep its last index."""
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)
             and not (isinstance(n.iter, ast.Call) and getattr(n.iter.func, "attr", getattr(n.iter.func, "id", ""))
                      == "static_range")]
    if not loops:
        return
    stores = [(n.id, (n.lineno, n.col_offset)) for n in ast.walk(fn) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)]
    for loop in loops:
        name, end = loop.target.id, _ends(loop)
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)):
                continue
            at = (node.lineno, node.col_offset)
            if at <= end:
                continue
            # Set again between the loop's end and this read (another loop, an assignment): that value.
            if any(n == name and end < where < at for n, where in stores):
                continue
            raise KernelRefused(
                f"{fn.name} (line {node.lineno}) reads {name}, the variable of the loop at line {loop.lineno}, after "
                "that loop: Triton's compiler leaves a run-time loop's variable undefined after it, where Python "
                "keeps its last value; keep what you need in another name inside the loop")


def kernel_tree(source: str, filename: str) -> ast.Module:
    """The file's syntax tree with only its imports, ``@triton.jit`` functions and constants."""
    tree = ast.parse(source, filename)
    kept, known, allowed, jitted = [], set(), kernel_attributes(), {}
    for node in tree.body:
        if _import_kept(node):
            kept.append(node)
            known |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef):
            jit = next((d for d in map(_jit_decorator, node.decorator_list) if d is not None), None)
            if jit is not None:
                if node.name in jitted:
                    # The compiler names a compiled helper by its name (and argument types): two of one name
                    # would be one function to it and two to the interpreter.
                    raise KernelRefused(f"{node.name} (line {node.lineno}): a second @triton.jit function of that "
                                        f"name (the first is at line {jitted[node.name]}); give each its own name")
                node.decorator_list = [jit]
                _check_kernel(node, allowed)
                kept.append(node)
                jitted[node.name] = node.lineno
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            # A constant never names a @triton.jit function: an alias would be a second name for it.
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) for t in targets) and _constant(node.value, known):
                kept.append(node)
                known |= {t.id for t in targets}
    tree.body = kept
    module_names = set(known) | set(jitted)
    for node in kept:
        if isinstance(node, ast.FunctionDef):
            _check_scopes(node, module_names)
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
    tree = kernel_tree(source, spec.origin)
    checked = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    code = compile(tree, spec.origin, "exec")
    # The kept imports need __import__ once; the kernels' builtins then are what Triton's language
    # accepts in a kernel, nothing that reaches further.
    module.__dict__["__builtins__"] = {n: getattr(builtins, n) for n in SAFE_BUILTINS + ("__import__",)}
    exec(code, module.__dict__)   # noqa: S102 - imports, @triton.jit defs and constants only
    module.__dict__["__builtins__"] = {n: getattr(builtins, n) for n in SAFE_BUILTINS}
    for name, node in checked.items():
        _same_text_everywhere(getattr(module.__dict__[name], "fn", None), node)
    return module


def _body(node: ast.FunctionDef) -> str:
    """A function's syntax without its decorators and positions: what the checks and a run must share."""
    bare = ast.FunctionDef(name=node.name, args=node.args, body=node.body, decorator_list=[],
                           returns=node.returns, type_comment=None, type_params=getattr(node, "type_params", []))
    return ast.dump(bare, include_attributes=False)


def _same_text_everywhere(fn, node: ast.FunctionDef) -> None:
    """Refuse a kernel whose source, as Triton's compiler and its interpreter each re-read it from the
    file, is not the syntax tree checked here. Both re-read the text (``inspect.getsource``): the
    compiler parses from the first ``def`` line, the interpreter from the last line that starts with
    ``def `` (``FunctionRewriter._find_def``), so a string holding a second ``def`` would have the
    interpreter run code that neither this check nor the gate ever saw."""
    import inspect
    import textwrap

    from triton.runtime.interpreter import FunctionRewriter

    if fn is None:
        return
    lines, _ = inspect.getsourcelines(fn)
    rewriter = FunctionRewriter(fn)
    start = rewriter.def_lineno = rewriter._find_def(lines)
    views = {"the compiler's": ast.parse(textwrap.dedent("".join(lines))).body[0],
             "the interpreter's": ast.parse(rewriter._prepare_source(lines) if start else "").body}
    views["the interpreter's"] = (views["the interpreter's"] or [None])[0]
    want = _body(node)
    for who, view in views.items():
        if not isinstance(view, ast.FunctionDef) or _body(view) != want:
            raise KernelRefused(f"{node.name} (line {node.lineno}): {who} reading of its source is not the kernel "
                                "that was checked (a line in the kernel that starts with `def ` inside a string?)")
