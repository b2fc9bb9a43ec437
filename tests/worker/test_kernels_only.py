"""The executor's module of the kernel file (grader/worker/kernels_only.py): its kernels and
constants, never its host code; kernel bodies held to Triton's language, whatever the static
check said; every honest kernel file of the repository loads."""

from __future__ import annotations

import glob
import sys
import textwrap
from pathlib import Path

import pytest

from grader.worker import kernels_only

ROOT = Path(__file__).resolve().parents[2]
HONEST = sorted({*glob.glob(str(ROOT / "solutions" / "*.py")), *glob.glob(str(ROOT / "calibration" / "*" / "*.py")),
                 *glob.glob(str(ROOT / "tests" / "variants" / "*.py")),
                 *glob.glob(str(ROOT / "tests" / "idioms" / "*_*.py")),
                 *glob.glob(str(ROOT / "tests" / "fixtures" / "from_the_handout" / "*.py")),
                 *glob.glob(str(ROOT / "tests" / "fixtures" / "tuned_student" / "**" / "*.py"), recursive=True),
                 *glob.glob(str(ROOT / "tests" / "fixtures" / "slow" / "*" / "*.py")),
                 *glob.glob(str(ROOT / "tests" / "fixtures" / "validation" / "**" / "*.py"), recursive=True),
                 str(ROOT / "tests" / "fixtures" / "student" / "w8a8_libdevice_error.py")}
               - {p for p in glob.glob(str(ROOT / "**" / "__init__.py"), recursive=True)}
               - {str(ROOT / "tests" / "idioms" / n) for n in ("check_corpus.py", "grade_corpus.py")})

HOST_CODE = '''
import os
import threading
import torch
import triton
import triton.language as tl

from .utils import BSR_BLOCK

MARK = {mark!r}
open(MARK, "w").write("module body ran")          # host code at import
threading.Thread(target=lambda: None).start()
SCALE: tl.constexpr = 2
HALF = tl.constexpr(SCALE * 0.5)
COMPUTED = tl.constexpr(int(os.environ.get("X", "1")))   # reads the environment: left out


def host_helper():
    open(MARK, "w").write("host function ran")


@triton.autotune(configs=[triton.Config({{"BLOCK": 16}})], key=["n"])
@triton.jit
def _kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE * HALF, mask=offs < n)


class Tuner:
    pass


_tuned = triton.autotune(configs=[], key=[])(_kernel)
'''


def _package(tmp_path, source: str, name: str = "w8a8"):
    pkg = tmp_path / "subpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text((ROOT / "assignment" / "utils.py").read_text())
    (pkg / f"{name}.py").write_text(textwrap.dedent(source))
    sys.path.insert(0, str(tmp_path))
    return "subpkg", name


def test_the_executor_runs_no_host_code_of_the_kernel_file(tmp_path, monkeypatch):
    mark = tmp_path / "ran"
    package, name = _package(tmp_path, HOST_CODE.format(mark=str(mark)))
    monkeypatch.delitem(sys.modules, "subpkg", raising=False)
    try:
        module = kernels_only.load(package, name)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("subpkg.w8a8", None)
    assert not mark.exists()
    assert hasattr(module, "_kernel") and module.SCALE == 2 and module.BSR_BLOCK == 32
    for absent in ("host_helper", "Tuner", "_tuned", "COMPUTED", "os", "threading"):
        assert not hasattr(module, absent), absent
    assert type(module._kernel).__name__ in ("InterpretedFunction", "JITFunction")   # autotune dropped
    assert "open" not in module.__builtins__ and "getattr" not in module.__builtins__


@pytest.mark.parametrize("body, words", [
    ("v = x_ptr.handle", ".handle"),
    ("v = hasattr(x_ptr, 'handle')", "hasattr"),
    ("v = getattr(x_ptr, 'dtype')", "getattr"),
    ("v = x_ptr.dtype.__class__", ".__class__"),
    ("v = tl.core.tensor", ".core"),
    ("v = tl.load(x_ptr).astype", ".astype"),
    ("import os", "import"),
    ("v = __builtins__", "__builtins__"),
    ("v = (lambda: 0)()", "lambda"),
    ("v = tl.semantic", ".semantic"),
    ("v = isinstance(x_ptr, tl.constexpr)", "isinstance"),   # True compiled, False interpreted
])
def test_a_kernel_body_is_held_to_tritons_language(body, words):
    source = f"import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr):\n    {body}\n"
    with pytest.raises(kernels_only.KernelRefused, match=words.replace(".", r"\.").replace("(", r"\(")):
        kernels_only.kernel_tree(source, "k.py")


@pytest.mark.parametrize("path", HONEST, ids=lambda p: str(Path(p).relative_to(ROOT)))
def test_every_honest_kernel_file_loads(path):
    tree = kernels_only.kernel_tree(Path(path).read_text(), path)
    assert any(type(n).__name__ == "FunctionDef" for n in tree.body) or "assignment" in path


