"""The file's own classes, and which expressions the static check can tie to them.

An attribute that a class of the file declares (``cfg.BLOCK_M``) is accepted on a
value only where the check can tell that the value is that class's instance or the
class itself, never on any object: ``class C: start = 0`` must not unlock
``thread.start``. A value is tied to a class by what the file writes, read without
running it:

- ``self`` and ``cls`` in the class's methods, and the class's name;
- a call of the class (``C(...)``), of a function or method of the file annotated
  ``-> C`` or whose every ``return`` gives a C (``return cls(...)``);
- an annotation: a parameter ``c: C``, a variable ``c: C = ...``, a class field
  ``cfg: C``, with ``Optional[C]``, ``"C"`` and ``C | None``; a container
  annotated with C as its items (``dict[tuple, C]``, ``list[C]``) gives C through
  ``d[k]``, ``.get``, ``.setdefault``, ``.pop`` and ``for c in d``;
- a variable every assignment of which gives a C (``None`` aside); ``a or b`` and
  ``a if t else b`` whose parts all give a C.

An annotation is the student's word, not a proof: a parameter annotated ``C`` may
hold anything. That is enough here because the names a class may declare and have
accepted this way exclude every attribute of PyTorch tensors, Triton's kernel
objects and the interpreter's frames and generators (``policy.LIBRARY_ATTRS``),
and the other rules keep modules, the builtins and frames out of a kernel file's
values in the first place.
"""

from __future__ import annotations

import ast

# A type: ("inst", C) an instance of the file's class C; ("class", C) the class itself;
# ("items", C) a container whose items are C's. None: unknown.
Type = tuple[str, str]
CONTAINERS = {"dict", "Dict", "list", "List", "tuple", "Tuple", "set", "Set", "frozenset", "FrozenSet",
              "Sequence", "MutableSequence", "Mapping", "MutableMapping", "Iterable", "Iterator", "deque",
              "defaultdict", "OrderedDict", "Collection"}
