"""grader/worker/compiled_sites.py's own parts, on plain functions instrumented as the executor
instruments a kernel: an `if` goes the way the compiler took it, `+=` and list displays mean
what they mean to the compiler. (The whole path, gate and executor, is exercised by
tests/integrity/test_cpu_boundary*.py on the red teams' kernel files and the honest corpus.)"""

import ast

import pytest

from grader.worker import compiled_sites
from grader.worker.compiled_sites import (
    ARM,
    OBJECT,
    ROOT,
    RUN,
    RUNTIME,
    VALUE,
    VALUE_IN,
    VALUE_TYPE,
    NotCompiledPath,
    canon,
    key,
)

MODULE = "grader_test_compiled_sites"


def _instrumented(src: str):
    """(the instrumented function, every node of its source as the compiler's record would hold it)."""
    ns = {}
    exec(compile(src, "k.py", "exec"), ns)   # noqa: S102 - the test's own source
    fn = ns["k"]
    fn.__module__ = MODULE
    compiled_sites._Launch.modules.add(MODULE)
    tree = compiled_sites.instrument(ast.parse(src), fn, 1)
    ast.fix_missing_locations(tree)
    exec(compile(tree, "k.py", "exec"), ns)   # noqa: S102
    nodes = [n for n in ast.walk(ast.parse(src)) if hasattr(n, "lineno")]
    visited = {(MODULE, "k", *key(n)) for n in nodes}
    # As if every expression had been a run-time value to the compiler, and an object in another
    # context (so that a Python number stays one: these functions run outside a Triton launch, where
    # a tensor made of it would not read as a bool): only the checks under test bite.
    for n in nodes:
        if isinstance(n, ast.expr):
            visited |= _value(key(n), RUN) | _value(key(n), OBJECT)
    return ns["k"], visited


def _value(place: tuple, value) -> set:
    """The records the gate's child makes of one expression of the launched kernel ``k``: its value,
    and its value in the kernel's own specialization."""
    return frozenset({(VALUE, MODULE, "k", *place, value), (VALUE_IN, ROOT, (), MODULE, "k", *place, value)})


IF_SRC = "def k(flag):\n    if flag:\n        return 1\n    return 2\n"


def _if_node():
    return next(n for n in ast.walk(ast.parse(IF_SRC)) if isinstance(n, ast.If))


@pytest.mark.parametrize("compiler_took, flag, runs", [
    (False, False, 2), (False, True, None), (True, True, 1), (True, False, None), (RUNTIME, True, 1),
    (RUNTIME, False, 2)])
def test_an_if_goes_the_way_the_compiler_took_it(compiler_took, flag, runs):
    """An if the compiler decided while compiling must go the same way in the interpreter (red team 5:
    the compiler returned early, the interpreter went on into code the GPU never runs); one the
    compiler left to run time goes either way."""
    k, visited = _instrumented(IF_SRC)
    visited.add((ARM, MODULE, "k", *key(_if_node()), compiler_took))
    with compiled_sites.launch(visited):
        if runs is None:
            with pytest.raises(NotCompiledPath, match=f"is {flag} in the CPU interpreter"):
                k(flag)
        else:
            assert k(flag) == runs


def test_a_conditional_expression_goes_the_way_the_compiler_took_it():
    src = "def k(flag):\n    return 1 if flag else 2\n"
    k, visited = _instrumented(src)
    node = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.IfExp))
    visited.add((ARM, MODULE, "k", *key(node), True))
    with compiled_sites.launch(visited):
        assert k(True) == 1
        with pytest.raises(NotCompiledPath):
            k(False)


def test_plus_equals_and_list_displays_mean_what_they_mean_to_the_compiler():
    """To the compiler `b += c` is `b = b + c` and `[1]` a tuple: another name for the same list
    never sees the change (red team 5 read loaded values through such an alias)."""
    src = "def k():\n    a = [1]\n    b = a\n    b += [2]\n    return a, b\n"
    k, visited = _instrumented(src)
    # The compiler visits `b + [2]` as a BinOp at the augmented assignment's place (visit_AugAssign).
    aug = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.AugAssign))
    visited |= _value(("BinOp", *key(aug)[1:]), RUN) | _value(("BinOp", *key(aug)[1:]), OBJECT)
    with compiled_sites.launch(visited):
        assert k() == ((1,), (1, 2))


