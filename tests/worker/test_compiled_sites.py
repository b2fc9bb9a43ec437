"""grader/worker/compiled_sites.py's own parts, on plain functions instrumented as the executor
instruments a kernel: an `if` goes the way the compiler took it, `+=` and list displays mean
what they mean to the compiler. (The whole path, gate and executor, is exercised by
tests/integrity/test_cpu_boundary.py on the red teams' kernel files and the honest corpus.)"""

import ast

import pytest

from grader.worker import compiled_sites
from grader.worker.compiled_sites import ARM, RUNTIME, NotCompiledPath, key

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
    visited = {(MODULE, "k", *key(n)) for n in ast.walk(ast.parse(src)) if hasattr(n, "lineno")}
    return ns["k"], visited


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
    with compiled_sites.launch(visited):
        assert k() == ((1,), (1, 2))
