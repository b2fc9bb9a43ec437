"""The interpreter runs only what the GPU's compiler compiled, and with the compiler's meaning.

A kernel is Python to Triton's interpreter and Triton IR to its compiler, and
the two read some Python differently: the compiler decides an ``if`` on a
compile-time value while it compiles and never compiles the other side; it
reads an argument equal to 1, or one annotated with any spelling of
constexpr, as a compile-time constant where the interpreter sees a run-time
integer (``(0 - ONE) % 2`` is 1 to one and -1 to the other); and its ``or``
stops at the first compile-time truthy value, where Python's returns the
first truthy one (``x or 2`` is 2 to the compiler, ``x`` to Python). Each of
these let a kernel take, in the interpreter, a side the gate never compiled,
written in plain Python on the inputs' values (red team, round 3:
tests/fixtures/submissions/redteam3_*.py).

So the executor runs a launch only as the compiler read it:

- **the same constants**: the arguments the compiler took as compile-time
  values (the launch's variant, gate.py) reach the interpreter as
  ``tl.constexpr``, so both compute them alike;
- **only compiled code**: the gate's child records every node the
  compiler's code generator visited for the launch's variant (``record``);
  the executor's interpreter runs a statement, an arm of a conditional
  expression or an operand of ``and``/``or`` only if the compiler visited it
  and every expression in it that computes (``_required``: calls, subscripts,
  operators, comprehensions; the compiler never reads a comprehension's
  ``if``, an f-string's format or a passing assertion's message, red team
  round 4), and stops the launch with ``NotCompiledPath`` otherwise
  (``instrument`` adds the checks to the interpreter's copy of each kernel;
  ``launch`` says which variant runs; a check that passed costs a set lookup
  for the rest of the launch);
- **the compiler's ``and``/``or``**: evaluated as Triton's code generator does
  (``boolop``): a compile-time operand short-circuits, run-time ones are
  combined with ``logical_and``/``logical_or``;
- **the compiler's values**: the gate's child also records the value of every
  expression the compiler evaluated (``canon``: a compile-time value as
  itself, a tensor as run time) and which way it took each compile-time
  ``if`` (``ARM``); in the executor every name, attribute, call, operator,
  subscript, f-string and comprehension must have the compiler's value where
  that was a compile-time one (``_value``), and an ``if`` goes the compiler's
  way (``_arm``) (red teams, rounds 5 to 7);
- **the compiler's reading of Python**: in the interpreter's copy ``x += y``
  is ``x = x + y``, a list display a tuple, a comprehension a tuple whose
  variable stays bound (``_comprehension``), ``is`` unwraps a constexpr
  (``_is``), a run-time loop step must count up (``_step``), a static
  assertion's message is never evaluated; the combine functions of
  ``tl.reduce``/``tl.associative_scan`` are instrumented too, min/max are
  IEEE minNum/maxNum and ``tl.constexpr`` gets its missing reflected
  operators (``install``).

- **the compiler's specializations and iterations**: a helper's values are
  keyed by its specialization (``arguments_context``: its arguments as the
  compiler's ``call_JitFunction`` binds them), and the body of a loop the
  compiler unrolled (``tl.static_range``, ``STATIC_LOOP``) by its iteration;
  the executor checks a helper's expressions against the specializations its
  own arguments match (``_enter``; the union only where none is known), an
  unrolled body against its iteration (``_iterate``);
- **the compiler's tensors**: where the compiler had a tensor and the
  interpreter a Python number (a loop index, an unpacked name, a helper's
  ``return -1``), the number becomes that tensor (``_as_tensor``), so that
  ``//``, ``%`` and overflow are the GPU's; a float made an integer is PTX's
  ``cvt.rzi`` (``_ptx_float_to_int``).

What this cannot see: run-time arithmetic that numpy and the GPU round
differently (docs/integrity.md). Programs of one launch that share memory are
races.py's.

This file runs in the sandboxed executor and its gate child; it depends on
triton and the standard library only.
"""

from __future__ import annotations

import ast
import contextlib

SITE = "__grader_site__"
BOOLOP = "__grader_boolop__"
ARM_CHECK = "__grader_arm__"
ARM, RUNTIME = "arm", "run time"   # the record of which way the compiler took an if
VALUE_CHECK = "__grader_value__"
IS_CHECK = "__grader_is__"
STEP_CHECK = "__grader_step__"
VALUE = "value"   # the record of what an expression was to the compiler: canon()
VALUE_IN = "value in"   # the same, in one specialization of its function (CONTEXT) and one iteration of
                        # each tl.static_range loop around it (STATIC_LOOP)
