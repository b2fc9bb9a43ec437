"""assignment/ and solutions/ expose the same public API; layers.py is shared."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNEL_FILES = ("w8a8.py", "w4a16.py", "dds.py")


def _public_functions(path: Path) -> dict[str, tuple[str, str]]:
    """name -> (signature source, docstring) of every public top-level function."""
    tree = ast.parse(path.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            out[node.name] = (ast.unparse(node.args) + " -> " + ast.unparse(node.returns),
                              ast.get_docstring(node))
    return out


@pytest.mark.parametrize("name", KERNEL_FILES)
def test_stub_and_solution_share_public_api(name):
    stub = _public_functions(ROOT / "assignment" / name)
    sol = _public_functions(ROOT / "solutions" / name)
    assert stub.keys() == sol.keys(), f"{name}: public functions differ: {stub.keys()} vs {sol.keys()}"
    for fn in stub:
        assert stub[fn][0] == sol[fn][0], f"{name}:{fn}: signature differs"
        assert stub[fn][1] == sol[fn][1], f"{name}:{fn}: docstring differs"
        assert stub[fn][1], f"{name}:{fn}: no docstring"


@pytest.mark.parametrize("name", ["layers.py", "utils.py", "__init__.py"])
def test_shared_files_are_identical(name):
    assert (ROOT / "assignment" / name).read_bytes() == (ROOT / "solutions" / name).read_bytes()


def test_layer_class_names():
    import assignment
    for cls in ("QuantizedLinear_w8a8", "QuantLinear_w4a16", "SparseLinear"):
        assert hasattr(assignment, cls)


@pytest.mark.parametrize("name,call", [
    ("w8a8", "w8a8_mm"), ("w4a16", "w4a16_mm"), ("dds", "dds_mm")])
def test_stub_raises_not_implemented_naming_the_task(name, call):
    from tests.helpers import problem
    import importlib
    fn = getattr(importlib.import_module(f"assignment.{name}"), call)
    shape = (2, 64, 64)
    args, _ = problem(name, shape, seed=0)
    with pytest.raises(NotImplementedError, match=name.upper()):
        fn(*args)
