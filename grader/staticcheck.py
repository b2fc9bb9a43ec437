"""Read a kernel file's source, without running it, for what a kernel file must not do.

This runs in the trusted parent, so a submission cannot switch it off. A kernel
file may import only torch, triton and a few standard modules; outside
@triton.jit functions it may not call PyTorch's matrix products, patch
modules, run dynamic code, or touch processes and files. handout.md lists the rules.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

ALLOWED_IMPORTS = {"torch", "triton", "math", "functools", "typing", "__future__", "dataclasses",
                   "itertools", "os", "warnings", "collections", "enum"}
ALLOWED_RELATIVE = {"utils"}
LIBRARY_MATMULS = {
    "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "einsum",
    "tensordot", "linear", "bilinear", "inner", "outer", "kron", "chain_matmul", "_int_mm",
    "_scaled_mm", "_weight_int4pack_mm", "_weight_int8pack_mm", "to_dense", "conv1d", "conv2d",
    "sparse_mm", "_sparse_mm", "addmm_", "matrix_power", "multi_dot",
}
FORBIDDEN_BUILTINS = {"eval", "exec", "compile", "__import__", "open", "globals", "vars", "locals",
                      "setattr", "delattr", "breakpoint", "input", "memoryview"}
FORBIDDEN_OS = {"system", "_exit", "fork", "forkpty", "kill", "killpg", "popen", "remove", "unlink",
                "rmdir", "rename", "replace", "chmod", "putenv", "unsetenv", "setsid", "execv",
                "execve", "execvp", "spawnv", "spawnl", "posix_spawn", "write", "makedirs", "mkdir"}
FORBIDDEN_DUNDERS = {"__dict__", "__class__", "__subclasses__", "__globals__", "__code__",
                     "__builtins__", "__bases__", "__mro__", "__getattribute__", "__closure__",
                     "__self__", "__func__", "__loader__", "__spec__", "__import__", "__setattr__"}
FORBIDDEN_TORCH = {"ops", "_C", "library", "overrides", "profiler", "utils", "_dynamo", "_inductor",
                   "compile", "jit", "sparse", "backends", "_ops", "fx", "export"}


@dataclass(frozen=True)
class Finding:
    line: int
    text: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.text}"


def _is_triton_jit(dec: ast.expr) -> bool:
    """@triton.jit, @triton.jit(...), @triton.autotune(...), @triton.heuristics(...), @jit."""
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = ast.unparse(target)
    return name.startswith("triton.") or name in ("jit", "autotune", "heuristics")


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


class _Checker(ast.NodeVisitor):
    def __init__(self, allowed: set[str]):
        self.allowed = allowed
        self.findings: list[Finding] = []
        self.in_jit = 0
        self.module_aliases: dict[str, str] = {}  # local name -> top-level module

    def flag(self, node: ast.AST, text: str) -> None:
        self.findings.append(Finding(getattr(node, "lineno", 0), text))

    def visit_Import(self, node):
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top not in self.allowed:
                self.flag(node, f"imports {alias.name}; a kernel file may import only {sorted(self.allowed)}")
            self.module_aliases[(alias.asname or alias.name).split(".")[0]] = top

    def visit_ImportFrom(self, node):
        if node.level:
            if node.module not in ALLOWED_RELATIVE:
                self.flag(node, f"imports .{node.module or ''}; a kernel file may import only from .utils")
            return
        top = (node.module or "").split(".")[0]
        if top not in self.allowed:
            self.flag(node, f"imports from {node.module}; a kernel file may import only {sorted(self.allowed)}")
        for alias in node.names:
            self.module_aliases[alias.asname or alias.name] = top
            if top == "torch" and alias.name in LIBRARY_MATMULS | FORBIDDEN_TORCH:
                self.flag(node, f"imports torch's {alias.name}")

    def visit_FunctionDef(self, node):
        jit = any(_is_triton_jit(d) for d in node.decorator_list)
        self.in_jit += jit
        self.generic_visit(node)
        self.in_jit -= jit

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.MatMult) and not self.in_jit:
            self.flag(node, "uses the @ operator outside a Triton kernel (a PyTorch matmul)")
        self.generic_visit(node)

    def visit_Attribute(self, node):
        root = self.module_aliases.get(_root_name(node) or "", _root_name(node))
        if node.attr in FORBIDDEN_DUNDERS:
            self.flag(node, f"uses {node.attr} (introspection is not allowed in a kernel file)")
        elif not self.in_jit and node.attr in LIBRARY_MATMULS and root != "tl":
            self.flag(node, f"calls {ast.unparse(node)}: library matrix products may not do the work")
        elif root == "os" and node.attr in FORBIDDEN_OS:
            self.flag(node, f"uses os.{node.attr}")
        elif root == "torch" and isinstance(node.value, ast.Name) and node.attr in FORBIDDEN_TORCH:
            self.flag(node, f"uses torch.{node.attr}")
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in FORBIDDEN_BUILTINS:
            self.flag(node, f"uses the builtin {node.id}()")
        self.generic_visit(node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and (
                len(node.args) < 2 or not isinstance(node.args[1], ast.Constant)):
            self.flag(node, "calls getattr with a computed name")
        self.generic_visit(node)

    def _check_target(self, target):
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            root = _root_name(target.value if isinstance(target, ast.Subscript) else target)
            if root in self.module_aliases or root in ("torch", "triton", "tl", "os"):
                self.flag(target, f"assigns to {ast.unparse(target)} (patching a module)")

    def visit_Assign(self, node):
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._check_target(node.target)
        self.generic_visit(node)


def check_source(source: bytes | str, extra_allowed: set[str] | None = None) -> list[Finding]:
    """Findings for one kernel file; an empty list means nothing forbidden was found."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # the child reports the syntax error with its traceback
    checker = _Checker(ALLOWED_IMPORTS | (extra_allowed or set()))
    checker.visit(tree)
    return sorted(set(checker.findings), key=lambda f: f.line)
