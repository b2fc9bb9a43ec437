"""The static check's pass over one parsed kernel file (``_Checker``), and what it
finds (``Finding``). What is allowed is policy.py's; how names bind, scopes.py's.
"""

from __future__ import annotations

import ast
import string
from _string import formatter_field_name_split
from dataclasses import dataclass

from . import policy
from .constants import ModuleNames
from .owntypes import OwnTypes
from .policy import (
    ALLOWED_BUILTINS,
    ALLOWED_DUNDERS,
    ALLOWED_MODULES,
    ALLOWED_NAME_DUNDERS,
    ALLOWED_PATHS,
    ALLOWED_STORE_DUNDERS,
    BUILTIN_NAMES,
    DATA,
    DISPATCH_HOOKS,
    DUNDERS_ALLOWED,
    HOST_COPY_ATTRS,
    KERNEL_ATTRS,
    KERNEL_BUILTINS,
    KERNEL_DECORATORS,
    KERNEL_IMPORT_ROOTS,
    KERNEL_REFUSED_ATTRS,
    KERNEL_REFUSED_BUILTINS,
    LIBRARY_ATTRS,
    LIBRARY_METHODS,
    MATMUL_DUNDERS,
    MODULE_TREES,
    NAME,
    PRODUCT_NAMES,
    PY_INTERNAL_ATTRS,
    REFUSED_BUILTINS,
    REFUSED_SYNTAX,
    SYNTAX,
    UTILS,
    VALUE_ATTRS,
    WALK,
    _is_product,
    _kernel_siblings,
    _path_reason,
    _tree_covered,
    is_dunder,
)
from .scopes import CLASS, FUNCTION, MODULE, SCOPE_NODES, _bound_in, _decorated, _Scope


@dataclass(frozen=True)
class Finding:
    """One thing the file may not do: ``rule`` is a short stable kind, ``line``
    and ``col`` are 1-based (0 when unknown), ``detail`` says what, why and what
    to use instead."""

    rule: str
    line: int
    col: int
    detail: str

    def __str__(self) -> str:
        where = f"line {self.line}, col {self.col}" if self.col else f"line {self.line}"
        return f"{where} [{self.rule}]: {self.detail}"



def _format_lookups(text: str, depth: int = 0) -> str | None:
    """The first attribute or item that the format string ``text`` reads off its arguments and that
    starts with an underscore (``"{0.__class__}"``), or a reason it cannot be read; else None."""
    try:
        for _, field, spec, _ in string.Formatter().parse(text):
            if field:
                _, rest = formatter_field_name_split(field)
                for _, key in rest:
                    if not isinstance(key, int) and str(key).startswith("_"):
                        return f"{{{field}}} reads {key}"
            if spec and depth < 3 and "{" in spec:
                inner = _format_lookups(spec, depth + 1)
                if inner:
                    return inner
    except ValueError as e:
        return f"it does not parse ({e})"
    return None


def _text(root: str, attrs: list[str]) -> str:
    text = ".".join([root, *attrs])
    return text if len(text) <= 80 else text[:77] + "..."