VALUE_TYPE = "value type"   # the element type of a run-time value the compiler had there (a tensor's dtype)
STATIC_LOOP = "static loop"   # a for loop the compiler unrolled (tl.static_range), by its place
ITERATE, END_LOOP = "__grader_iterate__", "__grader_end_loop__"
CONTEXT = "context"     # a specialization the compiler made of a helper: canon() of its arguments
ROOT = "root"           # the launched kernel's own specialization (one per launch)
ENTER, LEAVE = "__grader_enter__", "__grader_leave__"
RUN, OBJECT = "T", "O"   # canon(): a run-time value (a tensor); an object (a function, a module)


class NotCompiledPath(RuntimeError):
    """The interpreter reached code that the GPU's compiler did not compile for this launch."""


def key(node: ast.AST) -> tuple:
    """A node's place in its function's source: its kind and where it starts and ends."""
    return (type(node).__name__, node.lineno, node.col_offset, getattr(node, "end_lineno", None),
            getattr(node, "end_col_offset", None))


# ----------------------------------------------------------------------------- the gate child's side

@contextlib.contextmanager
def record(visited: set):
    """Collect in ``visited`` (module, function, *key) of every node the compiler visits meanwhile."""
    import triton.language as tl
    from triton.compiler.code_generator import CodeGenerator

    original, original_call = CodeGenerator.visit, CodeGenerator.call_JitFunction
    original_body, original_static = CodeGenerator.visit_compound_statement, tl.static_range.__init__
    tests: dict[int, tuple] = {}   # id of an if's test -> the if's place, while the compiler is inside it
    contexts = [ROOT]   # the specialization whose body the compiler is generating now (innermost last)
    # The for loops being visited, innermost last: [code generator, node, unrolled?, iteration]. A helper's
    # generator visits inside its caller's loop; each generator's values see its own loops only.
    loops: list[list] = []

    def static_init(self, *args, **kwargs):   # built by visit_For's unrolled path, before the body
        original_static(self, *args, **kwargs)
        if loops and loops[-1][2] is None:
            loops[-1][2] = True

    def visit_compound_statement(self, stmts):
        top = next((f for f in reversed(loops) if f[0] is self), None)
        if top is not None and stmts is top[1].body:
            if top[2] is None:
                top[2] = False    # the run-time path reached the body with no static_range built
            if top[2]:
                top[3] += 1       # the unrolled path visits the body once per iteration
        return original_body(self, stmts)

    def iterations(self) -> tuple:
        return tuple((key(f[1]), f[3]) for f in loops if f[0] is self and f[2])

    def call_JitFunction(self, fn, args, kwargs, *rest, **kw):
        # The callee's body is generated (visited) inside this call, once per specialization.
        context = arguments_context(fn.fn, args, kwargs)
        visited.add((CONTEXT, getattr(fn.fn, "__module__", ""), getattr(fn.fn, "__name__", ""), context))
        contexts.append(context)
        try:
            return original_call(self, fn, args, kwargs, *rest, **kw)
        finally:
            contexts.pop()

    def visit(self, node):
        if node is None or not hasattr(node, "lineno"):
            return original(self, node)
        fn = getattr(getattr(self, "jit_fn", None), "fn", None)
        where = (getattr(fn, "__module__", ""), getattr(fn, "__name__", ""))
        visited.add((*where, *key(node)))
        if isinstance(node, (ast.If, ast.IfExp)):
            tests[id(node.test)] = (*where, *key(node))
        if isinstance(node, ast.For):
            loops.append([self, node, None, -1])
            try:
                value = original(self, node)
            finally:
                static = loops.pop()[2]
            if static:
                visited.add((STATIC_LOOP, *where, *key(node)))
            return value
        value = original(self, node)
        if isinstance(node, ast.expr) and not isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del)):
            visited.add((VALUE, *where, *key(node), canon(value)))
            visited.add((VALUE_IN, contexts[-1], iterations(self), *where, *key(node), canon(value)))
            if isinstance(value, tl.tensor):
                visited.add((VALUE_TYPE, *where, *key(node), str(value.dtype)))
        if id(node) in tests:   # the test of an if: decided now (its value) or at run time
            place = tests.pop(id(node))
            if isinstance(value, tl.tensor):
                visited.add((ARM, *place, RUNTIME))
            else:
                with contextlib.suppress(Exception):   # the compiler refuses what bool() cannot read
                    visited.add((ARM, *place, bool(value.value if isinstance(value, tl.constexpr) else value)))
        return value

    CodeGenerator.visit, CodeGenerator.call_JitFunction = visit, call_JitFunction
    CodeGenerator.visit_compound_statement, tl.static_range.__init__ = visit_compound_statement, static_init
    try:
        yield visited
    finally:
        CodeGenerator.visit, CodeGenerator.call_JitFunction = original, original_call
        CodeGenerator.visit_compound_statement, tl.static_range.__init__ = original_body, original_static


