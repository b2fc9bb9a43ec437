"""The layout shows the trust boundary: the grader's import graph has no cycles, and the
worker (grader/worker/, run inside the sandbox) imports nothing from the trusted side."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from grader.submission import WORKER_FILES

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "grader"
# What the worker may import besides its own package: it is staged alone into the jail.
WORKER_THIRD_PARTY = {"torch", "triton", "numpy"}


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PACKAGE.rglob("*.py"):
        if "tests" in p.relative_to(PACKAGE).parts:
            continue
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _imports(name: str, path: Path, mods: dict) -> tuple[set[str], set[str]]:
    """(grader modules imported, top-level names of other imports), function-level imports included."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    inside, outside = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            parts = pkg.split(".")
            base = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            for alias in node.names:
                inside.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base)
        elif isinstance(node, ast.ImportFrom) and node.module:
            (inside if node.module.split(".")[0] == "grader" else outside).add(
                node.module if node.module.startswith("grader") else node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                (inside if alias.name.split(".")[0] == "grader" else outside).add(
                    alias.name if alias.name.startswith("grader") else alias.name.split(".")[0])
    return {m for m in inside if m != name}, outside


def _graph():
    mods = _modules()
    return mods, {n: _imports(n, p, mods) for n, p in mods.items()}


def test_the_import_graph_has_no_cycles():
    mods, graph = _graph()
    edges = {n: {d for d in graph[n][0] if d in mods and not n.startswith(d + ".")} for n in graph}
    state: dict[str, int] = {}

    def visit(n, path):
        state[n] = 1
        for d in sorted(edges[n]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(d):] + [d]))
            if d not in state:
                visit(d, path + [d])
        state[n] = 2

    for n in sorted(edges):
        if n not in state:
            visit(n, [n])


def test_the_worker_imports_nothing_from_the_trusted_side():
    mods, graph = _graph()
    worker = {n for n in mods if n.startswith("grader.worker")}
    assert worker, "no worker package found"
    stdlib = set(sys.stdlib_module_names)
    for n in sorted(worker):
        inside, outside = graph[n]
        assert inside <= worker | {"grader"}, f"{n} imports {sorted(inside - worker)} from the trusted side"
        assert outside <= stdlib | WORKER_THIRD_PARTY, f"{n} imports {sorted(outside - stdlib)}"


def test_every_worker_module_is_staged_into_the_jail():
    # The worker runs from a staged copy of grader/worker/: a module left out of WORKER_FILES
    # exists in the checkout but not in the jail (an import error on a GPU only, for vmm.py).
    on_disk = {p.name for p in (PACKAGE / "worker").glob("*.py")} - {"__init__.py"}
    assert set(WORKER_FILES) == on_disk


def test_a_cycle_would_be_found(tmp_path, monkeypatch):
    # The cycle check itself: two modules that import each other.
    fake = tmp_path / "grader"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "a.py").write_text("from . import b\n")
    (fake / "b.py").write_text("from .a import x\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    try:
        test_the_import_graph_has_no_cycles()
    except AssertionError as e:
        assert "grader.a -> grader.b -> grader.a" in str(e) or "grader.b -> grader.a -> grader.b" in str(e)
    else:
        raise AssertionError("the cycle was not found")