def _load(tmp_path, monkeypatch, source: str):
    name = f"pkg_{abs(hash(str(tmp_path)))}"   # a package of its own per call: nothing cached between them
    pkg = tmp_path / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text((ROOT / "assignment" / "utils.py").read_text())
    (pkg / "w8a8.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        return kernels_only.load(name, "w8a8")
    finally:
        sys.modules.pop(f"{name}.w8a8", None)
        sys.modules.pop(name, None)


HIDDEN_DEF = '''import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr):
    tl.store(y_ptr, tl.load(x_ptr) * 0)
    """
def _k(x_ptr, y_ptr):
    tl.store(y_ptr, tl.load(x_ptr))
    #"""
'''


def test_a_kernel_runs_only_as_it_was_checked(tmp_path, monkeypatch):
    """The interpreter re-reads a kernel's text from its last line that starts with `def `, the
    compiler from its first: a `def` inside a string would have the interpreter run code that
    neither kernels_only nor the gate saw. Such a kernel is refused at load (red team, round 2)."""
    with pytest.raises(kernels_only.KernelRefused, match="interpreter's reading of its source"):
        _load(tmp_path, monkeypatch, HIDDEN_DEF)
    fine = HIDDEN_DEF.replace('"""\ndef _k', '"""\n  _k').replace("#\"\"\"", "\"\"\"")
    module = _load(tmp_path / "fine", monkeypatch, fine)   # the same string without a `def` line loads
    assert hasattr(module, "_k")


def test_the_kernels_have_no_import_at_hand(tmp_path, monkeypatch):
    module = _load(tmp_path, monkeypatch, "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                                          "def _k(x_ptr):\n    tl.store(x_ptr, 1.0)\n")
    assert "__import__" not in module.__builtins__ and "tl" in vars(module)


@pytest.mark.parametrize("test, refused", [
    ("tl.constexpr(B) is B", True), ("B is not 1", True), ("B is None", False), ("B is not None", False)])
def test_is_compares_only_with_none_in_a_kernel(test, refused):
    """`tl.constexpr(B) is B`: True for the compiler (it unwraps constexprs), False in the interpreter."""
    source = f"import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr, B: tl.constexpr):\n" \
             f"    if {test}:\n        tl.store(x_ptr, 1.0)\n"
    if refused:
        with pytest.raises(kernels_only.KernelRefused, match="uses `is`"):
            kernels_only.kernel_tree(source, "k.py")
    else:
        kernels_only.kernel_tree(source, "k.py")


@pytest.mark.parametrize("path", [p for p in HONEST if "assignment" not in p and "check_corpus" not in p
                                  and "grade_corpus" not in p], ids=lambda p: str(Path(p).relative_to(ROOT)))
def test_every_honest_kernel_reads_the_same_to_the_compiler_and_the_interpreter(tmp_path, monkeypatch, path):
    module = _load(tmp_path, monkeypatch, Path(path).read_text())
    assert any(hasattr(v, "fn") for v in vars(module).values()), path


def test_a_kernel_has_one_name_and_one_function():
    """The compiler names a compiled helper by its name: a second @triton.jit function of the same
    name, reached through a constant that aliases it, was one function to the compiler and two to the
    interpreter (red team, round 4). A second of one name is refused; an alias is no constant."""
    two = "import triton\n\n@triton.jit\ndef h(x):\n    return x\n\n@triton.jit\ndef h(x):\n    return x + 1\n"
    with pytest.raises(kernels_only.KernelRefused, match="a second @triton.jit function of that name"):
        kernels_only.kernel_tree(two, "k.py")
    alias = "import triton\n\n@triton.jit\ndef h(x):\n    return x\n\nh2 = h\nN = 4\n"
    kept = [getattr(t, "id", None) for n in kernels_only.kernel_tree(alias, "k.py").body
            for t in getattr(n, "targets", [])]
    assert kept == ["N"]


@pytest.mark.parametrize("body, refused", [
    # A comprehension's variable may be any name (the executor binds it as the compiler does), but not a
    # module-level one: the comprehension may sit in a loop.
    ("a = tl.load(x_ptr)\n    t = [0 for a in (0,)]\n    tl.store(x_ptr, a)", None),
    ("t = [i * 2 for i in (1, 2)]\n    tl.store(x_ptr, t[0])", None),
    ("t = [A * 2 for A in (1, 2)]\n    tl.store(x_ptr, t[0])", "sets a local A"),
    # A name first set in a loop is forgotten by the compiler after it, which then reads the module's.
    ("for _ in range(1):\n        A = tl.load(x_ptr)\n    tl.store(x_ptr, A)",
     "sets a local A, which is also a module"),
    ("for _ in range(1):\n        max = tl.load(x_ptr)\n    tl.store(x_ptr, max)",
     "sets a local max, which is also a builtin"),
    ("B = tl.load(x_ptr)\n    tl.store(x_ptr, B)", None),
])
def test_names_the_compiler_and_python_scope_differently_are_refused(body, refused):
    source = ("import triton\nimport triton.language as tl\n\nA = tl.constexpr(0)\n\n\n@triton.jit\n"
              f"def k(x_ptr, A_param, BLOCK: tl.constexpr):\n    {body}\n")
    if refused:
        with pytest.raises(kernels_only.KernelRefused, match=refused):
            kernels_only.kernel_tree(source, "k.py")
    else:
        kernels_only.kernel_tree(source, "k.py")


def test_a_parameter_may_share_a_module_constants_name():
    """A parameter is bound before any block, so the compiler never falls back to the module's."""
    source = ("import triton\nimport triton.language as tl\n\nBLOCK = tl.constexpr(64)\n\n\n@triton.jit\n"
              "def k(x_ptr, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)\n")
    kernels_only.kernel_tree(source, "k.py")


def test_the_builtins_refused_as_locals_are_the_code_generators():
    from triton.compiler.code_generator import CodeGenerator

    assert kernels_only.CODEGEN_BUILTINS == set(CodeGenerator.builtin_namespace)
