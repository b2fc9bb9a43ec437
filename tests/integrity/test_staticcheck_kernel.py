"""Inside a @triton.jit function the static check allows what Triton's language has, nothing else.

- Attributes: the public attributes of Triton's language values (tensor, dtype, pointer and
  block types, constexpr, tensor descriptor, tuple), listed as data (policy.KERNEL_ATTRS) and
  held against the installed Triton: every public attribute is either listed or refused with
  its reason, and nothing else is named.
- No builtin that answers differently in the CPU interpreter and the GPU compiler
  (``hasattr``, ``getattr``, ``isinstance``), no host module (``os.environ``) in a kernel.
- Globals a kernel reads are constants, and a ``tl.constexpr(...)`` holds a number, a bool, a
  string or a dtype: never the environment, a callable or a module.
- The red team's three files (tests/fixtures/submissions/) get findings; honest kernels none.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.staticcheck import check_source

SUBMISSIONS = Path(__file__).resolve().parents[1] / "fixtures" / "submissions"
HEADER = "import os\nimport math\nimport dataclasses\nimport torch\nimport triton\nimport triton.language as tl\n"
HEADER_LINES = HEADER.count("\n")
KERNEL = "@triton.jit\ndef k(p, q, B: tl.constexpr, DT: tl.constexpr):\n"


def _findings(src: str) -> list[str]:
    return [str(f) for f in check_source(HEADER + src)]


def _rules_after_header(src: str) -> set[str]:
    return {f.rule for f in check_source(HEADER + src) if f.line > HEADER_LINES}


def _triton_public_attrs() -> set[str]:
    """The public attributes of the installed Triton's language values: their classes' methods and
    properties, and what their constructors set on real instances."""
    import triton.language as tl
    import triton.language.core as core

    from grader.staticcheck.policy import KERNEL_VALUE_CLASSES

    block = tl.block_type(tl.float16, [16])
    instances = [tl.tensor(None, tl.float32), tl.float16, tl.int8, tl.uint8, tl.pointer_type(tl.float16), block,
                 tl.constexpr(1), core.tensor_descriptor(None, [tl.constexpr(16)], [tl.constexpr(1)], block),
                 tl.tuple([tl.constexpr(1)])]
    names = {n for c in KERNEL_VALUE_CLASSES for n in dir(getattr(core, c))}
    names |= {n for o in instances for n in vars(o)}
    return {n for n in names if not n.startswith("_")}


def test_the_kernel_attribute_list_is_the_installed_tritons_public_api():
    from grader.staticcheck.policy import KERNEL_ATTRS, KERNEL_REFUSED_ATTRS

    api = _triton_public_attrs()
    assert not KERNEL_ATTRS & set(KERNEL_REFUSED_ATTRS)
    assert api - KERNEL_ATTRS - set(KERNEL_REFUSED_ATTRS) == set(), "new in Triton: list or refuse each"
    assert (KERNEL_ATTRS | set(KERNEL_REFUSED_ATTRS)) - api == set(), "no longer in Triton: drop each"
    assert {"dtype", "shape", "numel", "T", "to", "reshape", "trans", "value", "load", "store", "advance",
            "element_ty", "primitive_bitwidth", "block_shape"} <= KERNEL_ATTRS
    assert "handle" in KERNEL_REFUSED_ATTRS


def test_the_kernel_builtins_are_those_the_gpu_compiler_knows():
    from triton.compiler.code_generator import CodeGenerator

    from grader.staticcheck.policy import KERNEL_BUILTINS, KERNEL_REFUSED_BUILTINS

    known = set(CodeGenerator.builtin_namespace)
    assert KERNEL_BUILTINS | set(KERNEL_REFUSED_BUILTINS) == known
    assert not KERNEL_BUILTINS & set(KERNEL_REFUSED_BUILTINS)


# --- the red team's files ----------------------------------------------------------------------

def _fixture(name: str) -> list[str]:
    return [str(f) for f in check_source((SUBMISSIONS / f"{name}.py").read_bytes(), set())]


def test_an_interpret_env_constexpr_branch_is_refused():
    found = _fixture("w8a8_interpret_env_branch_numpy")
    assert any("[kernel-global]" in f and "reads the environment" in f and f.startswith("line 28,") for f in found)
    assert any("[kernel-global]" in f and "_CPU" in f for f in found)            # the branch on it
    assert any("[kernel-global]" in f and f.startswith("line 29,") for f in found)  # tl.constexpr(astuple)
    assert any("[attribute]" in f and ".handle" in f for f in found)


def test_a_hasattr_branch_is_refused():
    found = _fixture("w8a8_hasattr_branch_numpy")
    assert any("[introspection]" in f and "hasattr" in f and f.startswith("line 35,") for f in found)
    assert any("[attribute]" in f and ".handle" in f and "interpreter's internals" in f for f in found)
    assert any("[attribute]" in f and ".astype" in f for f in found)


def test_numpy_ctypes_in_a_kernel_is_refused():
    found = _fixture("w8a8_ctypes_runs_python_in_executor")
    for attr in (".ctypes", "._ctypes", ".pythonapi", ".PyRun_SimpleString", "._data"):
        assert any("[attribute]" in f and f"uses {attr} in a @triton.jit function" in f for f in found), attr


# --- each rule, one line at a time (each of these passed the check before) ---------------------

REFUSED = {
    ".handle": (KERNEL + "    x = p.handle", "attribute"),
    "a numpy method": (KERNEL + "    x = tl.load(p).astype('float64')", "attribute"),
    "an attribute off any list": (KERNEL + "    x = tl.load(p).whatever", "attribute"),
    "a dunder that gives text": (KERNEL + "    x = p.__name__", "introspection"),
    "hasattr": (KERNEL + "    if hasattr(p, 'dtype'):\n        pass", "introspection"),
    "getattr with a literal name": (KERNEL + "    x = getattr(p, 'dtype')", "introspection"),
    "isinstance on a kernel value": (KERNEL + "    if isinstance(p, tl.tensor):\n        pass", "introspection"),
    "hasattr as a value": (KERNEL + "    h = hasattr", "introspection"),
    "os.environ in a kernel": (KERNEL + "    if os.environ.get('TRITON_INTERPRET') == '1':\n        pass",
                               "not-allowed"),
    "dataclasses in a kernel": (KERNEL + "    x = dataclasses.astuple(p)", "not-allowed"),
    "tl.constexpr of the environment": ("_C = tl.constexpr(os.environ.get('TRITON_INTERPRET', '0') == '1')",
                                        "kernel-global"),
    "tl.constexpr of os.getenv": ("_C = tl.constexpr(os.getenv('TRITON_INTERPRET'))", "kernel-global"),
    "tl.constexpr of a function": ("_AS = tl.constexpr(dataclasses.astuple)", "kernel-global"),
    "tl.constexpr of a module": ("_M = tl.constexpr(math)", "kernel-global"),
    "tl.constexpr of a lambda": ("_F = tl.constexpr(lambda a: a)", "kernel-global"),
    "tl.constexpr of a torch dtype": ("_D = tl.constexpr(torch.float16)", "kernel-global"),
    "a global from the environment read in a kernel": (
        "_CPU = os.environ.get('TRITON_INTERPRET') == '1'\n" + KERNEL + "    if _CPU:\n        pass",
        "kernel-global"),
    "a constexpr made through an alias": (
        "C = tl.constexpr\n_X = C(os.getenv('X'))\n" + KERNEL + "    if _X:\n        pass", "kernel-global"),
    "a global that a function rebinds": (
        "_G = 1\ndef f():\n    global _G\n    _G = 2\n" + KERNEL + "    x = _G", "kernel-global"),
    "a global bound by a loop": ("for _G in range(2):\n    pass\n" + KERNEL + "    x = _G", "kernel-global"),
    "a plain function called in a kernel": ("def helper(a):\n    return a\n" + KERNEL + "    x = helper(p)",
                                            "kernel-global"),
    "a class used in a kernel": ("class H:\n    pass\n" + KERNEL + "    x = H()", "kernel-global"),
    "a lambda global called in a kernel": ("_h = lambda a: a\n" + KERNEL + "    x = _h(p)", "kernel-global"),
    "str of a tensor (its values as text)": (KERNEL + "    s = str(tl.load(p))", "builtin"),
    "a builtin the GPU compiler does not know": (KERNEL + "    x = abs(tl.load(p))", "builtin"),
    "type in a kernel": (KERNEL + "    t = type(p)", "builtin"),
    # a host function that a kernel calls (passed as a constexpr) with an own class's annotation
    # may not read the interpreter's handles either: no class of the file may declare the name
    ".handle through an annotation on the host": (
        "class Own:\n    handle = None\n    _flatten_ir = None\n"
        "def helper(t: Own):\n    return dataclasses.astuple(t.handle)[0]\n"
        + KERNEL + "    y = B(tl.load(p))\ndef f(x):\n    k[(1,)](x, x, helper, tl.float16)", "attribute"),
    "calling a parameter (a host function passed in)": (
        "def helper(t):\n    return str(t)\n" + KERNEL + "    y = B(tl.load(p))\n"
        "def f(x):\n    k[(1,)](x, x, helper, tl.float16)", "jit-call"),
    "calling a lambda": (KERNEL + "    y = (lambda a: a)(tl.load(p))", "jit-call"),
    "str inside a lambda in a kernel": (KERNEL + "    g = lambda a: str(a)", "builtin"),
    "a def inside a kernel is kernel code": (KERNEL + "    def g(a):\n        return str(a)\n    y = g(p)",
                                              "builtin"),
    "._flatten_ir through an annotation on the host": (
        "class Own:\n    _flatten_ir = None\ndef helper(t: Own):\n    hs = []\n    t._flatten_ir(hs)\n"
        "    return hs[0]", "attribute"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_each_kernel_rule_refuses(name):
    src, rule = REFUSED[name]
    assert rule in _rules_after_header(src), _findings(src)


# --- honest kernels pass --------------------------------------------------------------------

HONEST = {
    "tensor, dtype and constexpr attributes": (
        KERNEL + "    x = tl.load(p)\n    y = x.to(tl.float32).reshape(4, 4).trans().T\n"
        "    n = x.shape[0] + x.numel + B.value + DT.primitive_bitwidth + x.dtype.primitive_bitwidth\n"
        "    e = p.dtype.element_ty\n    f = p.type.element_ty.is_fp16() or x.dtype.is_int_signed()\n"
        "    z = y.sum(axis=0) + y.max(0) + tl.float16.primitive_bitwidth\n"
        "    tl.store(q, z.to(q.dtype.element_ty))"),
    "block pointers and tensor descriptors": (
        KERNEL + "    b = tl.make_block_ptr(p, (4, 4), (4, 1), (0, 0), (4, 4), (1, 0))\n"
        "    x = tl.load(b.advance((0, 4)))\n"
        "    d = tl.make_tensor_descriptor(q, shape=[16], strides=[1], block_shape=[16])\n"
        "    d.store([0], d.load([0]) + d.block_shape[0])"),
    "constexpr globals": (
        "_MAGIC = tl.constexpr(12582912.0)\n_NEG = tl.constexpr(-float('inf'))\n_DT = tl.constexpr(tl.float16)\n"
        "_BIG = tl.constexpr(2 ** 20 + 1)\n_LOG = tl.constexpr(int(math.log2(64)))\n_FLAG = tl.constexpr(True)\n"
        "_MODE = tl.constexpr('ieee')\n_B = tl.constexpr(triton.next_power_of_2(100))\n"
        "_PI = tl.constexpr(math.pi)\n_T = tl.constexpr((1, 2))\n_X = tl.constexpr(_BIG * 2)\n"
        "BLOCK = 64\n_Y = tl.constexpr(BLOCK)\n"
        + KERNEL + "    x = tl.load(p) + _MAGIC + _NEG + _BIG + _LOG + _PI + _X + _Y + BLOCK\n"
        "    if _FLAG:\n        tl.store(q, x.to(_DT))\n    y = _MAGIC.value"),
    "a kernel calling another kernel, range and min": (
        "@triton.jit\ndef _helper(a):\n    return a * 2\n" + KERNEL +
        "    acc = 0.0\n    for i in range(0, min(B, 4)):\n        acc += _helper(tl.load(p + i))\n"
        "    tl.store(q, acc)"),
    "a global naming the kernel language": (
        "_dot = tl.dot\n_F32 = tl.float32\n" + KERNEL + "    x = tl.load(p)\n    tl.store(q, _dot(x, x).to(_F32))"),
    "reading the environment on the host": (
        "SMALL = os.environ.get('TRITON_INTERPRET') == '1'\n" + KERNEL + "    pass\n"
        "def f(x):\n    k[(1,)](x, x, 16 if SMALL else 64, tl.float16)"),
}


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_kernel_code_gives_no_finding(name):
    assert _findings(HONEST[name]) == []