ITEM_METHODS = {"get", "pop", "setdefault"}
OPTIONAL = {"Optional", "Union", "Final", "ClassVar"}


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class OwnTypes:
    """What one file's classes declare; ``call_path`` resolves a call to its dotted import path."""

    def __init__(self, tree: ast.Module, call_path, library_attrs: set[str]):
        self.attrs: dict[str, set[str]] = {}          # class -> attribute names it declares
        self.attr_types: dict[str, dict[str, Type]] = {}
        self.bases: dict[str, list[str]] = {}         # class -> its own (the file's) base classes
        self.methods: dict[str, dict[str, ast.FunctionDef]] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.method_class: dict[int, str] = {}        # id(method node) -> its class
        self._returns: dict[int, Type | None] = {}
        self._library = library_attrs
        body = tree.body
        classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for c in classes:
            self.attrs[c.name], self.attr_types[c.name], self.methods[c.name] = set(), {}, {}
        for n in body:
            if isinstance(n, ast.FunctionDef):
                self.functions[n.name] = n
            elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                    and isinstance(n.value, ast.Call) and call_path(n.value) in ("collections.namedtuple",
                                                                                  "typing.NamedTuple"):
                name = n.targets[0].id   # P = namedtuple("P", "a b"): a class with the fields a, b
                self.attrs[name], self.attr_types[name], self.methods[name], self.bases[name] = set(), {}, {}, []
                for arg in n.value.args[1:2]:
                    for c in ast.walk(arg):
                        if isinstance(c, ast.Constant) and isinstance(c.value, str):
                            self.attrs[name] |= set(c.value.replace(",", " ").split())
        for c in classes:
            self.bases[c.name] = [b.id for b in c.bases if isinstance(b, ast.Name) and b.id in self.attrs]
            for s in c.body:
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.attrs[c.name].add(s.name)
                    if isinstance(s, ast.FunctionDef):
                        self.methods[c.name][s.name] = s
                        self.method_class[id(s)] = c.name
                        self._collect_self_stores(c.name, s)
                elif isinstance(s, ast.Assign):
                    for t in s.targets:
                        self.attrs[c.name] |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
                    if len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
                        self._set_attr_type(c.name, s.targets[0].id, self.expr_type(s.value, self._class_names))
                elif isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
                    self.attrs[c.name].add(s.target.id)
                    self._set_attr_type(c.name, s.target.id, self.annotation(s.annotation))
        for name in self.attrs:   # never a name that torch's or Triton's objects, or frames, have
            self.attrs[name] = {a for a in self.attrs[name] if a not in library_attrs and not a.startswith("__")}
        self.module_types: dict[str, Type | None] = {}
        for _ in range(2):   # the second round reads functions' returns with the first round's globals
            self._returns.clear()
            self.module_types = self.scope_types(tree, lambda n: None)

    def module_lookup(self, name: str) -> Type | None:
        return self.module_types.get(name)

    def _class_names(self, name: str) -> Type | None:
        """Names while the classes are read: a class field or ``self.x = C(...)`` may name a class."""
        return ("class", name) if name in self.attrs else None

    def _set_attr_type(self, cls: str, attr: str, t: Type | None) -> None:
        if t is not None:
            self.attr_types[cls][attr] = t

    def _collect_self_stores(self, cls: str, fn: ast.FunctionDef) -> None:
        params = fn.args.posonlyargs + fn.args.args
        if not params or any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
            return
        me = params[0].arg
        for n in ast.walk(fn):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(
                n, (ast.AnnAssign, ast.AugAssign)) else []
            for t in targets:
                for a in ast.walk(t):
                    if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == me:
                        self.attrs[cls].add(a.attr)
                        if isinstance(n, ast.AnnAssign):
                            self._set_attr_type(cls, a.attr, self.annotation(n.annotation))
                        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and t is a:
                            self._set_attr_type(cls, a.attr, self.expr_type(n.value, self._class_names))

    # -- what a class has
    def _mro(self, cls: str) -> list[str]:
        seen, order, todo = set(), [], [cls]
        while todo:
            c = todo.pop(0)
            if c not in seen and c in self.attrs:
                seen.add(c)
                order.append(c)
                todo += self.bases.get(c, [])
        return order

    def has_attr(self, t: Type | None, attr: str) -> bool:
        return t is not None and t[0] in ("inst", "class") and any(attr in self.attrs[c] for c in self._mro(t[1]))

    def classes_declaring(self, attr: str) -> list[str]:
        return sorted(c for c, names in self.attrs.items() if attr in names)

    def attr_type(self, t: Type | None, attr: str) -> Type | None:
        if t is None or t[0] not in ("inst", "class"):
            return None
        for c in self._mro(t[1]):
            if attr in self.attr_types[c]:
                return self.attr_types[c][attr]
            if attr in self.methods[c]:
                return ("method", f"{c}.{attr}")
        return None

    # -- annotations
    def annotation(self, ann: ast.AST | None) -> Type | None:
        if ann is None:
            return None
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                ann = ast.parse(ann.value, mode="eval").body
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return None
        if isinstance(ann, ast.Name) and ann.id in self.attrs:
            return ("inst", ann.id)
        if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):   # C | None
            parts = [self.annotation(p) for p in (ann.left, ann.right)
                     if not (isinstance(p, ast.Constant) and p.value is None)]
            return parts[0] if len(parts) == 1 else None
        if isinstance(ann, ast.Subscript):
            outer = _last_name(ann.value)
            args = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            args = [a for a in args if not (isinstance(a, ast.Constant) and a.value in (None, Ellipsis))]
            if outer in OPTIONAL and len(args) == 1:
                return self.annotation(args[0])
            if outer in ("type", "Type") and len(args) == 1:
                inner = self.annotation(args[0])
                return ("class", inner[1]) if inner and inner[0] == "inst" else None
            if outer in CONTAINERS and args:
                inner = self.annotation(args[-1])
                return ("items", inner[1]) if inner and inner[0] == "inst" else None
        return None

    # -- expressions
    def expr_type(self, e: ast.AST, names) -> Type | None:
        """The type of ``e``; ``names`` maps a variable to its type (a dict or a callable)."""
        lookup = names if callable(names) else names.get
        if isinstance(e, ast.Name):
            return lookup(e.id)
        if isinstance(e, ast.Call):
            f = e.func
            ft = self.expr_type(f, names)
            if ft is not None and ft[0] == "class":
                return ("inst", ft[1])
            if ft is not None and ft[0] == "method":
                cls, method = ft[1].split(".", 1)
                return self.returns(self.methods[cls][method], cls)
            if ft is not None and ft[0] == "function":
                return self.returns(self.functions[ft[1]], None)
            if isinstance(f, ast.Attribute) and f.attr in ITEM_METHODS:
                owner = self.expr_type(f.value, names)
                if owner is not None and owner[0] == "items":
                    return ("inst", owner[1])
            return None
        if isinstance(e, ast.Subscript):
            owner = self.expr_type(e.value, names)
            if owner is not None and owner[0] == "items":
                return owner if isinstance(e.slice, ast.Slice) else ("inst", owner[1])
            return None
        if isinstance(e, ast.Attribute):
            return self.attr_type(self.expr_type(e.value, names), e.attr)
        if isinstance(e, (ast.BoolOp, ast.IfExp)):
            parts = e.values if isinstance(e, ast.BoolOp) else [e.body, e.orelse]
            types = {self.expr_type(p, names) for p in parts if not (isinstance(p, ast.Constant) and p.value is None)}
            return types.pop() if len(types) == 1 else None
        return None

    def returns(self, fn: ast.FunctionDef, cls: str | None) -> Type | None:
        """What a call of the file's function ``fn`` (a method of ``cls``) gives."""
        key = id(fn)
        if key in self._returns:
            return self._returns[key]
        self._returns[key] = None   # a recursive function: unknown while it is being read
        t = self.annotation(fn.returns)
        if t is None and fn.returns is None:
            env = self.scope_types(fn, self.module_lookup)
            values = [n.value for n in _own_nodes(fn) if isinstance(n, ast.Return)]
            types = {self.expr_type(v, env) if v is not None else None for v in values
                     if not (isinstance(v, ast.Constant) and v.value is None)}
            t = types.pop() if len(types) == 1 else None
        self._returns[key] = t
        return t

    def scope_types(self, fn: ast.AST, outer) -> dict[str, Type | None]:
        """The types of the variables of ``fn``'s own scope (a function, a lambda or the module);
        ``outer`` gives those of the enclosing scopes."""
        types: dict[str, Type | None] = {}
        args = getattr(fn, "args", None)
        params = (args.posonlyargs + args.args) if args is not None else []
        if args is not None:
            cls = self.method_class.get(id(fn))
            decorators = {d.id for d in getattr(fn, "decorator_list", []) if isinstance(d, ast.Name)}
            for a in params + args.kwonlyargs + [x for x in (args.vararg, args.kwarg) if x is not None]:
                types[a.arg] = self.annotation(a.annotation)
            if cls is not None and params and "staticmethod" not in decorators:
                types[params[0].arg] = ("class" if "classmethod" in decorators else "inst", cls)
        if isinstance(fn, ast.Lambda):
            return types
        sites: dict[str, list] = {}     # name -> the bindings the check can read
        stores: dict[str, int] = {}     # name -> every binding
        annotated: set[str] = set()
        for n in _own_nodes(fn):
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                types[n.target.id] = self.annotation(n.annotation)
                annotated.add(n.target.id)
            elif isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        sites.setdefault(t.id, []).append(("value", n.value))
            elif isinstance(n, ast.For) and isinstance(n.target, ast.Name):
                sites.setdefault(n.target.id, []).append(("item", n.iter))
            elif isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                stores[n.name] = stores.get(n.name, 0) + 1
                if isinstance(n, ast.ClassDef) and n.name in self.attrs:
                    sites.setdefault(n.name, []).append(("type", ("class", n.name)))
                elif self.functions.get(n.name) is n:
                    sites.setdefault(n.name, []).append(("type", ("function", n.name)))
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                for a in n.names:
                    name = (a.asname or a.name).split(".")[0]
                    stores[name] = stores.get(name, 0) + 1
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                stores[n.id] = stores.get(n.id, 0) + 1
        for name in self.attrs:   # P = namedtuple("P", ...) at module level: the class P
            if name in sites and args is None and not any(
                    isinstance(n, ast.ClassDef) and n.name == name for n in fn.body):
                sites[name] = [("type", ("class", name))] * len(sites[name])
        param_names = {p.arg for p in params}

        def lookup(name: str) -> Type | None:
            if name in types:
                return types[name]
            return None if name in stores else outer(name)

        for name in stores:
            if name not in annotated and name not in param_names:
                types[name] = None
        for _ in range(3):   # a variable assigned from another: settle in a few rounds
            for name, found_sites in sites.items():
                if name in annotated or name in param_names:
                    continue
                found = set()
                for kind, what in found_sites:
                    if kind == "type":
                        found.add(what)
                    elif kind == "value" and isinstance(what, ast.Constant) and what.value is None:
                        continue
                    elif kind == "value":
                        found.add(self.expr_type(what, lookup))
                    else:
                        it = self.expr_type(what, lookup)
                        found.add(("inst", it[1]) if it is not None and it[0] == "items" else None)
                # a binding the check does not read (a tuple target, a walrus, a with target): unknown
                types[name] = found.pop() if len(found) == 1 and len(found_sites) == stores.get(name) else None
        return types

    def comprehension_types(self, node: ast.AST, lookup) -> dict[str, Type | None]:
        types: dict[str, Type | None] = {}
        for g in node.generators:
            if isinstance(g.target, ast.Name):
                it = self.expr_type(g.iter, lambda n: types.get(n) if n in types else lookup(n))
                types[g.target.id] = ("inst", it[1]) if it is not None and it[0] == "items" else None
        return types


def _own_nodes(fn: ast.AST):
    """The nodes of ``fn``'s body that belong to its own scope (not nested functions, classes,
    lambdas or comprehensions), the nested definitions themselves included."""
    stack = list(fn.body) if isinstance(fn.body, list) else [fn.body]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
                          ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        stack += list(ast.iter_child_nodes(n))

