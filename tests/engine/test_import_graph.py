"""The layout shows the two products and the trust boundary: grader/ (the engine: grades one
submission, ships to students and to Gradescope) never imports classroom/ (the TA's shell);
neither package's import graph has a cycle; the worker (grader/worker/, run inside the
sandbox) imports nothing from the trusted side; and inside the engine the imports run one
way, down the layers of LAYERS: the harness only runs workers, grade.py orders the phases."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from grader.submission import WORKER_FILES

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("grader", "classroom")
# What the worker may import besides its own package: it is staged alone into the jail.
WORKER_THIRD_PARTY = {"torch", "triton", "numpy"}
# The engine's layers, lowest first: a module imports from its own layer and the layers below,
# never from one above. A name stands for the module or package and everything under it.
LAYERS = (
    # what every phase stands on: the tasks, the rubric, the submission's files, the worker (its
    # own package, run in the jail), the comparison with the reference, and the facts a grade
    # run observed (grader/facts.py), which every phase reads and writes
    ("leaves", ("grader", "grader.tasks", "grader.worker", "grader.rubric", "grader.submission",
                "grader.compare", "grader.diagnose", "grader.tracebacks", "grader.toolchain",
                "grader.roofline", "grader.pytest_plugin", "grader.facts")),
    # runs the workers and brings back the facts; what it applies without deciding is handed in
    ("harness", ("grader.harness",)),
    # the phases that read the facts: the static check, the judge, the estimate, the score
    ("phases", ("grader.staticcheck", "grader.judge", "grader.estimate", "grader.scoring")),
    # the order of the phases
    ("grade", ("grader.grade",)),
    # what a person runs, and the reports it writes from a grade's result
    ("entry points", ("grader.report", "grader.estimate_report", "grader.cli", "grader.gradescope",
                      "grader.__main__")),
)


def _modules() -> dict[str, Path]:
    mods = {}
    for package in PACKAGES:
        for p in (ROOT / package).rglob("*.py"):
            if "tests" in p.relative_to(ROOT / package).parts:
                continue
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = p
    return mods


def _ours(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def _imports(name: str, path: Path, mods: dict) -> tuple[set[str], set[str]]:
    """(modules of ours imported, top-level names of other imports), function-level imports included."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    inside, outside = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            parts = pkg.split(".")
            base = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            for alias in node.names:
                inside.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _ours(node.module):
                for alias in node.names:   # `from grader import report` imports the module grader.report
                    sub = f"{node.module}.{alias.name}"
                    inside.add(sub if sub in mods else node.module)
            else:
                outside.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                (inside if _ours(alias.name) else outside).add(
                    alias.name if _ours(alias.name) else alias.name.split(".")[0])
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


def test_the_engine_imports_nothing_from_the_classroom():
    mods, graph = _graph()
    engine = {n for n in mods if n.split(".")[0] == "grader"}
    assert engine and any(n.startswith("classroom.") for n in mods), "both packages must be found"
    for n in sorted(engine):
        assert not {m for m in graph[n][0] if m.split(".")[0] == "classroom"}, \
            f"{n} imports the classroom: the engine must grade and ship without it"
        assert "classroom" not in graph[n][1], n


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
    on_disk = {p.name for p in (ROOT / "grader" / "worker").glob("*.py")} - {"__init__.py"}
    assert set(WORKER_FILES) == on_disk


def _layer(module: str) -> int | None:
    """The index in LAYERS of the most specific entry that holds ``module``; None if none does."""
    found = [(len(name), i) for i, (_, names) in enumerate(LAYERS) for name in names
             if module == name or (name != "grader" and module.startswith(name + "."))]
    return max(found)[1] if found else None


def _engine(mods: dict) -> list[str]:
    return sorted(n for n in mods if n.split(".")[0] == "grader")


def test_every_engine_module_has_a_layer():
    mods, _ = _graph()
    missing = [n for n in _engine(mods) if _layer(n) is None]
    assert not missing, (f"no layer in LAYERS for {missing}: put each in the lowest layer that holds "
                         "everything it imports")