def test_a_compile_time_value_must_be_the_compilers():
    """Where the compiler had a compile-time value, the interpreter must compute the same one (red
    team 6: `f"{SEVEN}"` is "7" to the compiler and "constexpr[7]" to Python, and decided a loop's
    trips and a store's mask); where it had a run-time value, anything goes; an expression the
    compiler never evaluated does not run."""
    src = "def k(v):\n    return len(v)\n"
    k, visited = _instrumented(src)
    call = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call))
    visited -= _value(key(call), RUN) | _value(key(call), OBJECT)
    with compiled_sites.launch(visited | _value(key(call), canon(1))):
        assert k("7") == 1
        with pytest.raises(NotCompiledPath, match="is 12 in the CPU interpreter and 1 to the GPU's compiler"):
            k("constexpr[7]")
    with compiled_sites.launch(visited):
        with pytest.raises(NotCompiledPath, match="never evaluated"):
            k("7")


def test_a_python_number_becomes_the_tensor_the_compiler_had():
    """Where the compiler had only a run-time value, a Python number becomes a tensor (red team round
    8: Python's `//` and `%`, and its ints that never wrap), of the compiler's type where it recorded
    one: a loop's index is int64 when its bounds are (red team round 9: `i + 2**31 < 0` wrapped at 32
    bits in the interpreter, never on the GPU)."""
    import triton.language as tl

    src = "def k(i):\n    return i\n"
    k, visited = _instrumented(src)
    name = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name) and n.id == "i")
    visited -= _value(key(name), OBJECT)   # the compiler had a tensor there, and only that
    with compiled_sites.launch(visited):
        assert k(5).dtype == tl.int32
    with compiled_sites.launch(visited | {(VALUE_TYPE, MODULE, "k", *key(name), "int64")}):
        index = k(5)
        assert index.dtype == tl.int64 and index.handle.data.tolist() == [5]


def test_a_comprehension_is_what_the_compiler_makes_of_it():
    """visit_ListComp: a tuple, its `if` never read, its variable left set to the last item in the
    kernel's scope (red team 5 read a loaded tile through a name the compiler had rebound)."""
    src = "def k(a):\n    t = [a * 2 for a in (1, 2, 3) if a > 1]\n    return t, a\n"
    k, visited = _instrumented(src)
    with compiled_sites.launch(visited):
        assert k("tile") == ((2, 4, 6), 3)


def test_a_passing_static_asserts_message_is_never_evaluated():
    """The compiler reads a tl.static_assert's message only when it fails (and then the launch is
    refused): an f-string message of an honest kernel costs nothing, and no message runs."""
    src = "def k(tl, B):\n    tl.static_assert(B >= 16, f'B={B + undefined_name}')\n    return B\n"
    k, visited = _instrumented(src)

    class TL:
        @staticmethod
        def static_assert(cond, msg=""):
            assert cond, msg

    with compiled_sites.launch(visited):
        assert k(TL, 32) == 32


HELPER_SRC = "def h(F):\n    return F * 2\n"


def test_a_helpers_values_are_those_of_its_own_specialization():
    """The compiler makes one specialization of a helper per set of compile-time arguments, and the
    record keys each expression's value by it: a value right for another specialization of the same
    helper is refused (before, the record was their union, and a value that two readings compute
    differently could borrow another specialization's)."""
    ns = {}
    exec(compile(HELPER_SRC, "h.py", "exec"), ns)   # noqa: S102 - the test's own source
    fn = ns["h"]
    fn.__module__ = MODULE
    compiled_sites._Launch.modules.add(MODULE)
    tree = compiled_sites.instrument(ast.parse(HELPER_SRC), fn, 1)
    exec(compile(ast.fix_missing_locations(tree), "h.py", "exec"), ns)   # noqa: S102
    h = ns["h"]
    binop = next(n for n in ast.walk(ast.parse(HELPER_SRC)) if isinstance(n, ast.BinOp))
    one, two = canon((1,)), canon((2,))

    def records(value_for_one, value_for_two):
        place = key(binop)
        nodes = [n for n in ast.walk(ast.parse(HELPER_SRC)) if hasattr(n, "lineno")]
        others = {(VALUE_IN, c, (), MODULE, "h", *key(n), v) for n in nodes for c in (one, two) for v in (RUN, OBJECT)
                  if isinstance(n, ast.expr) and key(n) != place}   # the rest: unchecked (as in _instrumented)
        return others | {(MODULE, "h", *key(n)) for n in nodes} | {
            ("context", MODULE, "h", one), ("context", MODULE, "h", two),
            (VALUE, MODULE, "h", *place, canon(value_for_one)), (VALUE, MODULE, "h", *place, canon(value_for_two)),
            (VALUE_IN, one, (), MODULE, "h", *place, canon(value_for_one)),
            (VALUE_IN, two, (), MODULE, "h", *place, canon(value_for_two))}

    with compiled_sites.launch(records(2, 4)):
        compiled_sites._Launch.stack.append([{ROOT}, []])   # the launched kernel: h runs as a helper inside it
        assert h(1) == 2 and h(2) == 4
    with compiled_sites.launch(records(4, 2)):   # each specialization's value swapped: a union would pass
        compiled_sites._Launch.stack.append([{ROOT}, []])
        with pytest.raises(NotCompiledPath, match="is 2 in the CPU interpreter and 4 to the GPU's compiler"):
            h(1)


