"""The file's module-level names as a @triton.jit function sees them, and which are constants.

Triton's GPU compiler lets a kernel read a global only if it is a ``tl.constexpr``, a dtype,
a module or another @triton.jit function (``Cannot access global variable ...``,
``Unsupported function referenced``); its interpreter, the CPU grader, reads any global and
calls any function as plain Python. A global that the two see differently picks a branch the
GPU compiler never builds (``_CPU = tl.constexpr(os.environ.get("TRITON_INTERPRET") == "1")``),
and a callable wrapped in ``tl.constexpr`` runs plain Python on the interpreter's values
(``tl.constexpr(dataclasses.astuple)``). So a kernel may read a global only where every
binding of it is a constant expression: a number, a bool, a string, None, a tuple of these, a
dtype of the kernel language (``tl.float16``), ``math.pi`` and its kin, arithmetic and
comparisons of these, ``tl.constexpr``/``int``/``float``/``bool``/``str`` of one, and math's,
``triton.cdiv``'s and ``triton.next_power_of_2``'s results on them; and the argument of
every ``tl.constexpr(...)`` outside a kernel must be one too.
"""

from __future__ import annotations

import ast

from .policy import ALLOWED_PATHS, TL_DTYPES

MATH_CONSTANTS = {"math.pi", "math.e", "math.inf", "math.nan", "math.tau"}
CONSTANT_FUNCTIONS = {"triton.cdiv", "triton.next_power_of_2"}
CASTS = {"int", "float", "bool", "str"}
_NOT_ASSIGNED = None  # a binding other than ``name = value`` (a loop, a `global` in a function, ...)


class ModuleNames:
    """Every binding of each module-level name: the value assigned, or ``_NOT_ASSIGNED``;
    ``defs`` the file's functions and classes (by name: "function" or "class")."""

    def __init__(self, tree: ast.Module, resolve):
        self.resolve = resolve   # a Name/Attribute -> its dotted import path as a list, or None
        self.bindings: dict[str, list[ast.AST | None]] = {}
        self.defs: dict[str, str] = {}
        handled: set[int] = set()
        stack: list[ast.AST] = list(tree.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[node.name] = "class" if isinstance(node, ast.ClassDef) else "function"
                self._bind(node.name, _NOT_ASSIGNED)
                # decorators and defaults run at module level (a walrus there binds a global)
                stack += node.decorator_list + getattr(node, "bases", []) + [k.value for k in
                                                                             getattr(node, "keywords", [])]
                if not isinstance(node, ast.ClassDef):
                    stack += node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
                continue
            if isinstance(node, ast.Lambda):
                stack += node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
                continue
            if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
                for t in node.targets:
                    self._bind(t.id, node.value)
                    handled.add(id(t))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                handled.add(id(node.target))
                if node.value is not None:
                    self._bind(node.target.id, node.value)
            elif isinstance(node, ast.comprehension):
                handled |= {id(n) for n in ast.walk(node.target)}   # bound in the comprehension
            elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and id(node) not in handled:
                self._bind(node.id, _NOT_ASSIGNED)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self._bind(node.name, _NOT_ASSIGNED)
            stack += list(ast.iter_child_nodes(node))
        for node in ast.walk(tree):   # a function that declares a name global can rebind it
            if isinstance(node, ast.Global):
                for name in node.names:
                    self._bind(name, _NOT_ASSIGNED)

    def _bind(self, name: str, value: ast.AST | None) -> None:
        self.bindings.setdefault(name, []).append(value)

    def is_constant_name(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        values = self.bindings.get(name)
        if not values or name in seen or name in self.defs:
            return False
        return all(v is not None and self.is_constant(v, seen | {name}) for v in values)

    def is_constant(self, expr: ast.AST, seen: frozenset[str] = frozenset()) -> bool:
        """Whether ``expr`` is a constant expression (the module's docstring says which)."""
        stack, budget = [expr], 10_000
        while stack:
            budget -= 1
            e = stack.pop()
            if budget < 0:
                return False
            if isinstance(e, ast.Constant):
                if not isinstance(e.value, (int, float, bool, str, type(None))):
                    return False
            elif isinstance(e, (ast.Tuple, ast.List)):
                stack += e.elts
            elif isinstance(e, ast.UnaryOp):
                stack.append(e.operand)
            elif isinstance(e, ast.BinOp):
                stack += [e.left, e.right]
            elif isinstance(e, ast.BoolOp):
                stack += e.values
            elif isinstance(e, ast.Compare):
                stack += [e.left, *e.comparators]
            elif isinstance(e, ast.IfExp):
                stack += [e.test, e.body, e.orelse]
            elif isinstance(e, (ast.Name, ast.Attribute)):
                path = self.resolve(e)
                if path is not None:
                    if not self._constant_path(".".join(path)):
                        return False
                elif not (isinstance(e, ast.Name) and self.is_constant_name(e.id, seen)):
                    return False
            elif isinstance(e, ast.Call):
                if e.keywords or any(isinstance(a, ast.Starred) for a in e.args) or not self._constant_call(e.func):
                    return False
                stack += e.args
            else:
                return False
        return True

    def _constant_path(self, path: str) -> bool:
        return (path in MATH_CONSTANTS or path.startswith("triton.language.")
                and path.split(".", 2)[2] in TL_DTYPES)

    def _constant_call(self, func: ast.AST) -> bool:
        path = self.resolve(func)
        if path is not None:
            text = ".".join(path)
            return (text == "triton.language.constexpr" or text in CONSTANT_FUNCTIONS
                    or text.startswith("math.") and text in ALLOWED_PATHS and text not in MATH_CONSTANTS)
        return isinstance(func, ast.Name) and func.id in CASTS and func.id not in self.bindings