def test_every_layer_entry_names_a_module():
    mods = _modules()
    stale = [name for _, names in LAYERS for name in names
             if name not in mods and not any(m.startswith(name + ".") for m in mods)]
    assert not stale, f"LAYERS names {stale}, which no module of the engine is (renamed or removed?)"


def test_the_engine_imports_run_down_its_layers():
    # The harness imports none of the static check, the judge, the estimate or the grade (they
    # hand it what it needs); the facts import no harness; nothing below imports the reports.
    mods, graph = _graph()
    upward = []
    for n in _engine(mods):
        here = _layer(n)
        for d in sorted(graph[n][0]):
            there = _layer(d)
            if here is not None and there is not None and there > here:
                upward.append(f"{n} ({LAYERS[here][0]}) imports {d} ({LAYERS[there][0]})")
    assert not upward, ("imports up the engine's layers (tests/engine/test_import_graph.py LAYERS; hand the "
                        "lower module what it needs as data or a callable instead): " + "; ".join(upward))


def _fake_tree(tmp_path, monkeypatch, files: dict[str, str]) -> None:
    for rel, text in {"grader/__init__.py": "", "classroom/__init__.py": "", **files}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)


def test_a_cycle_would_be_found(tmp_path, monkeypatch):
    # The cycle check itself: two modules that import each other.
    _fake_tree(tmp_path, monkeypatch, {"grader/a.py": "from . import b\n", "grader/b.py": "from .a import x\n"})
    try:
        test_the_import_graph_has_no_cycles()
    except AssertionError as e:
        assert "grader.a -> grader.b -> grader.a" in str(e) or "grader.b -> grader.a -> grader.b" in str(e)
    else:
        raise AssertionError("the cycle was not found")


def test_an_engine_import_of_the_classroom_would_be_found(tmp_path, monkeypatch):
    # The boundary check itself, for each way of writing the import, even inside a function.
    for text in ("from classroom import batch\n", "import classroom.lms\n",
                 "def f():\n    from classroom.lms.csvio import cell\n"):
        _fake_tree(tmp_path, monkeypatch, {"grader/report.py": text, "classroom/batch.py": "",
                                           "classroom/lms/__init__.py": "", "classroom/lms/csvio.py": ""})
        try:
            test_the_engine_imports_nothing_from_the_classroom()
        except AssertionError as e:
            assert "grader.report imports the classroom" in str(e)
        else:
            raise AssertionError(f"not found: {text!r}")


def test_an_import_up_the_layers_would_be_found(tmp_path, monkeypatch):
    # The layer check itself: the harness importing the judge (at the top, or inside a function),
    # and the facts importing the harness, are each named.
    base = {"grader/harness/__init__.py": "", "grader/judge.py": "", "grader/facts.py": "",
            "grader/harness/measure.py": "", "grader/harness/run.py": ""}
    cases = {
        "grader/harness/run.py": ("from ..judge import HOST_READS\n", "grader.harness.run (harness) imports "
                                  "grader.judge (phases)"),
        "grader/harness/measure.py": ("def f():\n    from grader import judge\n",
                                      "grader.harness.measure (harness) imports grader.judge (phases)"),
        "grader/facts.py": ("from .harness.measure import CallResult\n",
                            "grader.facts (leaves) imports grader.harness.measure (harness)"),
    }
    for path, (text, named) in cases.items():
        _fake_tree(tmp_path, monkeypatch, {**base, path: text})
        try:
            test_the_engine_imports_run_down_its_layers()
        except AssertionError as e:
            assert named in str(e), str(e)
        else:
            raise AssertionError(f"not found: {path}: {text!r}")
    _fake_tree(tmp_path, monkeypatch, base)
    test_the_engine_imports_run_down_its_layers()   # the same tree without them passes


def test_a_module_without_a_layer_would_be_found(tmp_path, monkeypatch):
    _fake_tree(tmp_path, monkeypatch, {"grader/newphase.py": ""})
    try:
        test_every_engine_module_has_a_layer()
    except AssertionError as e:
        assert "grader.newphase" in str(e)
    else:
        raise AssertionError("grader.newphase has no layer and was not found")