def arguments_context(fn, args, kwargs) -> tuple | str:
    """A helper's specialization as both sides can name it: canon() of its arguments in order,
    defaults filled in (a tensor is run time, so the compiler's tensor types are not told
    apart); ROOT when they cannot be bound."""
    import inspect

    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.apply_defaults()
    except (TypeError, ValueError):
        return ROOT
    return canon(tuple(bound.arguments.values()))


def canon(value):
    """A value as both sides can compare it: a compile-time value as itself (constexprs unwrapped,
    tuples element by element, dtypes by name), a run-time one (a tensor) as RUN, anything else
    (a function, a module, a descriptor) as OBJECT."""
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        value = value.value
    if isinstance(value, (tuple, list, tl.tuple)):
        return ("tuple", tuple(canon(v) for v in value))
    if isinstance(value, tl.dtype):
        return ("dtype", str(value))
    if isinstance(value, (tl.core.base_value, tl.tensor)):
        return RUN
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, repr(value))
    return OBJECT


def _matches(compiled, interpreted) -> bool:
    """The interpreter's value against one the compiler had: a compile-time value must be the same one;
    where the compiler had a run-time value (or an object) the interpreter may hold a value or an object."""
    if compiled == RUN:
        return True
    if compiled == OBJECT:
        return interpreted in (OBJECT, RUN)
    if isinstance(compiled, tuple) and compiled[0] == "tuple":
        return (isinstance(interpreted, tuple) and interpreted[0] == "tuple"
                and len(interpreted[1]) == len(compiled[1]) and all(map(_matches, compiled[1], interpreted[1])))
    return compiled == interpreted


# ----------------------------------------------------------------------------- the executor's side

class _Launch:
    modules: set[str] = set()          # the kernel files whose functions are instrumented
    visited: frozenset | None = None   # what the compiler visited for the launch running now
    ok: set[int] = set()               # the sites already found compiled for it
    values: dict = {}                  # (module, function, *key) -> what the expression was to the compiler
    values_in: dict = {}               # (context, module, function, *key) -> the same, in one specialization
    types: dict = {}                   # (module, function, *key) -> the dtypes of its run-time values there
    contexts: dict = {}                # (module, function) -> the specializations the compiler made of it
    stack: list = []                   # per function running now (innermost last): [its specializations, or
                                       # None where none is known (the values of every one are allowed),
                                       # its unrolled loops running now: [place, iteration], innermost last]


# Each check the instrumentation adds: (module, function, line in the file, the nodes that must have been
# visited). A site is a number into this list, so that a check already passed costs a set lookup.
_SITES: list[tuple] = []


@contextlib.contextmanager
def launch(visited):
    """Run one launch, its kernels allowed to run what the compiler visited for its variant."""
    _Launch.visited = frozenset(frozen(v) for v in visited)
    _Launch.ok, _Launch.values, _Launch.values_in, _Launch.contexts, _Launch.stack = set(), {}, {}, {}, []
    _Launch.types = {}
    for v in _Launch.visited:
        if v[0] == VALUE:
            _Launch.values.setdefault(v[1:-1], set()).add(v[-1])
        elif v[0] == VALUE_IN:
            _Launch.values_in.setdefault(v[1:-1], set()).add(v[-1])
        elif v[0] == CONTEXT:
            _Launch.contexts.setdefault(v[1:3], set()).add(v[3])
        elif v[0] == VALUE_TYPE:
            _Launch.types.setdefault(v[1:-1], set()).add(v[-1])
    try:
        yield
    finally:
        _Launch.visited, _Launch.ok, _Launch.values, _Launch.values_in = None, set(), {}, {}
        _Launch.contexts, _Launch.stack, _Launch.types = {}, [], {}


def _enter(i: int, arguments: tuple) -> None:
    """A kernel function starts: the launched kernel is ROOT; a helper is the compiler's
    specializations that its arguments match (a compile-time argument must be the same value;
    where the compiler had a tensor, anything)."""
    if _Launch.visited is None:
        return
    module, name, _, _ = _SITES[i]
    if not _Launch.stack:
        _Launch.stack.append([{ROOT}, []])
        return
    mine = canon(tuple(arguments))
    made = _Launch.contexts.get((module, name), set())
    matching = {c for c in made if c != ROOT and _matches(c, mine)}
    _Launch.stack.append([matching or None, []])


def _iterate(i: int) -> None:
    """An iteration of a for loop starts: counted if the compiler unrolled the loop (static_range)."""
    if _Launch.visited is None or not _Launch.stack:
        return
    module, name, _, (place,) = _SITES[i]
    if (STATIC_LOOP, module, name, *place) not in _Launch.visited:
        return
    loops = _Launch.stack[-1][1]
    if loops and loops[-1][0] == place:
        loops[-1][1] += 1
    else:
        loops.append([place, 0])


