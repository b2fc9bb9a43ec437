"""The static check's grammar is a complete allowlist (grader/staticcheck/policy.py, SYNTAX).

Every node class of the running Python's ``ast`` is either allowed, with a rule for each of
its fields, or refused on purpose with the words a student reads; so a new Python's new
node or field is refused until a maintainer lists it, never let through unread.
"""

from __future__ import annotations

import ast

import pytest

from grader.staticcheck import check_source
from grader.staticcheck.policy import ABSTRACT_SYNTAX, DATA, NAME, REFUSED_SYNTAX, SYNTAX, WALK

NODE_CLASSES = {n: c for n, c in vars(ast).items() if isinstance(c, type) and issubclass(c, ast.AST)}


def test_every_node_class_of_this_python_is_allowed_or_refused_on_purpose():
    assert not set(SYNTAX) & set(REFUSED_SYNTAX)
    unlisted = set(NODE_CLASSES) - set(SYNTAX) - set(REFUSED_SYNTAX) - ABSTRACT_SYNTAX
    assert not unlisted, sorted(unlisted)
    for name in ABSTRACT_SYNTAX & set(NODE_CLASSES):   # abstract: only their subclasses are nodes
        assert any(c is not NODE_CLASSES[name] and issubclass(c, NODE_CLASSES[name]) for c in NODE_CLASSES.values())


def test_every_field_of_every_allowed_node_has_a_rule():
    for name, rules in SYNTAX.items():
        cls = NODE_CLASSES.get(name)
        if cls is None:   # listed for another Python
            continue
        missing = [f for f in cls._fields if f not in rules]
        assert not missing, (name, missing)
        assert all(r in (WALK, NAME, DATA) or (isinstance(r, str) and " " in r) for r in rules.values()), name


def test_a_node_the_table_does_not_know_is_refused(monkeypatch):
    """What a newer Python adds is refused until listed: drop Match from both lists."""
    from grader.staticcheck import policy
    monkeypatch.delitem(policy.REFUSED_SYNTAX, "Match")
    [f, *_] = check_source("match x:\n    case 1:\n        pass\n")
    assert f.rule == "syntax-refused" and "ast.Match" in f.detail and "newer Python" in f.detail


def test_a_field_the_table_does_not_know_is_refused_when_used(monkeypatch):
    from grader.staticcheck import policy
    monkeypatch.setitem(policy.SYNTAX, "ClassDef", {k: v for k, v in SYNTAX["ClassDef"].items() if k != "bases"})
    assert check_source("class A:\n    pass\n") == []    # an unlisted field left empty
    [f] = check_source("class A(int):\n    pass\n")
    assert f.rule == "syntax-refused" and "bases" in f.detail


# async for, async with, await and async comprehensions parse only inside an `async def`,
# which is refused (and not read further)
REFUSED_SOURCES = {
    "Match": "match x:\n    case 1:\n        pass",
    "AsyncFunctionDef": "async def f():\n    async for a in b:\n        await a",
    "TryStar": "try:\n    pass\nexcept* ValueError:\n    pass",
    "ClassDef.keywords": "class A(metaclass=type):\n    pass",
}


@pytest.mark.parametrize("name", list(REFUSED_SOURCES))
def test_refused_syntax_is_refused_with_its_words(name):
    found = [f for f in check_source(REFUSED_SOURCES[name]) if f.rule == "syntax-refused"]
    assert found, name
    node = name.split(".")[0]
    if "." not in name:
        words = REFUSED_SYNTAX[node][0]
    else:
        words = SYNTAX[node][name.split(".")[1]]
    assert any(f.detail.startswith(f"{words} has no place in a kernel file") for f in found), [str(f) for f in found]


def test_match_class_patterns_never_reach_the_builtins():
    src = "def f(g):\n    match g:\n        case object(__builtins__=b):\n            return b['__import__']('os')\n"
    found = check_source(src)
    assert any(f.rule == "syntax-refused" and (f.line, f.col) == (2, 5) and "`match` statement" in f.detail
               for f in found), [str(f) for f in found]
