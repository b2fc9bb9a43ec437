"""Python's scopes as the static check reads them: which names a function, class,
lambda or comprehension binds (``_bound_in``), the chain of scopes a name is
looked up in (``_Scope``), and where a statement runs (``MODULE``, ``CLASS``,
``FUNCTION``).
"""

from __future__ import annotations

import ast

MODULE, CLASS, FUNCTION = 0, 1, 2  # where a statement runs: what a name bound there hides
SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
               ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class _Scope:
    """Names bound in one function-like scope (params, assignments, loop targets, ...);
    ``self_name`` is the first parameter when the function is an instance method or a
    classmethod of the file's own class (never of a staticmethod, whose first parameter
    can be any object); ``cls_name`` that of a classmethod; ``types`` what the check
    can tell of the scope's variables (grader/staticcheck/owntypes.py)."""

    __slots__ = ("names", "parent", "self_name", "cls_name", "types")

    def __init__(self, names: set[str], parent: _Scope | None, self_name: str | None = None,
                 cls_name: str | None = None):
        self.names, self.parent, self.self_name, self.cls_name = names, parent, self_name, cls_name
        self.types: dict = {}   # name -> what owntypes.OwnTypes can tell of its value

    def binds(self, name: str) -> bool:
        s = self
        while s is not None:
            if name in s.names:
                return True
            s = s.parent
        return False


def _bound_in(node: ast.AST) -> set[str]:
    """Names a scope node binds locally, without descending into nested scopes."""
    names: set[str] = set()
    declared: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        names |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
        stack = list(node.body) if isinstance(node.body, list) else [node.body]
    elif isinstance(node, COMPREHENSIONS):
        stack = [g.target for g in node.generators]
    else:
        stack = list(node.body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            declared |= set(n.names)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            names.add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            names.add(n.rest)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
            stack += list(getattr(n, "decorator_list", []))
            continue
        if isinstance(n, (ast.Lambda, *COMPREHENSIONS)):
            continue
        stack += list(ast.iter_child_nodes(n))
    return names - declared


def _decorated(fn: ast.AST, names: tuple[str, ...]) -> bool:
    """Whether ``fn`` has one of the plain decorators ``names`` (``@staticmethod``)."""
    return any(isinstance(d, ast.Name) and d.id in names for d in getattr(fn, "decorator_list", []))