def _end_loop(i: int) -> None:
    if _Launch.visited is None or not _Launch.stack:
        return
    _, _, _, (place,) = _SITES[i]
    loops = _Launch.stack[-1][1]
    if loops and loops[-1][0] == place:
        loops.pop()


def _leave() -> None:
    if _Launch.visited is not None and _Launch.stack:
        _Launch.stack.pop()



def frozen(record):
    """A record as it came back through JSON (lists, nested) made hashable again (tuples)."""
    return tuple(frozen(x) for x in record) if isinstance(record, (list, tuple)) else record


def _site(i: int) -> None:
    if i in _Launch.ok:
        return
    module, name, line, keys = _SITES[i]
    allowed = _Launch.visited
    if allowed is not None and all((module, name, *k) in allowed for k in keys):
        _Launch.ok.add(i)
        return
    raise NotCompiledPath(
        f"line {line} of {name} runs in the CPU interpreter but the GPU's compiler never compiled it (or a part "
        "of it) for this launch: the compiler decided a condition while compiling, and the interpreter decided it "
        "the other way, or the compiler skips that part (a comprehension's `if`, an f-string's format, an "
        "assertion's message); a kernel must mean the same to both")


def _arm(i: int, test) -> bool:
    """An ``if``'s (or a conditional expression's) test, taken only the way the compiler took it: an if
    the compiler decided while compiling (a compile-time test) must go the same way here."""
    truth = bool(test)
    allowed = _Launch.visited
    if allowed is None:
        return truth
    module, name, line, (place,) = _SITES[i]
    if (ARM, module, name, *place, RUNTIME) in allowed or (ARM, module, name, *place, truth) in allowed:
        return truth
    raise NotCompiledPath(
        f"the condition at line {line} of {name} is {truth} in the CPU interpreter, but the GPU's compiler decided "
        f"it {not truth} while compiling (a compile-time value that the two read differently); a kernel must mean "
        "the same to both")


def _value(i: int, value):
    """An expression's value, if the compiler had the same one there: a compile-time value must be
    equal to the compiler's (it decides loop trips, masks and shapes on the GPU), a run-time one may
    be anything. One the compiler never evaluated does not run."""
    if _Launch.visited is None:
        return value
    module, name, line, (place,) = _SITES[i]
    contexts, loops = _Launch.stack[-1] if _Launch.stack else (None, [])
    if contexts is None:   # no specialization known: the values of every one
        compiled = _Launch.values.get((module, name, *place))
    else:
        iterations = tuple((p, n) for p, n in loops)
        found = [_Launch.values_in.get((c, iterations, module, name, *place)) for c in contexts]
        compiled = set().union(*[f for f in found if f]) or None
    if compiled is None:
        raise NotCompiledPath(
            f"line {line} of {name} evaluates an expression in the CPU interpreter that the GPU's compiler never "
            "evaluated for this launch (a comprehension's `if`, an f-string's format, an assertion's message); a "
            "kernel must mean the same to both")
    if RUN in compiled:
        if compiled == {RUN} and type(value) in (int, float, bool):
            return _as_tensor(value, _Launch.types.get((module, name, *place), set()))
        return value
    mine = canon(value)
    if not any(_matches(c, mine) for c in compiled):
        raise NotCompiledPath(
            f"an expression at line {line} of {name} is {_shown(mine)} in the CPU interpreter and "
            f"{' or '.join(sorted(_shown(c) for c in compiled))} to the GPU's compiler (a compile-time value the two "
            "compute differently: an f-string of a constexpr, `is` on a constexpr, a list against a tuple); a "
            "kernel must mean the same to both")
    return value


def _as_tensor(value, dtypes: set):
    """A Python number where the compiler had a tensor (a loop index, a name bound by unpacking or
    an annotated assignment, a helper's ``return -1``), made the tensor the compiler made of it:
    Python's ``//`` and ``%`` round toward minus infinity and its ints never wrap, where the GPU
    truncates and wraps (red team round 8). Its type is the compiler's where the compiler had one
    there (``dtypes``; a loop's index is int64 when its bounds are: red team round 9), else what
    ``to_tensor`` makes of it (int32 or int64, float32, int1)."""
    import triton.language as tl
    from triton.runtime.interpreter import interpreter_semantic

    tensor = interpreter_semantic.to_tensor(value, False)
    if len(dtypes) == 1:
        (name,) = dtypes
        dtype = tl.dtype(name)
        if dtype != tensor.dtype and (dtype.is_int() or dtype.is_floating()):
            tensor = interpreter_semantic.cast(tensor, dtype)
    return tensor


def _is(left, right, negated: bool) -> bool:
    """``left is right`` as the compiler reads it (visit_Compare): constexprs unwrapped first."""
    import triton.language as tl

    left = left.value if isinstance(left, tl.constexpr) else left
    right = right.value if isinstance(right, tl.constexpr) else right
    return (left is not right) if negated else (left is right)