class _Checker:
    """One pass over a parsed file; ``findings`` holds what it found."""

    def __init__(self, tree: ast.Module, lines: list[bytes] | None, extra_modules: set[str]):
        self.tree, self.lines = tree, lines
        self.extra = extra_modules
        self.findings: list[Finding] = []
        self.imports: dict[str, str] = {}    # local name -> dotted path it was imported as
        self.kernels: set[str] = set()       # names of @triton.jit functions and of their aliases
        self.aliases: set[str] = set()       # names assigned a kernel (``k = _a if c else _b``)
        self.defined: set[str] = set()       # every name the file binds anywhere
        self.own_classes: set[str] = set()   # names of the file's classes
        self.own_methods: set[str] = set()   # names of their instance methods (__init__ included)
        self._class_ok: set[int] = set()     # ids of Name nodes where an own class may appear
        self._unbound_ok: set[int] = set()   # ids of Base.method attributes called with the own self
        self._discarded: set[int] = set()    # ids of calls whose value is dropped or returned

    # -- reporting
    def flag(self, node: ast.AST | None, rule: str, detail: str) -> None:
        line = getattr(node, "lineno", 0) or 0
        col = getattr(node, "col_offset", -1)
        if col is not None and col >= 0 and self.lines and 0 < line <= len(self.lines):
            col = len(self.lines[line - 1][:col].decode("utf-8", "replace")) + 1
        else:
            col = 0
        self.findings.append(Finding(rule, line, col, detail))

    # -- first pass: imports, kernels, the file's own attributes
    def collect(self) -> None:
        nodes = list(ast.walk(self.tree))
        self._discarded = {id(n.value) for n in nodes if isinstance(n, (ast.Expr, ast.Return))}
        # where type(x) may stand: read for its name (type(x).__name__) or compared (type(x) is C)
        self._type_ok = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
        self._type_ok |= {id(c) for n in nodes if isinstance(n, ast.Compare) for c in (n.left, *n.comparators)}
        for node in nodes:
            if isinstance(node, SCOPE_NODES):
                self.defined |= _bound_in(node) | ({node.name} if hasattr(node, "name") else set())
            if isinstance(node, ast.Import):
                for a in node.names:
                    self._bind_import(node, a.asname or a.name.split(".")[0],
                                      a.name if a.asname else a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                for a in node.names:
                    if a.name == "*":
                        continue
                    if node.level:
                        base = UTILS if node.module == "utils" else "." * node.level + (node.module or "")
                        path = UTILS if (node.module is None and a.name == "utils") else f"{base}.{a.name}"
                    else:
                        path = f"{node.module}.{a.name}"
                    self._bind_import(node, a.asname or a.name, path)
        self.kernels |= {name for name, path in self.imports.items()
                         if path.startswith(UTILS + ".") and path.split(".", 1)[1] in policy.UTILS_KERNELS}
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and self._is_kernel(node):
                self.kernels.add(node.name)
        assigns = [n for n in nodes if isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) for t in n.targets)]
        for _ in range(8):  # kernel = _a if small else _b: the alias is a kernel name too
            grown = {t.id for n in assigns if self._kernel_parts(n.value) is not None for t in n.targets}
            if grown <= self.kernels:
                break
            self.kernels |= grown
            self.aliases |= grown
        top = [n for n in self.tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
               and isinstance(n.targets[0], ast.Name)]
        for _ in range(8):  # k2 = triton.autotune(...)(k): a kernel, launched as k2[grid](...)
            grown = {n.targets[0].id for n in top if self._wrapped_parts(n.value) is not None}
            if grown <= self.kernels:
                break
            self.kernels |= grown
        self.own = OwnTypes(self.tree, self._call_path, LIBRARY_ATTRS)
        self.module_names = ModuleNames(self.tree, self._resolve)
        self.defined |= _bound_in(self.tree) | set(self.imports)
        self._collect_classes(nodes)

    def _collect_classes(self, nodes) -> None:
        """The file's classes, their instance methods, and where a class name may stand:
        called, as an attribute's root, a base, a decorator, an annotation, the class of
        isinstance/issubclass/except, or compared (``type(x) is C``)."""
        for node in nodes:
            if isinstance(node, ast.ClassDef):
                self.own_classes.add(node.name)
                for st in node.body:
                    if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _decorated(
                            st, ("staticmethod", "classmethod")):
                        self.own_methods.add(st.name)
        ok: list[ast.AST] = []
        for node in nodes:
            if isinstance(node, ast.Call):
                ok.append(node.func)
                if isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass") \
                        and len(node.args) > 1:
                    ok.append(node.args[1])
            elif isinstance(node, ast.Attribute):
                ok.append(node.value)
            elif isinstance(node, ast.ClassDef):
                ok += node.bases + node.decorator_list
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                ok += node.decorator_list + ([node.returns] if node.returns else [])
            elif isinstance(node, ast.arg) and node.annotation is not None:
                ok.append(node.annotation)
            elif isinstance(node, ast.AnnAssign):
                ok.append(node.annotation)
            elif isinstance(node, ast.ExceptHandler) and node.type is not None:
                ok.append(node.type)
            elif isinstance(node, ast.Compare):
                ok += [node.left, *node.comparators]
        for root in ok:   # a tuple of classes, a subscripted annotation: every name inside
            for n in ast.walk(root) if isinstance(root, (ast.Tuple, ast.Subscript, ast.BinOp)) else [root]:
                if isinstance(n, ast.Name):
                    self._class_ok.add(id(n))

    def _bind_import(self, node: ast.AST, name: str, path: str) -> None:
        old = self.imports.get(name)
        if old is not None and old != path:
            self.flag(node, "patching", f"imports {path} as {name}, which already names {old}; "
                                        "give each import its own name")
        self.imports.setdefault(name, path)

    def _call_path(self, call: ast.Call) -> str | None:
        resolved = self._resolve(call.func)
        return ".".join(resolved) if resolved else None

    def _resolve(self, node: ast.AST) -> list[str] | None:
        """The dotted path of a Name/Attribute chain rooted at an imported name, else None."""
        attrs = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.imports:
            return self.imports[node.id].split(".") + attrs[::-1]
        return None

    def _type_of_name(self, name: str, scope: _Scope | None):
        """What owntypes can tell of the variable ``name`` here (the innermost scope that binds it)."""
        s = scope
        while s is not None:
            if name in s.types:
                return s.types[name]
            if name in s.names:
                return None
            s = s.parent
        return self.own.module_lookup(name)

    def _type_of(self, expr: ast.AST, scope: _Scope | None):
        return self.own.expr_type(expr, lambda n: self._type_of_name(n, scope))

    def _is_kernel_name(self, name: str, scope: _Scope | None) -> bool:
        """Whether ``name`` here means a kernel: a function's own variable does only if it is assigned one."""
        if scope is not None and scope.binds(name) and name not in self.imports:
            return name in self.aliases
        return name in self.kernels

    def _kernel_parts(self, expr: ast.AST) -> list[ast.AST] | None:
        """For an expression whose value is one of the file's kernels (``k``, ``a if c else b``),
        the parts that still need checking (the conditions); None for any other expression."""
        parts, stack = [], [expr]
        while stack:
            e = stack.pop()
            if isinstance(e, ast.IfExp):
                parts.append(e.test)
                stack += [e.body, e.orelse]
            elif not (isinstance(e, ast.Name) and e.id in self.kernels):
                return None
        return parts

    def _wrapped_parts(self, expr: ast.AST) -> list[ast.AST] | None:
        """For ``triton.autotune(...)(k)`` or ``triton.heuristics(...)(k)`` (nested or not) around one
        of the file's kernels, the decorators' arguments, which still need checking; else None."""
        parts: list[ast.AST] = []
        while (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Call) and len(expr.args) == 1
               and not expr.keywords and self._resolve(expr.func.func) in KERNEL_DECORATORS[1:]):
            parts += expr.func.args + [k.value for k in expr.func.keywords]
            expr = expr.args[0]
        if parts and isinstance(expr, ast.Name) and expr.id in self.kernels:
            return parts
        return None

    def _is_kernel(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if self._resolve(target) == ["triton", "jit"]:
                return True
        return False

    # -- path checks
    def covered(self, parts: list[str]) -> tuple[int, bool]:
        """(how many leading parts of a dotted path name something a kernel file may use; whether
        that prefix is a module, whose other names are then not values but unlisted paths)."""
        best, module = 0, False
        for i in range(2, len(parts) + 1):
            if ".".join(parts[:i]) in ALLOWED_PATHS:
                best = i
        if parts[0] == UTILS and len(parts) > 1 and parts[1] in policy.UTILS_NAMES:
            best = max(best, 2)
        for root in MODULE_TREES:
            r = root.split(".")
            if parts[:len(r)] == r and len(parts) > len(r):
                n, is_module = _tree_covered(root, parts[len(r):])
                if n and len(r) + n >= best:
                    best, module = len(r) + n, is_module
        if parts[0] == "__future__" or any(parts[:len(m.split("."))] == m.split(".") for m in self.extra):
            best, module = len(parts), False
        return best, module

    def importable(self, module: str) -> bool:
        return (module in ALLOWED_MODULES or module in self.extra
                or any(module.startswith(t + ".") for t in MODULE_TREES)
                or any(module.startswith(e + ".") for e in self.extra))

    # -- the grammar: every node and field against policy.SYNTAX, before any meaning is read
    def check_syntax(self) -> set[int]:
        """Flag every construct outside policy.SYNTAX; the ids of the refused nodes (not walked further)."""
        refused: set[int] = set()
        stack: list[ast.AST] = [self.tree]
        while stack:
            node = stack.pop()
            kind = type(node).__name__
            fields = SYNTAX.get(kind)
            if fields is None:
                words, why = REFUSED_SYNTAX.get(kind, (f"the construct ast.{kind}", "the check does not know it "
                                                       "(a newer Python's syntax)"))
                self.flag(node, "syntax-refused", f"{words} has no place in a kernel file: {why}")
                refused.add(id(node))
                continue
            for field in node._fields:
                value = getattr(node, field, None)
                rule = fields.get(field, f"the field {field} of ast.{kind} (a newer Python's syntax)")
                if rule == WALK:
                    stack += [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, ast.AST)]
                elif rule == NAME:
                    for name in value if isinstance(value, list) else [value]:
                        self._check_identifier(node, kind, field, name)
                elif rule != DATA and value:
                    self.flag(node, "syntax-refused", f"{rule} has no place in a kernel file")
        return refused

    def _check_identifier(self, node: ast.AST, kind: str, field: str, name) -> None:
        """A dunder identifier outside Name and Attribute (their visitors give the reasons): a parameter,
        a keyword, an import, a def, a class, an except target, a global."""
        if kind in ("Name", "Attribute") or not isinstance(name, str):
            return
        for part in name.split("."):
            if is_dunder(part) and part not in DUNDERS_ALLOWED.get((kind, field), ()):
                self.flag(node, "introspection", f"uses the name {part}: names with double underscores on both "
                                                 "sides belong to the interpreter; a kernel file may define "
                                                 "only the ordinary methods of a class (__init__, __repr__, "
                                                 "__eq__, __len__, ...)")

    # -- the walk
    def run(self) -> None:
        refused = self.check_syntax()
        self.collect()
        stack: list[tuple[ast.AST, bool, _Scope | None, int]] = [(self.tree, False, None, MODULE)]
        handlers: dict[type, object] = {}
        ctx: tuple = ()

        def push(n: ast.AST) -> None:  # visit ``n`` in the context of the node being visited
            stack.append((n, *ctx))

        while stack:
            node, *rest = stack.pop()
            if id(node) in refused:
                continue
            ctx = tuple(rest)
            kind = type(node)
            if kind not in handlers:
                handlers[kind] = getattr(self, "visit_" + kind.__name__, None)
            handler = handlers[kind]
            if handler is not None:
                handler(node, *ctx, push, stack)
            else:
                for field, rule in SYNTAX[kind.__name__].items():
                    value = getattr(node, field, None) if rule == WALK else None
                    if isinstance(value, ast.AST):
                        stack.append((value, *ctx))
                    elif isinstance(value, list):
                        stack.extend((v, *ctx) for v in value if isinstance(v, ast.AST))

    # Each visit_X checks its node and pushes the children that still need visiting.

    def visit_Import(self, node, in_kernel, scope, level, push, stack):
        for a in node.names:
            if not self.importable(a.name):
                self._flag_import(node, a.name)

    def visit_ImportFrom(self, node, in_kernel, scope, level, push, stack):
        if node.level:
            siblings = {node.module or ""} | {a.name for a in node.names}
            if node.level > 1 or siblings & _kernel_siblings():
                self.flag(node, "cross-file", f"imports {'.' * node.level}{node.module or ''} "
                          f"({', '.join(a.name for a in node.names)}): each kernel file must stand alone; "
                          "copy what you need into this file")
                return
            for a in node.names:
                ok = (node.module == "utils" and a.name in policy.UTILS_NAMES) or (node.module is None
                                                                          and a.name == "utils")
                if not ok:
                    self.flag(node, "import", f"imports {a.name} from .{node.module or ''}: from the "
                              "package a kernel file may import only the helpers .utils defines ("
                              + ", ".join(sorted(policy.UTILS_NAMES)[:8]) + ", ...), one by one")
            return
        module = node.module or ""
        if module == "__future__":
            return
        if not self.importable(module):
            self._flag_import(node, module)
            return
        for a in node.names:
            path = f"{module}.{a.name}"
            if a.name == "*":
                self.flag(node, "import", f"imports * from {module}: import the names you use one by one, "
                                          "so that each can be checked")
            elif not self.importable(path) and self.covered(path.split("."))[0] < len(path.split(".")):
                rule, why = _path_reason(path)
                self.flag(node, rule, f"imports {path}, which {why}")

    def _flag_import(self, node, module: str) -> None:
        top = module.split(".")[0]
        if module.startswith("torch.") and _is_product(module):
            rule, why = "torch-product", "holds PyTorch's products and layers; the product must come from " \
                                         "your @triton.jit kernel"
        elif top in ("os", "sys", "subprocess", "ctypes", "multiprocessing", "signal", "shutil", "pathlib",
                     "io", "importlib", "builtins", "pickle", "socket", "threading"):
            rule, why = "import", "reaches processes, files, memory or the interpreter, which are the " \
                                  "grader's business"
        else:
            rule, why = "import", "is not on the list of modules a kernel file may import"
        self.flag(node, rule, f"imports {module}, which {why}. A kernel file may import torch, triton, "
                              "triton.language, math, functools, typing, dataclasses, itertools, "
                              "collections, enum, warnings, os (os.environ.get only) and helpers from .utils")

    def visit_FunctionDef(self, node, in_kernel, scope, level, push, stack):
        self._check_binding(node, node.name, level)
        if node.name in DISPATCH_HOOKS:
            self.flag(node, "patching", f"defines {node.name}, which intercepts PyTorch operations; "
                                        "a kernel file has no use for it")
        for d in node.decorator_list:
            push(d)
        self._push_arguments(node.args, push)
        if node.returns is not None:
            push(node.returns)
        params = node.args.posonlyargs + node.args.args
        method = level == CLASS and params and not _decorated(node, ("staticmethod",))
        inner = _Scope(_bound_in(node), scope, params[0].arg if method else None,
                       params[0].arg if method and _decorated(node, ("classmethod",)) else None)
        inner.types = self.own.scope_types(node, lambda n: self._type_of_name(n, scope))
        kernel = self._is_kernel(node)
        if kernel:
            others = [d for d in node.decorator_list
                      if self._resolve(d.func if isinstance(d, ast.Call) else d) not in KERNEL_DECORATORS]
            if others or level != MODULE:
                self.flag(others[0] if others else node, "jit-call",
                          f"kernel {node.name} must be defined at the top level of the file with only triton.jit, "
                          "triton.autotune and triton.heuristics as decorators (another decorator or a class "
                          "receives the kernel and could run it as plain Python)")
        for s in node.body:   # a def inside a kernel is kernel code
            stack.append((s, kernel or in_kernel, inner, FUNCTION))

    visit_AsyncFunctionDef = visit_FunctionDef

    def _push_arguments(self, args: ast.arguments, push) -> None:
        for d in args.defaults + [d for d in args.kw_defaults if d is not None]:
            push(d)
        for a in args.posonlyargs + args.args + args.kwonlyargs + [x for x in (args.vararg, args.kwarg) if x]:
            if a.arg in self.imports:
                self.flag(a, "patching", f"parameter {a.arg} hides the imported {self.imports[a.arg]}; "
                                         "rename the parameter")
            if a.annotation is not None:
                push(a.annotation)

    def visit_Lambda(self, node, in_kernel, scope, level, push, stack):
        self._push_arguments(node.args, push)
        inner = _Scope(_bound_in(node), scope)
        inner.types = self.own.scope_types(node, lambda n: self._type_of_name(n, scope))
        stack.append((node.body, in_kernel, inner, FUNCTION))   # a lambda in a kernel is kernel code

    def visit_ClassDef(self, node, in_kernel, scope, level, push, stack):
        self._check_binding(node, node.name, level)
        for b in node.bases:
            if self._resolve(b) == ["torch", "Tensor"]:
                self.flag(b, "patching", "subclasses torch.Tensor, which can change what PyTorch operations "
                                         "do; a kernel file has no use for it")
        for n in node.decorator_list + node.bases + [k.value for k in node.keywords]:
            push(n)
        for s in node.body:
            stack.append((s, False, scope, CLASS))

    def _comprehension(self, node, in_kernel, scope, level, push, stack):
        inner = _Scope(_bound_in(node), scope)
        inner.types = self.own.comprehension_types(node, lambda n: self._type_of_name(n, scope))
        for i, g in enumerate(node.generators):
            if i == 0:
                push(g.iter)
            else:
                stack.append((g.iter, in_kernel, inner, FUNCTION))
            stack.append((g.target, in_kernel, inner, FUNCTION))
            for c in g.ifs:
                stack.append((c, in_kernel, inner, FUNCTION))
        for part in ("elt", "key", "value"):
            if hasattr(node, part):
                stack.append((getattr(node, part), in_kernel, inner, FUNCTION))

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def _check_binding(self, node, name: str, level: int) -> None:
        if name in self.imports:
            self.flag(node, "patching", f"rebinds {name}, which this file imports as {self.imports[name]}: "
                                        "a local name (a `def jit`, `tl = ...`) would change what the name "
                                        "means; rename it")
        elif level == MODULE and (name in REFUSED_BUILTINS or (name in BUILTIN_NAMES
                                                                and name not in ALLOWED_BUILTINS)):
            self.flag(node, "patching", f"names something {name}, which hides the builtin {name}; rename it")

    def visit_ExceptHandler(self, node, in_kernel, scope, level, push, stack):
        if node.name:
            self._check_binding(node, node.name, level)
        for child in ast.iter_child_nodes(node):
            push(child)

    def visit_Global(self, node, in_kernel, scope, level, push, stack):
        for name in node.names:
            self._check_binding(node, name, MODULE)

    visit_Nonlocal = visit_Global

    def visit_Name(self, node, in_kernel, scope, level, push, stack):
        name = node.id
        if not isinstance(node.ctx, ast.Load):
            if name.startswith("__") and name.endswith("__") and name not in ALLOWED_STORE_DUNDERS:
                self.flag(node, "patching", f"assigns {name}, a name the interpreter gives meaning to "
                                            "(__builtins__ changes what every builtin is); rename it")
            elif not (level == FUNCTION and name not in self.imports):
                self._check_binding(node, name, level)
            return
        if name in self.own_classes and id(node) not in self._class_ok and self._class_itself(node, scope):
            self.flag(node, "patching", f"uses the class {name} as a value (an alias, an argument): make "
                                        f"instances with {name}(...), read its constants as {name}.NAME; its methods "
                                        "may be called only on instances")
        if not in_kernel and self._is_kernel_name(name, scope):
            # A kernel passed around (to a launcher of the file's own, into a list, to autotune's function
            # form) is ordinary host code: no value reaches the host on a CPU run (the wrapper holds meta
            # tensors) and a GPU's JITFunction cannot be called as Python. A direct call is visit_Call's.
            return
        elif name in self.imports:
            self._check_use(node, self.imports[name].split("."), in_kernel, name)
        elif scope is not None and scope.binds(name):
            return
        elif in_kernel and name in self.module_names.bindings:
            self._check_kernel_global(node)
        elif in_kernel and self._kernel_builtin(name):
            self._flag_kernel_builtin(node, name)
        elif name in REFUSED_BUILTINS:
            rule, why = REFUSED_BUILTINS[name]
            self.flag(node, rule, f"uses {name}, which {why}")
        elif name.startswith("__") and name.endswith("__") and name not in ALLOWED_NAME_DUNDERS:
            self.flag(node, "introspection", f"uses {name}: module internals are not for kernel files")
        elif name in BUILTIN_NAMES and name not in ALLOWED_BUILTINS:
            self.flag(node, "builtin", f"uses the builtin {name}, which is not on the list a kernel file may "
                                       "use (len, range, min, max, isinstance, print, exceptions, ...)")

    def _check_use(self, node, parts: list[str], in_kernel: bool, text_root: str,
                   attrs: list[str] | None = None) -> None:
        """Check an imported name ``text_root`` (imported as the path ``parts``) followed by ``attrs``."""
        attrs = attrs or []
        # __init__ of a library's class (tl.tensor.__init__(obj, ...)) would run on any object as self.
        dunders = [a for a in attrs if a.startswith("__") and a.endswith("__")
                   and (a not in ALLOWED_DUNDERS or a == "__init__")]
        if set(dunders) & MATMUL_DUNDERS:
            self.flag(node, "torch-product", f"uses {_text(text_root, attrs)}, the @ operator by another name: "
                                             "a PyTorch matrix product; use tl.dot in your @triton.jit kernel")
            return
        if dunders:
            self.flag(node, "introspection", f"uses {_text(text_root, attrs)}: {dunders[0]} and other dunder "
                                             "attributes are not allowed in a kernel file; use public names")
            return
        full = parts + attrs
        got, is_module = self.covered(full)
        if got < len(parts) or (got < len(full) and is_module):
            text, path = _text(text_root, attrs), ".".join(full)
            if not attrs and (self.importable(path) or parts == [UTILS]):
                self.flag(node, "module-value", f"uses the module {text} as a value; use its functions "
                                                "by name (torch.empty(...), tl.load(...))")
            else:
                rule, why = _path_reason(path)
                path = path.replace(UTILS, ".utils")
                shown = text if text == path else f"{text} ({path})"
                self.flag(node, rule, f"uses {shown}, which {why}")
            return
        if in_kernel and parts[0] not in KERNEL_IMPORT_ROOTS and not any(
                full[:len(m.split("."))] == m.split(".") for m in self.extra):
            self.flag(node, "not-allowed", f"uses {_text(text_root, attrs)} in a @triton.jit function, which may "
                                           "use the kernel language (tl.*), math on constexprs and other "
                                           f"@triton.jit functions; {parts[0]} is host Python, which the CPU "
                                           "interpreter would run and the GPU compiler refuses or folds away")
            return
        for attr in full[got:]:
            self._check_attr(node, attr, in_kernel, ".".join(full[:got]))

    def _check_attr(self, node, attr: str, in_kernel: bool, owner: str = "", store: bool = False,
                    owner_type=None) -> None:
        """Check one attribute of a value (not of a module); ``owner_type`` is what owntypes can tell
        of the value (the file's class whose instance or class it is), else None."""
        if attr in MATMUL_DUNDERS:
            self.flag(node, "torch-product", f"uses .{attr}, the @ operator by another name: a PyTorch matrix "
                                             "product; use tl.dot in your @triton.jit kernel")
            return
        if attr.startswith("__") and attr.endswith("__"):
            if attr not in ALLOWED_DUNDERS or store or in_kernel:
                self.flag(node, "introspection", f"uses .{attr}: introspection and dunder attributes are not "
                                                 "allowed in a kernel file; use the object's public API")
            return
        if store:
            if attr in LIBRARY_METHODS:
                self.flag(node, "patching", f"assigns .{attr}, a method that torch and Triton objects have "
                                            "(monkeypatching, if self were one); name your field differently")
            return
        if attr in PY_INTERNAL_ATTRS:
            self.flag(node, "introspection", f"uses .{attr}, which reaches the interpreter's internals (frames, "
                                             "code objects, classes); a kernel file has no use for it")
            return
        if in_kernel:
            self._check_kernel_attr(node, attr)
            return
        if attr in VALUE_ATTRS or self.own.has_attr(owner_type, attr):
            return
        of = f" of {owner}" if owner else ""
        declared = self.own.classes_declaring(attr)
        if declared:
            self.flag(node, "attribute", f"uses .{attr}{of} on a value that the check cannot tie to your class "
                                         f"{declared[0]}, which declares it: an attribute of your classes is "
                                         f"accepted only on their instances. Build the value with {declared[0]}"
                                         f"(...) in this function, or annotate the variable or parameter "
                                         f"(cfg: {declared[0]}) or the function that returns it (-> {declared[0]})")
            return
        if attr in PRODUCT_NAMES or attr.startswith("conv") or "mm" in attr.split("_"):
            self.flag(node, "torch-product", f"uses .{attr}{of}, which computes on tensor data in PyTorch; the "
                                             "product and reductions must come from your @triton.jit kernel")
        elif attr in HOST_COPY_ATTRS:
            self.flag(node, "attribute", f"uses .{attr}{of}, which copies or exposes tensor memory outside "
                                         "PyTorch and Triton; keep data in tensors and read it in your kernel")
        elif attr in KERNEL_REFUSED_ATTRS:
            self.flag(node, "attribute", f"uses .{attr}{of}: .{attr} {KERNEL_REFUSED_ATTRS[attr]}")
        else:
            self.flag(node, "attribute", f"uses .{attr}{of}, which is not on the list of attributes a kernel "
                                         "file may use outside a @triton.jit function (shape, stride, dtype, "
                                         "device, views, .contiguous(), .to(), .crow_indices(), .values(), "
                                         "dict/list/str methods, your own classes' attributes)")

    def _check_kernel_attr(self, node, attr: str) -> None:
        """Inside a @triton.jit function every value is one of Triton's language values: an attribute
        must be one of theirs (policy.KERNEL_ATTRS), whatever the value is."""
        if attr in KERNEL_ATTRS:
            return
        why = KERNEL_REFUSED_ATTRS.get(attr) or (
            "is not an attribute of Triton's language values (a tensor, a dtype, a constexpr, a tensor "
            "descriptor): use theirs (.to(), .reshape(), .trans(), .shape, .dtype, .value, ...) and the tl.* "
            "functions")
        self.flag(node, "attribute", f"uses .{attr} in a @triton.jit function: .{attr} {why}")

    def _check_kernel_global(self, node: ast.Name) -> None:
        """A global read in a kernel: another kernel, or a constant (grader/staticcheck/constants.py)."""
        name = node.id
        names = self.module_names
        if name in self.kernels or name not in names.bindings or names.is_constant_name(name):
            return
        if name not in names.defs and all(self._language_path(v) for v in names.bindings[name]):
            return   # _dot = tl.dot: a name of the kernel language, which the GPU compiler reads too
        kind = names.defs.get(name)
        if kind:
            self.flag(node, "kernel-global", f"uses the {kind} {name} in a @triton.jit function, which may call "
                                             "only other @triton.jit functions and tl.*: Triton's compiler refuses "
                                             f"a plain Python {kind} there (the CPU interpreter would run it as "
                                             f"Python); make {name} a @triton.jit function or inline it")
        else:
            self.flag(node, "kernel-global", f"reads the global {name} in a @triton.jit function, but {name} is "
                                             "not a constant (a number, a bool, a string or a dtype, or "
                                             "tl.constexpr of one, assigned once at the top of the file): "
                                             "Triton's compiler reads only such globals in a kernel; pass the "
                                             "value as an argument")

    def _language_path(self, value: ast.AST | None) -> bool:
        path = self._resolve(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
        return path is not None and path[:2] == ["triton", "language"] and self.covered(path)[0] == len(path)

    def _check_constexpr_call(self, node: ast.Call) -> None:
        """``tl.constexpr(...)`` outside a kernel holds a constant (constants.py), never a callable, a module
        or what the environment says."""
        if len(node.args) == 1 and not node.keywords and self.module_names.is_constant(node.args[0]):
            return
        reads_env = any(isinstance(n, (ast.Name, ast.Attribute)) and (self._resolve(n) or [""])[0] == "os"
                        for n in ast.walk(node))
        what = ("reads the environment, which differs between the CPU interpreter and the GPU compiler"
                if reads_env else "is not a constant")
        self.flag(node, "kernel-global", f"makes a tl.constexpr of something that {what}: a tl.constexpr global "
                                         "must be a number, a bool, a string or a dtype (tl.float16), or "
                                         "arithmetic on those (tl.constexpr(12582912.0))")

    def _class_itself(self, expr: ast.AST, scope: _Scope | None) -> str | None:
        """The text of ``expr`` if it is one of the file's classes itself (its name, a
        classmethod's ``cls``, ``type(x)``), not an instance; else None."""
        if isinstance(expr, ast.Name):
            local = scope is not None and scope.binds(expr.id)
            if expr.id in self.own_classes and not local:
                return expr.id
            s = scope
            while s is not None:
                if s.cls_name == expr.id:
                    return expr.id
                s = s.parent
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "type" \
                and not (scope is not None and scope.binds("type")):
            return "type(...)"
        return None

    def _check_unbound(self, node: ast.AST, owner: ast.AST, method: str, scope: _Scope | None) -> None:
        """Refuse a method of the file's own class taken from the class itself: called with
        another object as ``self``, its ``self.x = v`` would store on that object."""
        if method not in self.own_methods or id(node) in self._unbound_ok:
            return
        text = self._class_itself(owner, scope)
        if text is not None:
            self.flag(node, "patching", f"uses {text}.{method}, a method of this file's class taken from the "
                                        "class itself: called with another object as self, it would change that "
                                        "object (monkeypatching); call it on an instance (obj.method(...))")

    def visit_Attribute(self, node, in_kernel, scope, level, push, stack):
        attrs, root = [], node
        while isinstance(root, ast.Attribute):
            attrs.append(root.attr)
            inner = root
            root = root.value
        attrs.reverse()
        store = not isinstance(node.ctx, ast.Load)
        self._check_unbound(inner, root, attrs[0], scope)
        if isinstance(root, ast.Name) and not in_kernel and not store and self._is_kernel_name(root.id, scope):
            for attr in attrs:
                self._check_attr(node, attr, False, root.id)
            return
        if isinstance(root, ast.Name) and root.id in self.imports:
            if store:
                self.flag(node, "patching", f"assigns to {_text(root.id, attrs)}: changing modules or their "
                                            "objects (monkeypatching) is not allowed")
                return
            self._check_use(node, self.imports[root.id].split("."), in_kernel, root.id, attrs)
            return
        own = (isinstance(root, ast.Name) and scope is not None and root.id == scope.self_name
               and len(attrs) == 1)
        if store and not own:
            self.flag(node, "patching", f"assigns to {_text(getattr(root, 'id', '(...)'), attrs)}: assign "
                                        "attributes only on self in your own classes' methods; changing other "
                                        "objects is monkeypatching")
            store = False  # reported once
        owner = ""
        if isinstance(root, ast.Name) and root.id not in self.defined and root.id not in BUILTIN_NAMES:
            owner = f"{root.id} (which this file never imports or defines)"
        owner_type = None if in_kernel else self._type_of(root, scope)
        for i, attr in enumerate(attrs):
            self._check_attr(node, attr, in_kernel, owner, store=store and i == len(attrs) - 1,
                             owner_type=owner_type)
            owner_type = self.own.attr_type(owner_type, attr)
        push(root)

    def visit_Subscript(self, node, in_kernel, scope, level, push, stack):
        if isinstance(node.value, ast.Name) and self._is_kernel_name(node.value.id, scope):
            push(node.slice)  # kernel[grid] is how kernels are launched
            return
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and is_dunder(key.value):
            self.flag(node, "introspection", f"reads the item {key.value!r}: names with double underscores belong "
                                             "to the interpreter (a namespace's __builtins__)")
        if not isinstance(node.ctx, ast.Load) and self._resolve(node.value) is not None:
            self.flag(node, "patching", "assigns into a module's object (monkeypatching) is not allowed")
        push(node.value)
        push(node.slice)

    def visit_Call(self, node, in_kernel, scope, level, push, stack):
        func = node.func
        if (not in_kernel and isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name)
                and self._is_kernel_name(func.value.id, scope) and id(node) not in self._discarded):
            self.flag(node, "jit-call", f"keeps what the launch {func.value.id}[grid](...) returns, Triton's "
                                        "compiled kernel: launched again (compiled[grid](...)) it runs outside "
                                        "the launches the grader records; launch with "
                                        f"{func.value.id}[grid](...) on every call, as a statement of its own")
        if not in_kernel and isinstance(func, ast.Name) and self._is_kernel_name(func.id, scope):
            self.flag(node, "jit-call", f"calls the @triton.jit function {func.id} as a Python function outside "
                                        f"a kernel: launch it with {func.id}[grid](...)")
        local = scope is not None and isinstance(func, ast.Name) and scope.binds(func.id)
        if in_kernel and (local or not isinstance(func, (ast.Name, ast.Attribute))):
            what = f"its parameter or variable {func.id}" if isinstance(func, ast.Name) else "a computed value"
            self.flag(node, "jit-call", f"calls {what} in a @triton.jit function: what a launch passes in (a "
                                        "Python function) would run as plain Python in the CPU interpreter; call "
                                        "tl.* and @triton.jit functions by name, and choose among them with a "
                                        "tl.constexpr flag (if MODE == 1: ...)")
        if in_kernel and isinstance(func, ast.Name) and not local and self._kernel_builtin(func.id):
            self._flag_kernel_builtin(func, func.id)
            for a in node.args + [k.value for k in node.keywords]:
                push(a)
            return
        if not in_kernel and self._resolve(func) == ["triton", "language", "constexpr"]:
            self._check_constexpr_call(node)
        if (isinstance(func, ast.Attribute) and node.args and isinstance(node.args[0], ast.Name)
                and scope is not None and scope.self_name and scope.cls_name is None
                and node.args[0].id == scope.self_name):
            self._unbound_ok.add(id(func))   # Base.__init__(self, ...): the method's own self
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "type":
            self.flag(node, "introspection", "calls what type(...) returns, which builds objects of any class "
                                             "(functions, code, modules) by the back door; call your classes "
                                             "by name")
        if isinstance(func, ast.Name) and not local and func.id == "type" and len(node.args) == 1 \
                and not node.keywords and id(node) not in self._type_ok:
            self.flag(node, "introspection", "uses type(...) as a value: a kernel file may read type(x).__name__ "
                                             "or compare (type(x) is C); use isinstance for the rest")
        if isinstance(func, ast.Attribute) and func.attr in ("format", "format_map"):
            recv = func.value
            if isinstance(recv, ast.Constant) and isinstance(recv.value, str):
                bad = _format_lookups(recv.value)
                if bad:
                    self.flag(node, "introspection", f"formats a string whose field {bad}: a format field may "
                                                     "read public attributes and items only; use an f-string")
            else:
                self.flag(node, "introspection", f"calls .{func.attr} on something other than a string literal: "
                                                 "its fields can read any attribute (\"{0.__class__}\"), which the "
                                                 "check can see only in a literal; use an f-string or "
                                                 "\"literal\".format(...)")
        if isinstance(func, ast.Name) and not local and func.id == "type" and len(node.args) + len(node.keywords) > 1:
            self.flag(node, "patching", "calls type() with several arguments, which builds a class at run time; "
                                        "write a class statement so that it can be checked")
        if isinstance(func, ast.Name) and not local and func.id in ("getattr", "hasattr") \
                and func.id not in self.imports:
            obj = node.args[0] if node.args else None
            name = node.args[1] if len(node.args) > 1 else None
            literal = isinstance(name, ast.Constant) and isinstance(name.value, str)
            if func.id == "hasattr":  # only answers yes or no: a module may be asked
                if obj is not None and self._resolve(obj) is None:
                    push(obj)
                for a in node.args[1:] + [k.value for k in node.keywords]:
                    push(a)
                return
            if not literal or node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                self.flag(node, "introspection", "calls getattr with a computed name; write the attribute out "
                                                 "(x.shape) so that it can be checked")
            elif obj is not None:
                resolved = self._resolve(obj)
                if resolved is not None:
                    self._check_use(node, resolved, in_kernel, ".".join(resolved), [name.value])
                else:
                    self._check_unbound(node, obj, name.value, scope)
                    self._check_attr(node, name.value, in_kernel, owner_type=self._type_of(obj, scope))
                    push(obj)
            for a in node.args[2:]:
                push(a)
            return
        push(func)
        for a in node.args:
            push(a)
        for k in node.keywords:
            push(k.value)

    def _kernel_builtin(self, name: str) -> bool:
        """Whether ``name`` (not bound in the kernel) is a builtin that a kernel may not use."""
        return (name in BUILTIN_NAMES and name not in KERNEL_BUILTINS and name not in self.imports
                and name not in self.module_names.bindings)

    def _flag_kernel_builtin(self, node, name: str) -> None:
        if name in KERNEL_REFUSED_BUILTINS:
            self.flag(node, "introspection", f"uses {name} in a @triton.jit function: {name} "
                                             f"{KERNEL_REFUSED_BUILTINS[name]}")
        elif name in REFUSED_BUILTINS:
            rule, why = REFUSED_BUILTINS[name]
            self.flag(node, rule, f"uses {name}, which {why}")
        else:
            self.flag(node, "builtin", f"uses the builtin {name} in a @triton.jit function, where Triton's "
                                       f"compiler knows only {', '.join(sorted(KERNEL_BUILTINS))}: use the "
                                       "tl.* functions (tl.abs, tl.sum, ...) and the tensor's methods")

    def visit_Assign(self, node, in_kernel, scope, level, push, stack):
        parts = self._kernel_parts(node.value)
        if parts is None and level == MODULE and len(node.targets) == 1:
            parts = self._wrapped_parts(node.value)
        if parts is None or level == CLASS or not all(isinstance(t, ast.Name) for t in node.targets):
            parts = [node.value]
        for n in node.targets + parts:
            push(n)

    def visit_BinOp(self, node, in_kernel, scope, level, push, stack):
        if isinstance(node.op, ast.MatMult) and not in_kernel:
            self.flag(node, "torch-product", "uses @ outside a @triton.jit function, where it is a PyTorch "
                                             "matrix product; the product must come from your kernel (tl.dot, "
                                             "or @ inside the kernel)")
        push(node.left)
        push(node.right)

    def visit_AugAssign(self, node, in_kernel, scope, level, push, stack):
        if isinstance(node.op, ast.MatMult) and not in_kernel:
            self.flag(node, "torch-product", "uses @= outside a @triton.jit function, where it is a PyTorch "
                                             "matrix product; the product must come from your kernel")
        push(node.target)
        push(node.value)