def test_a_float_becomes_an_integer_as_on_the_gpu():
    """PTX cvt.rzi: toward zero, NaN to 0, saturated (red team round 8 stored only where numpy's
    NaN-to-INT_MIN made a flag true). An 8-bit integer out of its range (or from a NaN) has no
    fixed value on the GPU (red team round 9 read the 16 bits its register holds where numpy
    keeps the low byte): random bytes, drawn again each time."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    from grader.worker import compiled_sites as cs

    cs.install("grader_test_compiled_sites")
    from triton.runtime.interpreter import interpreter_builder as b

    src = TensorHandle(np.array([np.nan, -1.7, 2.9, 3e9, -3e9, 300.0, -300.0], dtype=np.float32), tl.float32)
    assert b.create_fp_to_si(src, tl.int32).data.tolist() == [0, -1, 2, 2147483647, -2147483648, 300, -300]
    assert b.create_fp_to_si(src, tl.int16).data.tolist() == [0, -1, 2, 32767, -32768, 300, -300]
    in_range = [1, 2]
    draws = [b.create_fp_to_si(src, tl.int8).data for _ in range(8)]
    assert all(d[in_range].tolist() == [-1, 2] and d.dtype == np.int8 for d in draws)
    out_of_range = np.stack([d[[0, 3, 4, 5, 6]] for d in draws])
    assert len({tuple(row) for row in out_of_range}) > 1   # not one fixed answer, as 44 for 300 was
    small = TensorHandle(np.array([255.5, -0.5, 256.0], dtype=np.float32), tl.float32)
    assert b.create_fp_to_ui(small, tl.uint8).data[:2].tolist() == [255, 0]
    assert b.create_fp_to_ui(src, tl.uint32).data.tolist() == [0, 0, 2, 3000000000, 0, 300, 0]


LOOP_SRC = "def k(v):\n    t = 0\n    for i in range(2):\n        t = t + len(v[i])\n    return t\n"


def test_an_unrolled_loops_values_are_those_of_its_own_iteration():
    """The compiler unrolls a tl.static_range loop and the record keys each value in its body by
    the iteration: a value right for another iteration is refused (before, the record was their
    union). The loop here is a plain range: the record says whether the compiler unrolled it."""
    k, _ = _instrumented(LOOP_SRC)
    tree = ast.parse(LOOP_SRC)
    loop = next(n for n in ast.walk(tree) if isinstance(n, ast.For))
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "len")
    inside = {id(n) for n in ast.walk(loop)} - {id(n) for n in ast.walk(loop.iter)} - {id(loop.target)}

    def records(first, second):
        out = {(MODULE, "k", *key(n)) for n in ast.walk(tree) if hasattr(n, "lineno")}
        out.add((compiled_sites.STATIC_LOOP, MODULE, "k", *key(loop)))
        for n in ast.walk(tree):
            if not isinstance(n, ast.expr) or n is call:
                continue
            for iterations in ((((key(loop), 0),), ((key(loop), 1),)) if id(n) in inside else ((),)):
                out |= {(VALUE_IN, ROOT, iterations, MODULE, "k", *key(n), v) for v in (RUN, OBJECT)}
        for i, value in enumerate((first, second)):
            out.add((VALUE, MODULE, "k", *key(call), canon(value)))
            out.add((VALUE_IN, ROOT, ((key(loop), i),), MODULE, "k", *key(call), canon(value)))
        return out

    with compiled_sites.launch(records(1, 2)):   # k is the launched kernel
        assert k(("a", "bb")) == 3
    with compiled_sites.launch(records(1, 2)):   # the iterations' values swapped: a union would pass
        with pytest.raises(NotCompiledPath, match="is 2 in the CPU interpreter and 1 to the GPU's compiler"):
            k(("bb", "a"))