def _step(i: int, step):
    """A loop's step. One the compiler had as a run-time value must be positive: the GPU's loop runs
    while its index is below its end, so a negative run-time step runs no trip there (Python's
    ``range`` counts down)."""
    if _Launch.visited is not None:
        module, name, line, (place,) = _SITES[i]
        compiled = _Launch.values.get((module, name, *place), set())
        if RUN in compiled and step <= 0:
            raise NotCompiledPath(
                f"the loop at line {line} of {name} has a run-time step of {step}: on the GPU a loop with a step "
                "known only at run time runs while its index is below its end (no trip here), where the "
                "interpreter counts down; make a negative step a tl.constexpr, or count up")
    return step


def _shown(c) -> str:
    if c == RUN:
        return "a run-time value"
    if c == OBJECT:
        return "an object"
    if c[0] == "tuple":
        return "(" + ", ".join(_shown(x) for x in c[1]) + ")"
    return c[1][:40]


# The expressions whose values are checked against the compiler's (a literal is the same to both).
_VALUED = (ast.Name, ast.Attribute, ast.Call, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Subscript, ast.JoinedStr,
           ast.ListComp, ast.Tuple, ast.List, ast.IfExp)


# Expressions that compute: each must have been visited by the compiler where the interpreter evaluates it.
_ACTIVE = (ast.Call, ast.Subscript, ast.BinOp, ast.UnaryOp, ast.Compare, ast.NamedExpr, ast.Starred, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Await, ast.Yield, ast.YieldFrom)


def _required(node: ast.AST, out: list) -> list:
    """The nodes of ``node`` the compiler must have visited before the interpreter evaluates it: itself
    and what computes in it, short of what has checks of its own (nested statements, a conditional's
    arms, the operands of and/or) and of what neither evaluates per launch (annotations)."""
    for field, value in ast.iter_fields(node):
        for child in value if isinstance(value, list) else [value]:
            if not isinstance(child, ast.AST) or isinstance(child, ast.stmt):
                continue
            if isinstance(node, ast.IfExp) and field in ("body", "orelse"):
                continue
            if isinstance(node, ast.BoolOp) or (isinstance(node, ast.AnnAssign) and field == "annotation"):
                continue
            if isinstance(node, (ast.FunctionDef, ast.arguments)):
                continue
            loop_call = isinstance(node, ast.For) and field == "iter"   # visit_For reads its func and args
            if isinstance(child, _ACTIVE) and not loop_call and not isinstance(getattr(child, "ctx", None),
                                                                               (ast.Store, ast.Del)):
                out.append(key(child))
            _required(child, out)
    return out


def boolop(is_or: bool, *operands):
    """``a or b`` / ``a and b`` as Triton's code generator evaluates it (``visit_BoolOp``)."""
    import triton.language as tl

    nontrivial, value = [], None
    for operand in operands:
        value = operand()
        if not isinstance(value, tl.tensor):   # a compile-time value may end it
            truthy = bool(value.value if isinstance(value, tl.constexpr) else value)
            if truthy == is_or:
                return value
        else:
            nontrivial.append(value)
    if not nontrivial:
        return value
    while len(nontrivial) >= 2:
        rhs, lhs = nontrivial.pop(), nontrivial.pop()
        nontrivial.append(lhs.logical_or(rhs) if is_or else lhs.logical_and(rhs))
    return nontrivial[0]


