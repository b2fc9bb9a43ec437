"""assignment/ and solutions/ expose the same public API; layers.py is shared.

What the stubs do when called, and what they may not contain: tests/test_stubs.py."""

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

