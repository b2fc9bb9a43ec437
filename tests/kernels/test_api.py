"""assignment/ and solutions/ expose the same public API. solutions/ is a plain
submission folder (no links): its layers and utils are assignment's files, and
each kernel file takes from .utils only what the student's utils.py defines.

What the stubs do when called, and what they may not contain: tests/kernels/test_stubs.py."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


def test_solutions_is_a_folder_of_plain_files():
    paths = [p for p in (ROOT / "solutions").iterdir() if p.name != "__pycache__"]
    assert not [p.name for p in paths if p.is_symlink()]
    assert sorted(p.name for p in paths) == sorted(("__init__.py", *KERNEL_FILES))


def test_solutions_layers_and_utils_are_assignments_bound_to_the_reference_kernels():
    import solutions
    import solutions.layers
    import solutions.utils
    assert Path(solutions.layers.__file__) == ROOT / "assignment" / "layers.py"
    assert Path(solutions.utils.__file__) == ROOT / "assignment" / "utils.py"
    assert solutions.layers.w8a8_mm is solutions.w8a8_mm
    assert solutions.layers.w4a16_mm is solutions.w4a16_mm
    assert solutions.layers.dds_mm is solutions.dds_mm
    assert Path(solutions.w8a8_mm.__code__.co_filename) == ROOT / "solutions" / "w8a8.py"


def _utils_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1
            and n.module == "utils" for a in n.names}


@pytest.mark.parametrize("folder", ["solutions", "calibration/naive", "assignment"])
def test_kernel_files_use_only_the_students_utils(folder):
    """The grader stages each kernel file next to assignment/utils.py: what a
    kernel file imports from .utils must be there, and utils.py holds only the
    student contract (checks and constants), no helper of the reference's."""
    utils = ROOT / "assignment" / "utils.py"
    tree = ast.parse(utils.read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for target in n.targets
                for t in ast.walk(target) if isinstance(t, ast.Name)}
    for name in KERNEL_FILES:
        used = _utils_imports(ROOT / folder / name)
        assert used and used <= defined, f"{folder}/{name} imports {used - defined} from .utils"
    assert all(n.startswith("check_") or n.isupper() for n in defined if not n.startswith("_")), defined


# What solutions/w8a8.py and w4a16.py both carry, copied (the grader stages one file per task).
SHARED_HELPERS = ("_release_next_kernel", "_wait_for_previous_kernel", "_grouped_tile", "_split_k_range",
                  "_split_k_reduce", "_interpreting", "_hopper_or_newer", "_dependent_launch", "_tma_ready",
                  "_split_k_workspace")


def _functions(path: Path) -> dict[str, str]:
    text = path.read_text()
    return {n.name: ast.get_source_segment(text, n) for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}


def test_the_quant_solutions_carry_identical_helpers():
    w8a8, w4a16 = (_functions(ROOT / "solutions" / n) for n in ("w8a8.py", "w4a16.py"))
    for helper in SHARED_HELPERS:
        assert helper in w8a8 and w8a8[helper] == w4a16.get(helper), helper
    shared = set(w8a8) & set(w4a16)
    assert shared - set(SHARED_HELPERS) == {"_config", "_select_config"}, shared   # each file's own


def test_the_solutions_keep_no_launch_plans():
    # Each call checks, selects and launches through kernel[grid](...): no table of
    # problems seen before, no compiled kernel kept (docs/performance.md, "The layers
    # in eager mode", shows the user's option: CUDA graphs).
    for name in KERNEL_FILES:
        text = (ROOT / "solutions" / name).read_text()
        assert not [w for w in ("_PLANS", "_Launch", "_bindable", "REUSE_PLANS", "compiled[") if w in text], name


def test_layer_class_names():
    import assignment
    for cls in ("QuantizedLinear_w8a8", "QuantLinear_w4a16", "SparseLinear"):
        assert hasattr(assignment, cls)