class _Instrument(ast.NodeTransformer):
    """The checks above, added to one function's syntax tree as the interpreter re-reads it
    (lines counted from its ``def``, as the compiler counts them): before every statement, and
    around each arm of a conditional expression and each operand of and/or."""

    def __init__(self, module: str, name: str, first_line: int, function: ast.FunctionDef):
        self.module, self.name, self.first_line = module, name, first_line
        self.exempt = set()
        for node in ast.walk(function):
            if isinstance(node, ast.For):
                self.exempt.add(id(node.iter))
            if isinstance(node, (ast.AnnAssign, ast.arg)) and node.annotation is not None:
                self.exempt |= {id(n) for n in ast.walk(node.annotation)}
            if isinstance(node, ast.FunctionDef):
                self.exempt |= {id(n) for d in node.args.defaults + node.args.kw_defaults if d for n in ast.walk(d)}

    def _check(self, node: ast.AST) -> ast.Call:
        _SITES.append((self.module, self.name, node.lineno + self.first_line - 1, tuple(_required(node, [key(node)]))))
        return ast.Call(ast.Name(SITE, ast.Load()), [ast.Constant(len(_SITES) - 1)], [])

    @staticmethod
    def _guarded(check: ast.Call, node: ast.expr) -> ast.expr:
        """``(check, node)[1]``: the check runs before the expression is evaluated."""
        return ast.Subscript(ast.Tuple([check, node], ast.Load()), ast.Constant(1), ast.Load())

    def _arm_test(self, node: ast.If | ast.IfExp) -> None:
        """``node.test`` through the arm check (compiled_sites._arm), the place of ``node`` its key."""
        _SITES.append((self.module, self.name, node.lineno + self.first_line - 1, (key(node),)))
        node.test = ast.Call(ast.Name(ARM_CHECK, ast.Load()), [ast.Constant(len(_SITES) - 1), node.test], [])

    def visit(self, node):
        """Each valued expression the interpreter evaluates goes through the value check (_value)."""
        original = node
        node = super().visit(node)
        if isinstance(original, _VALUED) and isinstance(node, ast.expr) and hasattr(original, "lineno") \
                and not isinstance(getattr(original, "ctx", None), (ast.Store, ast.Del)) and not self._exempt(original):
            _SITES.append((self.module, self.name, original.lineno + self.first_line - 1, (key(original),)))
            node = ast.Call(ast.Name(VALUE_CHECK, ast.Load()), [ast.Constant(len(_SITES) - 1), node], [])
        return node

    def _exempt(self, node) -> bool:
        """What the compiler reads without evaluating it as an expression: a for loop's range call,
        annotations, the names a call's function is reached by."""
        return id(node) in self.exempt

    def _comprehension(self, node: ast.ListComp) -> ast.expr:
        """``[elt for v in items if ...]`` as the compiler's visit_ListComp computes it: a tuple, the
        ``if`` never read, and ``v`` left set to the last item in the kernel's own scope:
        ``(t := tuple(items), tuple(elt for v in t), (v := t[-1]) if t else None)[1]``."""
        gen = node.generators[0]
        name, tmp = gen.target.id, f"__grader_items_{len(_SITES)}"
        items = ast.NamedExpr(ast.Name(tmp, ast.Store()), ast.Call(ast.Name("tuple", ast.Load()), [gen.iter], []))
        loop = ast.comprehension(ast.Name(name, ast.Store()), ast.Name(tmp, ast.Load()), [], 0)
        values = ast.Call(ast.Name("tuple", ast.Load()), [ast.GeneratorExp(node.elt, [loop])], [])
        last = ast.NamedExpr(ast.Name(name, ast.Store()),
                             ast.Subscript(ast.Name(tmp, ast.Load()), ast.Constant(-1), ast.Load()))
        leaked = ast.IfExp(ast.Name(tmp, ast.Load()), last, ast.Constant(None))
        return ast.Subscript(ast.Tuple([items, values, leaked], ast.Load()), ast.Constant(1), ast.Load())

    def generic_visit(self, node):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            # `x += y` is `x = x + y` to the compiler (visit_AugAssign): never an in-place change of a
            # list that another name also holds.
            target = ast.Name(node.target.id, ast.Load())
            ast.copy_location(target, node.target)
            value = ast.copy_location(ast.BinOp(target, node.op, node.value), node)
            node = ast.copy_location(ast.Assign([node.target], value), node)
            return super().generic_visit(node)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            # `x is None` unwraps a constexpr first to the compiler (visit_Compare).
            node = super().generic_visit(node)
            return ast.Call(ast.Name(IS_CHECK, ast.Load()), [node.left, node.comparators[0],
                                                             ast.Constant(isinstance(node.ops[0], ast.IsNot))], [])
        if isinstance(node, ast.ListComp) and len(node.generators) == 1 \
                and isinstance(node.generators[0].target, ast.Name):
            return self._comprehension(super().generic_visit(node))
        if isinstance(node, ast.List) and isinstance(node.ctx, ast.Load):
            # A list display is a tuple to the compiler (visit_List): nothing can change it in place.
            return super().generic_visit(ast.copy_location(ast.Tuple(node.elts, ast.Load()), node))
        if isinstance(node, ast.IfExp):   # the checks from the arms as written, before they are instrumented
            body, orelse = self._check(node.body), self._check(node.orelse)
            self._arm_test(node)
            super().generic_visit(node)
            node.body, node.orelse = self._guarded(body, node.body), self._guarded(orelse, node.orelse)
            return node
        if isinstance(node, ast.BoolOp):
            checks = [self._check(v) for v in node.values]
            super().generic_visit(node)
            thunks = [ast.Lambda(ast.arguments([], [], None, [], [], None, []), self._guarded(c, v))
                      for c, v in zip(checks, node.values)]
            return ast.Call(ast.Name(BOOLOP, ast.Load()), [ast.Constant(isinstance(node.op, ast.Or)), *thunks], [])
        if isinstance(node, ast.If):
            self._arm_test(node)
        if isinstance(node, ast.For):   # its iterations counted where the compiler unrolled it
            step_site = None
            if isinstance(node.iter, ast.Call) and len(node.iter.args) == 3 \
                    and not isinstance(node.iter.args[2], ast.Constant):
                _SITES.append((self.module, self.name, node.lineno + self.first_line - 1, (key(node.iter.args[2]),)))
                step_site = len(_SITES) - 1
            _SITES.append((self.module, self.name, node.lineno + self.first_line - 1, (key(node),)))
            site = ast.Constant(len(_SITES) - 1)
            node = self._statements(node)
            if step_site is not None:   # a run-time step must count up (_step)
                node.iter.args[2] = ast.Call(ast.Name(STEP_CHECK, ast.Load()),
                                             [ast.Constant(step_site), node.iter.args[2]], [])
            node.body.insert(0, ast.copy_location(ast.Expr(ast.Call(ast.Name(ITERATE, ast.Load()), [site], [])), node))
            node.orelse.insert(0, ast.copy_location(ast.Expr(ast.Call(ast.Name(END_LOOP, ast.Load()), [site], [])),
                                                    node))
            return node
        return self._statements(node)

    def _statements(self, node):
        """The node with a check before each statement of its bodies, and its parts instrumented."""
        checks = {}
        for field in ("body", "orelse", "finalbody"):   # keys from the statements as written, before the rest
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                checks[field] = [self._check(s) if isinstance(s, ast.stmt) else None for s in stmts]
        super().generic_visit(node)
        for field, made in checks.items():
            stmts = getattr(node, field)
            if len(stmts) == len(made):
                setattr(node, field, [x for c, s in zip(made, stmts) for x in ((ast.Expr(c), s) if c else (s,))])
        return node


def instrument(tree: ast.Module, fn, first_line: int) -> ast.Module:
    """``tree`` (one function, lines from its ``def``, which is the file's ``first_line``) with the
    checks, if ``fn`` is the kernel file's."""
    module = getattr(fn, "__module__", "")
    if module not in _Launch.modules:
        return tree
    fn.__globals__[SITE] = _site
    fn.__globals__[BOOLOP] = boolop
    fn.__globals__[ARM_CHECK] = _arm
    fn.__globals__[VALUE_CHECK] = _value
    fn.__globals__[IS_CHECK] = _is
    fn.__globals__[STEP_CHECK] = _step
    fn.__globals__[ENTER] = _enter
    fn.__globals__[LEAVE] = _leave
    fn.__globals__[ITERATE] = _iterate
    fn.__globals__[END_LOOP] = _end_loop
    (function,) = tree.body
    _drop_static_assert_messages(function)
    _Instrument(module, fn.__name__, first_line, function).generic_visit(function)   # its statements, not the def
    _with_context(function, module, fn.__name__, first_line)
    return tree


def _with_context(function: ast.FunctionDef, module: str, name: str, first_line: int) -> None:
    """``function``'s body between ``_enter`` (with its arguments, which name its specialization)
    and ``_leave``, however it ends."""
    _SITES.append((module, name, first_line, ()))
    arguments = ast.Tuple([ast.Name(a.arg, ast.Load()) for a in function.args.posonlyargs + function.args.args],
                          ast.Load())
    enter = ast.Expr(ast.Call(ast.Name(ENTER, ast.Load()), [ast.Constant(len(_SITES) - 1), arguments], []))
    leave = ast.Expr(ast.Call(ast.Name(LEAVE, ast.Load()), [], []))
    function.body = [enter, ast.Try(function.body, [], [], [leave])]
    for node in (enter, function.body[1], leave):
        ast.copy_location(node, function)
    ast.fix_missing_locations(function)


def _drop_static_assert_messages(function: ast.FunctionDef) -> None:
    """A ``tl.static_assert``'s message is read by the compiler only when the assertion fails, and then
    the gate refuses the launch: in the interpreter's copy it is the empty string, never evaluated."""
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "static_assert":
            node.args[1:] = [ast.copy_location(ast.Constant(""), a) for a in node.args[1:]]
            for kw in node.keywords:
                if kw.arg == "msg":
                    kw.value = ast.copy_location(ast.Constant(""), kw.value)


def install(module_name: str) -> None:
    """Instrument the kernels of ``module_name`` whenever the interpreter re-reads one (executor start)."""
    from triton.runtime.interpreter import FunctionRewriter

    _Launch.modules.add(module_name)
    if getattr(FunctionRewriter, "_grader_instrumented", False):
        return
    original = FunctionRewriter._transform_ast

    def _transform_ast(self, src):
        parsed = instrument(ast.parse(src), self.fn, self.def_file_lineno)
        transformed = self.ast_transformer.visit(parsed)
        ast.fix_missing_locations(transformed)
        ast.increment_lineno(transformed, self.def_file_lineno - 1)
        return transformed

    _transform_ast.original = original
    FunctionRewriter._transform_ast = _transform_ast
    _instrument_combine_functions()
    _ieee_min_max()
    _ptx_float_to_int()
    _reflected_constexpr_operators()
    FunctionRewriter._grader_instrumented = True


def _reflected_constexpr_operators() -> None:
    """``int % tl.constexpr`` (and &, ^, <<, >>) is a constant to the compiler, and a TypeError to the
    interpreter, whose constexpr lacks these reflected operators; the executor also passes an argument
    equal to 1 as a constexpr, so ``k % M`` at M = 1 would fail only under the grader."""
    import operator

    import triton.language as tl

    for name, op in (("__rmod__", operator.mod), ("__rand__", operator.and_), ("__rxor__", operator.xor),
                     ("__rlshift__", operator.lshift), ("__rrshift__", operator.rshift)):
        if not hasattr(tl.constexpr, name):
            setattr(tl.constexpr, name, lambda self, other, op=op: tl.constexpr(op(other, self.value)))


def _ieee_min_max() -> None:
    """``tl.minimum``/``tl.maximum`` are IEEE minNum/maxNum on the GPU (``arith.minnumf``: a NaN operand
    gives the other one); the interpreter's builder used numpy's NaN-propagating ones."""
    import numpy as np
    from triton.runtime.interpreter import InterpreterBuilder

    InterpreterBuilder.create_minnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmin)
    InterpreterBuilder.create_maxnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmax)


def _ptx_float_to_int() -> None:
    """A float made an integer as the GPU makes it (PTX ``cvt.rzi``): toward zero, NaN to 0, saturated
    to the range, where numpy's ``astype`` gives INT_MIN for a NaN and wraps (red team round 8). An
    8-bit integer has no fixed answer out of its range: the GPU converts through 16 bits
    (``cvt.rzi.s16.f32``) into a 16-bit register, a store keeps the low byte and arithmetic may read
    all 16 (LLVM's ``fptosi`` of an out-of-range value is poison; red team round 9 read 300 where the
    byte holds 44). Such a lane (a NaN too) gets random bytes here, a different draw each time, so no
    kernel can count on a value for it; one that only stores masked-off lanes of it is unaffected."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle, _get_np_dtype

    original_si, original_ui = InterpreterBuilder.create_fp_to_si, InterpreterBuilder.create_fp_to_ui

    def convert(self, src, dst_type, original):
        dtype = _get_np_dtype(dst_type)
        if src.dtype.scalar == tl.bfloat16 or not np.issubdtype(dtype, np.integer):
            return original(self, src, dst_type)   # bfloat16 is held as uint16 bits: the interpreter's own way
        bits = 16 if dtype.itemsize == 1 else 8 * dtype.itemsize
        signed = np.issubdtype(dtype, np.signedinteger)
        lo, hi = (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1) if signed else (0.0, 2.0 ** bits - 1)
        hi = min(hi, float(np.nextafter(2.0 ** bits if not signed else 2.0 ** (bits - 1), 0)))
        x = np.trunc(np.asarray(src.data, dtype=np.float64))
        x = np.clip(np.where(np.isnan(x), 0.0, x), lo, hi)
        out = x.astype(np.int64 if signed else np.uint64).astype(dtype)
        if dtype.itemsize == 1:
            info = np.iinfo(dtype)
            t = np.trunc(np.asarray(src.data, dtype=np.float64))
            undefined = np.isnan(t) | (t < info.min) | (t > info.max)
            if undefined.any():
                noise = np.random.default_rng().integers(info.min, info.max + 1, size=out.shape, dtype=dtype)
                out = np.where(undefined, noise, out)
        return TensorHandle(out, dst_type.scalar)

    InterpreterBuilder.create_fp_to_si = lambda self, src, dst_type: convert(self, src, dst_type, original_si)
    InterpreterBuilder.create_fp_to_ui = lambda self, src, dst_type: convert(self, src, dst_type, original_ui)


class _Instrumented:
    """A kernel file's combine function as the interpreter's reduce and scan call it (``.fn``):
    its instrumented copy, never the raw Python function."""

    def __init__(self, jitted):
        self.jitted = jitted
        self.fn = jitted.rewrite()


def _instrument_combine_functions() -> None:
    """``tl.reduce`` and ``tl.associative_scan`` in the interpreter call ``combine_fn.fn`` directly,
    past the rewriting that instruments a kernel: give them the instrumented function instead."""
    from triton.runtime.interpreter import InterpretedFunction, ReduceScanOpInterface

    original = ReduceScanOpInterface.__init__

    def __init__(self, axis, combine_fn, *args, **kwargs):
        original(self, axis, combine_fn, *args, **kwargs)
        fn = getattr(combine_fn, "fn", None)
        if isinstance(combine_fn, InterpretedFunction) and getattr(fn, "__module__", "") in _Launch.modules:
            self.combine_fn = _Instrumented(combine_fn)

    ReduceScanOpInterface.__init__ = __init__
