"""The static check of kernel files (grader/staticcheck/).

- Legitimate code gives no findings: the reference solutions, the naive
  kernels, the stubs, an honest student's tutorial-style file, and snippets of
  what first-time Triton students write.
- Each rule of handout.md's "What counts as cheating" had a one-line bypass
  that the old denylist missed (HANDOUT_BYPASSES); each is refused now, as are
  the other known tricks (MORE_BYPASSES).
- No input makes the check raise: pathological and fuzzed sources give
  findings or none.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from grader.staticcheck import MAX_SOURCE_BYTES, Finding, check_source
from tests.helpers import scaled

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "static"
LEGIT = [p for d in ("assignment", "solutions", "calibration/naive") for p in sorted((ROOT / d).glob("*.py"))
         if p.name in ("w8a8.py", "w4a16.py", "dds.py")]

HEADER = "import torch\nimport triton\nimport triton.language as tl\nimport os\nimport functools\nimport typing\n"
HEADER_LINES = HEADER.count("\n")


def _rules(src: str, **kw) -> set[str]:
    return {f.rule for f in check_source(HEADER + src, **kw)}


# --- legitimate code --------------------------------------------------------------------------

@pytest.mark.parametrize("path", LEGIT, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_reference_naive_and_stub_files_give_no_findings(path):
    assert len(LEGIT) == 9
    assert check_source(path.read_bytes(), set()) == []


def test_honest_student_file_gives_no_findings():
    assert check_source((FIXTURES / "honest_student.py").read_bytes(), set()) == []


OK_SNIPPETS = {
    "a kernel passed to a launcher of the file's own": "@triton.jit\ndef k(x):\n    pass\n"
                                                       "def launch(kernel, grid, *args):\n    kernel[grid](*args)\n"
                                                       "def f(x):\n    launch(k, (1,), x)\n    ks = [k, k]",
    "launches as statements, or returned": "@triton.jit\ndef k(x):\n    pass\ndef f(x):\n    k[(1,)](x)\n"
                                           "    return k[(1,)](x, num_warps=4)",
    "imports": "import math\nfrom functools import lru_cache\nfrom .utils import check_dds_inputs, BSR_BLOCK\n"
               "from . import utils\nx = utils.BSR_BLOCK\nfrom triton.language.extra import libdevice",
    "env read": "if os.environ.get('TRITON_INTERPRET') == '1' or os.getenv('X'):\n    pass",
    "kernel may use @ and tl.dot": "@triton.jit\ndef k(a, b):\n    c = tl.dot(a, b)\n    d = a @ b\n"
                                   "    e = (a * b).sum(1) + tl.sum(c, axis=0)\n    return d.to(tl.float16)",
    "from triton import jit": "from triton import jit\n@jit\ndef k(a, b):\n    return a @ b\n"
                              "def f(x):\n    k[(1,)](x, x)",
    "tensor metadata": "def f(y, w):\n    z = y.contiguous().view(-1).t().T\n    s = y.stride(0) * y.shape[1]\n"
                       "    n = y.numel() + y.dim() + y.size(0) + y.element_size()\n"
                       "    return w.crow_indices(), w.col_indices(), w.values().shape, w._nnz(), y.item()",
    "allocation": "def f(x):\n    a = torch.empty((3, 4), device=x.device, dtype=torch.float16)\n"
                  "    b = torch.zeros_like(x) if x.is_cuda else x.new_empty((2,))\n    return torch.arange(4)",
    "getattr with a literal name": "def f(y):\n    return getattr(y, 'shape'), getattr(y, 'dtype', None)",
    "gpu queries": "cap = torch.cuda.get_device_capability()\n"
                   "sms = torch.cuda.get_device_properties(0).multi_processor_count\n"
                   "t = triton.runtime.driver.active.get_current_target()",
    "errors": "def f(x):\n    if x.dtype != torch.float16:\n"
              "        raise ValueError(f'x must be float16, got {x.dtype}')",
    "config caching": "@functools.lru_cache(maxsize=None)\ndef cfg(M):\n"
                      "    return {'BLOCK_M': triton.next_power_of_2(M)}",
    "autotune and heuristics": "@triton.autotune(configs=[triton.Config({'B': 32}, num_warps=4)], key=['n'])\n"
                               "@triton.heuristics({'EVEN': lambda a: a['n'] % a['B'] == 0})\n@triton.jit\n"
                               "def k(p, n, B: tl.constexpr, EVEN: tl.constexpr):\n    pass",
    "parameter named input, local named sum": "def f(input):\n    sum = 0\n    for s in input.shape:\n"
                                              "        sum += s\n    return sum",
    "hasattr on a module": "HAS_TMA = hasattr(tl, 'make_tensor_descriptor') and hasattr(torch.cuda, 'foo')",
    "own class attributes": "class C:\n    BLOCK_M = 64\n    def __init__(self, device):\n        self.splits = 2\n"
                            "        self.device = device\n        self.shape = (1, 2)\n"
                            "c = C(0)\nn = c.BLOCK_M * c.splits",
    "finfo and iinfo": "a, b = torch.finfo(torch.float16).max, torch.iinfo(torch.int8).min",
    "no_grad and dtypes": "@torch.no_grad()\ndef f(x: torch.Tensor) -> typing.Optional[torch.Tensor]:\n"
                          "    return x.to(torch.float32) if isinstance(x, torch.Tensor) else None",
    "print and dict caching": "_C = {}\ndef f(x):\n    print(f'{x.shape}')\n"
                              "    return _C.setdefault(tuple(x.shape), 1)",
    "version string": "v = triton.__version__ + torch.__version__",
    "PDL probe": "import dataclasses\nfrom triton.backends.nvidia.compiler import CUDAOptions\n"
                 "PDL = 'launch_pdl' in {f.name for f in dataclasses.fields(CUDAOptions)}",
    "choosing a kernel variant": "@triton.jit\ndef _a(p):\n    pass\n@triton.jit\ndef _b(p):\n    pass\n"
                                 "def f(x, M):\n    kernel = _a if M <= 16 else _b\n    k2 = kernel\n"
                                 "    k2[(1,)](x)\n    return kernel[(M,)](x)",
    "a local variable named like a kernel": "@triton.jit\ndef k(p):\n    pass\ndef f(x):\n    k = len(x)\n"
                                            "    return k + 1",
    "own classes: instances, constants, static and class methods, super": (
        "import dataclasses\nclass B:\n    BLOCK = 64\n    def __init__(self, a):\n        self.a = a\n"
        "    def go(self, other: 'B') -> 'B':\n        return self\n"
        "    @staticmethod\n    def s(a):\n        return a\n"
        "    @classmethod\n    def make(cls):\n        return cls(cls.BLOCK)\n"
        "class D(B):\n    def __init__(self, a):\n        B.__init__(self, a)\n        super().__init__(a)\n"
        "@dataclasses.dataclass\nclass Cfg:\n    bm: int = 64\n"
        "def f(c: Cfg, b: B) -> Cfg:\n    d = D(1)\n    ok = isinstance(d, (B, D)) and type(d) is D\n"
        "    return Cfg(bm=c.bm + B.BLOCK + B.s(1) + B.make().a + d.go(b).a)"),
    "the kernel language": "@triton.jit\ndef k(p, n: tl.constexpr):\n    o = tl.arange(0, n)\n"
                           "    x = tl.load(p + o, mask=o < n, other=0.0).to(tl.float32)\n"
                           "    y = tl.math.div_rn(x, 3.0) + tl.extra.cuda.libdevice.rint(x) + tl.sum(x, axis=0)\n"
                           "    tl.extra.cuda.gdc_wait()\n    tl.store(p + o, tl.where(o < n, y, 0.0), mask=o < n)\n"
                           "    tl.extra.cuda.gdc_launch_dependents()",
}


HANDOUT_TABLE = """
import math, functools, typing, dataclasses, itertools, collections, enum, warnings
from triton.language.extra import libdevice
from .utils import check_w8a8_inputs
def f(x, w):
    a = torch.empty(1), torch.zeros(1), torch.ones(1), torch.full((1,), 0), torch.empty_like(x), torch.arange(3)
    b = torch.tensor([1]), torch.float16, torch.device("cpu"), isinstance(x, torch.Tensor)
    c = torch.finfo(torch.float16), torch.iinfo(torch.int8), torch.no_grad()
    d = torch.cat([x]), torch.stack([x]), torch.diff(x), torch.repeat_interleave(x, 2), torch.sort(x), torch.argsort(x)
    e = torch.cuda.is_available(), torch.cuda.get_device_capability(), torch.cuda.get_device_properties(0)
    g = x.shape, x.stride(), x.dtype, x.device, x.numel(), x.dim(), x.size(), x.view(-1), x.reshape(-1), x.t()
    h = x.transpose(0, 1), x.permute(1, 0), x.unsqueeze(0), x.contiguous(), x.to(torch.float16), x.half()
    i = x.float(), x.clone(), x.zero_(), x.fill_(0), x.copy_(x), x.new_empty(1), w.crow_indices()
    j = w.col_indices(), w.values(), x.item(), triton.cdiv(3, 2), triton.next_power_of_2(3), triton.Config({})
    k = len(x), range(3), min(1, 2), max(1, 2), print(f"{x}"), ValueError("x"), math.prod([1]), math.ceil(1.5)
    m = functools.partial(f, 1), typing.Optional[int], os.environ.get("A"), os.getenv("A"), warnings.warn("w")
    n = getattr(x, "shape")
    return a, b, c, d, e, g, h, i, j, k, m, n

@functools.lru_cache(maxsize=None)
def cfg(M):
    return M

@dataclasses.dataclass
class C:
    a: int = 1

E = enum.Enum("E", "a b")
P = collections.namedtuple("P", "a b")

@triton.autotune(configs=[], key=[])
@triton.heuristics({})
@triton.jit
def k(p):
    tl.store(p, libdevice.rint(tl.load(p)))
"""


def test_what_the_handout_table_allows_is_allowed():
    assert check_source(HEADER + HANDOUT_TABLE) == []


@pytest.mark.parametrize("name", OK_SNIPPETS)
def test_what_honest_students_write_is_allowed(name):
    assert check_source(HEADER + OK_SNIPPETS[name]) == []


# --- the 17 one-line bypasses of the old denylist, one per handout rule ----------------------------
# Each passed the denylist this check replaced (`git show e256abe:grader/staticcheck.py`) with no finding.

HANDOUT_BYPASSES = {
    "torch.matmul": ('y = getattr(torch, "matmul")(x, w)', "torch-product"),
    "@": ("y = x.__matmul__(w)", "torch-product"),
    "mm/bmm/addmm": ("y = torch.linalg.vecdot(x[:, None, :], w[None, :, :])", "torch-product"),
    "einsum": ('y = getattr(torch, "ein" "sum")("mk,nk->mn", x, w)', "torch-product"),
    "F.linear": ('y = torch.nn.functional.embedding_bag(idx, w.t(), per_sample_weights=x.flatten(), mode="sum")',
                 "torch-product"),
    "_int_mm/_weight_int4pack_mm": ("y = torch._trilinear(x.unsqueeze(1), w.unsqueeze(0), one, [], [], [], [2])",
                                    "torch-product"),
    "to_dense()": ("w = weight_bsr._to_dense()", "torch-product"),
    "convolutions": ("y = torch.conv3d(x[None, :, :, None, None], w[:, :, None, None, None])", "torch-product"),
    "broadcast multiply-and-sum": ("y = (x[:, None, :] * w[None, :, :]).sum(-1)", "torch-product"),
    "a @triton.jit kernel of your file": ("jit = lambda f: f\n@jit\ndef _kernel(x, w):\n    return torch.matmul(x, w)",
                                          "torch-product"),
    "import only the listed modules": ("from .utils import os as _os", "import"),
    "no imports between files": ('w4 = os.sys.modules[__package__ + ".w4a16"]', "not-allowed"),
    "no monkeypatching": ("Event = torch.cuda.Event; Event.elapsed_time = lambda self, end: 1e-3", "patching"),
    "no eval/exec/compile/__import__": ("torch.serialization.pickle.loads(b\"cos\\nsystem\\n(S'id'\\ntR.\")",
                                        "not-allowed"),
    "no open or file writes": ('torch.tensor([104, 105], dtype=torch.uint8).numpy().tofile("/tmp/x")', "attribute"),
    "no setattr/globals/computed getattr/introspection": ('mm = getattr(torch, "__dict__")["matmul"]',
                                                          "introspection"),
    "no processes or signals": ('torch.os.system("id")', "not-allowed"),
}

MORE_BYPASSES = {
    # the product in PyTorch, by other names
    "alias then call": ("mm = torch.matmul\ny = mm(x, w)", "torch-product"),
    "walrus alias": ("y = (mm := torch.matmul)(x, w)", "torch-product"),
    "from-import alias": ("from torch import matmul as mm", "torch-product"),
    "torch.ops.aten.mm": ("y = torch.ops.aten.mm(x, w)", "torch-product"),
    "torch.ops int4pack": ("y = torch.ops.aten._weight_int4pack_mm(x, w, 128, s)", "torch-product"),
    "F as an import": ("import torch.nn.functional as F", "torch-product"),
    "F.embedding_bag": ("import torch.nn.functional as F\ny = F.embedding_bag(i, w, per_sample_weights=x)",
                        "torch-product"),
    "@ on tensors": ("y = x @ w", "torch-product"),
    "@= on tensors": ("x @= w", "torch-product"),
    "x.matmul": ("y = x.matmul(w)", "torch-product"),
    "x.mm": ("y = x.mm(w)", "torch-product"),
    "Tensor.matmul": ("y = torch.Tensor.matmul(x, w)", "torch-product"),
    "type(x).__matmul__": ("y = type(x).__matmul__(x, w)", "torch-product"),
    "x.__rmatmul__": ("y = w.__rmatmul__(x)", "torch-product"),
    "operator.matmul": ("import operator\ny = operator.matmul(x, w)", "import"),
    "lambda with @": ("y = (lambda a, b: a @ b)(x, w)", "torch-product"),
    "computed attribute name": ('y = getattr(x, "mat" + "mul")(w)', "introspection"),
    "numpy product": ("y = x.numpy() @ w.numpy()", "attribute"),
    "builtin sum of broadcasts": ("y = sum(x[:, k, None] * w[None, :, k] for k in range(64))", "torch-product"),
    "functools.reduce": ("y = functools.reduce(lambda a, b: a + b, parts)", "torch-product"),
    "math.sumprod": ("import math\ny = math.sumprod(a, b)", "torch-product"),
    "sparse mm": ("y = torch.sparse.mm(w, x.t())", "torch-product"),
    "to_dense": ("w = weight_bsr.to_dense()", "torch-product"),
    "elementwise dequantize in PyTorch": ("w = torch.clamp(torch.round(x / s), -128, 127)", "not-allowed"),
    # kernels that are not kernels
    "local def jit hides @": ("def jit(f):\n    return f\n@jit\ndef k(x, w):\n    return x @ w", "torch-product"),
    "rebinding triton.jit": ("from triton import jit\ndef jit(f):\n    return f", "patching"),
    "rebinding tl": ("tl = torch", "patching"),
    "parameter shadows tl": ("def f(tl, a, b):\n    return tl.dot(a, b)", "patching"),
    "calling a kernel as Python": ("@triton.jit\ndef k(x, w):\n    return x @ w\ny = k(x, w)", "jit-call"),
    "kernel.fn": ("@triton.jit\ndef k(x, w):\n    return x @ w\ny = k.fn(x, w)", "attribute"),
    "keeping a launch's compiled kernel": ("@triton.jit\ndef k(x):\n    pass\nc = k[(1,)](x)\nc[(1,)](x)", "jit-call"),
    "a launch kept through a lambda": ("@triton.jit\ndef k(x):\n    pass\nplain = lambda: k[(1,)](x)", "jit-call"),
    "decorator that gets the kernel": ("class L:\n    def __init__(self, k):\n        self.k = k\n"
                                       "    def __getitem__(self, grid):\n        return self.k\n"
                                       "@L\n@triton.jit\ndef k(x, w):\n    return x @ w\ny = k[1](x, w)", "jit-call"),
    "kernel defined in a class": ("class L:\n    @triton.jit\n    def k(x, w):\n        return x @ w\n"
                                  "y = L.k(x, w)", "jit-call"),
    "torch op inside a real kernel": ("@triton.jit\ndef k(x, w):\n    return torch.matmul(x, w)", "torch-product"),
    "builtins via tl.core": ("@triton.jit\ndef k(x):\n    tl.core.builtins.eval('1')", "not-allowed"),
    "numpy inside a real kernel": ("@triton.jit\ndef k(x):\n    return x.numpy()", "attribute"),
    # imports and modules
    "__import__": ('o = __import__("os")', "dynamic-code"),
    "importlib": ('import importlib\no = importlib.import_module("os")', "import"),
    "sys.modules": ('import sys\nnp = sys.modules["numpy"]', "import"),
    "typing.sys": ('m = typing.sys.modules["__main__"]', "not-allowed"),
    "globals()": ('mm = globals()["torch"].matmul', "introspection"),
    "vars()": ('mm = vars(torch)["matmul"]', "introspection"),
    "module as a value": ("t = torch\nmm = t.matmul", "module-value"),
    "import builtins": ('import builtins\nbuiltins.exec("1")', "import"),
    "__builtins__": ('__builtins__["eval"]("1")', "introspection"),
    "star import": ("from torch import *", "import"),
    "cross-file import": ("from .w4a16 import w4a16_mm", "cross-file"),
    "cross-file package import": ("from . import dds", "cross-file"),
    "parent package": ("from .. import solutions", "cross-file"),
    "ctypes": ("import ctypes", "import"),
    "numpy": ("import numpy as np", "import"),
    "pickle": ("import pickle", "import"),
    "subprocess": ('import subprocess\nsubprocess.run(["id"])', "import"),
    "triton.testing": ("import triton.testing", "import"),
    "triton backend other than CUDAOptions": ("from triton.backends.nvidia.compiler import CUDABackend",
                                              "not-allowed"),
    "attribute of CUDAOptions": ("from triton.backends.nvidia.compiler import CUDAOptions\n"
                                 "p = CUDAOptions.parse_options", "attribute"),
    # dynamic code
    "eval": ('eval("1")', "dynamic-code"),
    "exec": ('exec("y = 1")', "dynamic-code"),
    "compile": ('c = compile("1", "f", "eval")', "dynamic-code"),
    "typing.get_type_hints": ("h = typing.get_type_hints(f)", "not-allowed"),
    "torch.load": ('m = torch.load("w.pt", weights_only=False)', "not-allowed"),
    # files, processes, the grader
    "open": ('open("/proc/self/cmdline").read()', "builtin"),
    "torch.from_file": ('e = torch.from_file("/proc/self/environ", size=64)', "not-allowed"),
    "torch.save": ('torch.save(x, "/tmp/x")', "not-allowed"),
    "os.system": ('os.system("id")', "not-allowed"),
    "os.fork": ("os.fork()", "not-allowed"),
    "os._exit": ("os._exit(0)", "not-allowed"),
    "os.environ write": ('os.environ["CUDA_VISIBLE_DEVICES"] = ""', "patching"),
    "os.environ alias": ('e = os.environ', "not-allowed"),
    "SystemExit": ("raise SystemExit(0)", "builtin"),
    "exit": ("exit(0)", "builtin"),
    "breakpoint": ("breakpoint()", "builtin"),
    "input": ("s = input()", "builtin"),
    "dispatch modes off": ("torch.utils._python_dispatch._disable_current_modes()", "not-allowed"),
    "side stream": ("s = torch.cuda.Stream()", "not-allowed"),
    "torch.compile": ("@torch.compile\ndef f(x):\n    return x", "not-allowed"),
    # patching and introspection
    "setattr on torch": ('setattr(torch, "allclose", lambda *a: True)', "patching"),
    "assign torch attribute": ("torch.allclose = lambda *a, **k: True", "patching"),
    "assign through an alias": ("T = torch.Tensor\nT.contiguous = lambda self: self", "patching"),
    "patch through self": ("def f(self):\n    self.contiguous = lambda: 0", "patching"),
    "patch a method through a method": ("class C:\n    def m(self):\n        self.contiguous = lambda: 0", "patching"),
    "assign an attribute of an argument": ("def f(x):\n    x.grad = None", "patching"),
    "delattr": ('delattr(x, "shape")', "patching"),
    "subclasses": ("c = x.__class__.__subclasses__()", "introspection"),
    "__globals__": ("g = f.__globals__", "introspection"),
    "dir": ("n = dir(torch)", "introspection"),
    "Tensor subclass": ("class T(torch.Tensor):\n    pass", "patching"),
    "__torch_function__": ("class M:\n    def __torch_function__(self, f, t, a=(), k=None):\n        return 0",
                           "patching"),
    "naming something eval": ("def eval(s):\n    return s", "patching"),
    "class field named matmul": ("class C:\n    matmul = 1\ny = x.matmul(w)", "torch-product"),
    "getattr alias": ('g = getattr\ny = g(x, "matmul")(w)', "introspection"),
    "class built by type()": ('T = type("T", (torch.Tensor,), {"__torch_function__": f})', "patching"),
    "__builtins__ replaced": ("__builtins__ = {'range': f}", "patching"),
    "generator frame": ("class C:\n    gi_frame = f_globals = 1\ng = (i for i in ())\n"
                        "b = g.gi_frame.f_globals['__builtins__']", "introspection"),
    "class mro": ("o = type(x).mro()[-1]", "introspection"),
    "frame in a kernel": ("@triton.jit\ndef k(x):\n    return k.f_back", "introspection"),
    # Triton's runtime through the language module (knobs, launch hooks, the driver)
    "tl.core.knobs.setenv": ('tl.core.knobs.setenv("TRITON_ALWAYS_COMPILE", "1")', "not-allowed"),
    "tl.core.knobs hook": ("tl.core.knobs.runtime.launch_enter_hook = print", "patching"),
    "triton.knobs": ("h = triton.knobs.runtime.launch_enter_hook", "not-allowed"),
    "from triton.language import core": ("from triton.language import core", "not-allowed"),
    "import triton.language.core": ("import triton.language.core as c", "import"),
    "tl.target_info": ("cc = tl.target_info.current_target()", "not-allowed"),
    "tl.standard": ("s = tl.standard.sum", "not-allowed"),
    "tl.math.core": ("c = tl.math.core.knobs", "not-allowed"),
    "tl.extra.cuda.utils": ("u = tl.extra.cuda.utils", "not-allowed"),
    "libdevice's own imports": ("from triton.language.extra import libdevice\nc = libdevice.core", "not-allowed"),
    "inline PTX": ("@triton.jit\ndef k(x):\n    return tl.inline_asm_elementwise('mov.b32 $0, $1;', '=r,r', [x], "
                   "dtype=tl.int32, is_pure=True, pack=1)", "not-allowed"),
    # a method of the file's own class called with another object as self
    "own method unbound (the review's attack)": ("class _Setter:\n    def install(self, hook):\n"
                                                 "        self.launch_enter_hook = hook\n"
                                                 "_Setter.install(hooks_owner, print)", "patching"),
    "own __init__ unbound": ("class S:\n    def __init__(self, hook):\n        self.launch_enter_hook = hook\n"
                             "S.__init__(hooks_owner, print)", "patching"),
    "own class aliased": ("class S:\n    def install(self, hook):\n        self.h = hook\nk = S\n"
                          "k.install(hooks_owner, print)", "patching"),
    "own class as an argument": ("class S:\n    def install(self, hook):\n        self.h = hook\ndef f(k):\n"
                                 "    k.install(hooks_owner, print)\nf(S)", "patching"),
    "own method through type()": ("class S:\n    def install(self, hook):\n        self.h = hook\n"
                                  "type(S()).install(hooks_owner, print)", "patching"),
    "own method through cls": ("class S:\n    def install(self, hook):\n        self.h = hook\n"
                               "    @classmethod\n    def go(cls, o):\n        cls.install(o, print)", "patching"),
    "own method through getattr": ("class S:\n    def install(self, hook):\n        self.h = hook\n"
                                   "getattr(S, 'install')(hooks_owner, print)", "patching"),
    "a library class's __init__ on another object": ("def f(x):\n    tl.tensor.__init__(x, None, None)",
                                                     "introspection"),
    "a staticmethod's first argument is no self": ("class S:\n    @staticmethod\n    def install(obj, hook):\n"
                                                   "        obj.launch_enter_hook = hook", "patching"),
}


@pytest.mark.parametrize("name", list(HANDOUT_BYPASSES))
def test_handout_rule_bypasses_are_refused(name):
    src, rule = HANDOUT_BYPASSES[name]
    findings = check_source(HEADER + src)
    assert any(f.rule == rule and f.line > HEADER_LINES for f in findings), [str(f) for f in findings]


def test_there_is_one_bypass_per_handout_rule():
    assert len(HANDOUT_BYPASSES) == 17


@pytest.mark.parametrize("name", list(MORE_BYPASSES))
def test_known_tricks_are_refused(name):
    src, rule = MORE_BYPASSES[name]
    findings = check_source(HEADER + src)
    assert any(f.rule == rule and f.line > HEADER_LINES for f in findings), [str(f) for f in findings]


def test_a_utils_kernel_called_directly_is_refused(tmp_path, monkeypatch):
    """utils.py defines no @triton.jit helper today; one that it gained would be a
    kernel to the check, which a kernel file may launch but not call."""
    from grader import submission
    from grader.staticcheck import policy
    utils = tmp_path / "utils.py"
    utils.write_text((ROOT / "assignment" / "utils.py").read_text() + "\n\n@triton.jit\ndef tile_order(pid):\n"
                     "    return pid\n")
    monkeypatch.setitem(submission.TRUSTED_FILES, "utils.py", utils)
    names, kernels = policy._utils_names()
    assert kernels == {"tile_order"} and {"tile_order", "check_tensor", "BSR_BLOCK"} <= names
    monkeypatch.setattr(policy, "UTILS_NAMES", names)
    monkeypatch.setattr(policy, "UTILS_KERNELS", kernels)
    assert "jit-call" in _rules("from .utils import tile_order\ntile_order(0)")


def test_the_header_alone_is_clean():
    assert check_source(HEADER) == []


def test_encoding_tricks_are_read_like_the_interpreter_reads_them():
    # With a coding cookie, "+ADs-" is ";" in UTF-7: a text search sees no import statement.
    hidden = b"# coding: utf-7\nx = 1 +ADs-import subprocess\n"
    assert any(f.rule == "import" and f.line == 2 for f in check_source(hidden))
    latin = "# -*- coding: latin-1 -*-\nname = 'caf\xe9'\nimport numpy\n".encode("latin-1")
    assert [f.rule for f in check_source(latin)] == ["import"]


def test_extra_allowed_imports_from_the_rubric():
    assert "import" in _rules("import numpy as np\ny = np.zeros(3)")
    assert check_source(HEADER + "import numpy as np\ny = np.zeros(3)", {"numpy"}) == []


# --- findings are data ---------------------------------------------------------------------------

def test_findings_say_where_what_why_and_what_instead():
    src = "import torch\n\ndef f(x, w):\n    return torch.matmul(x, w)\n"
    [f] = check_source(src.encode(), set())
    assert isinstance(f, Finding)
    assert (f.rule, f.line, f.col) == ("torch-product", 4, 12)
    assert "torch.matmul" in f.detail and "tl.dot" in f.detail
    assert str(f).startswith("line 4, col 12 [torch-product]: uses torch.matmul")


def test_columns_count_characters_not_bytes():
    [f] = check_source("import torch\ns = 'ééé'; y = torch.mm(a, b)\n")
    assert (f.line, f.col) == (2, 16)


def test_findings_are_sorted_and_bounded():
    src = "import torch\n" + "".join(f"y{i} = torch.mm(a, b)\n" for i in range(300))
    found = check_source(src)
    assert len(found) == 101 and found[-1].rule == "truncated"
    assert [f.line for f in found[:-1]] == sorted(f.line for f in found[:-1])


def test_syntax_errors_report_line_and_column():
    [f] = check_source("import torch\ndef f(:\n    pass\n")
    assert (f.rule, f.line, f.col) == ("syntax", 2, 7)


# --- it cannot crash -------------------------------------------------------------------------------

def _deep(n: int) -> dict[str, bytes]:
    return {
        "sum": ("x = " + " + ".join(["a"] * n)).encode(),
        "sum in a kernel": ("import triton\n@triton.jit\ndef k(a):\n    x = " + " + ".join(["a"] * n)).encode(),
        "matmul chain": ("x = " + " @ ".join(["a"] * n)).encode(),
        "attribute chain": ("x = a" + ".b" * n).encode(),
        "call chain": ("x = a" + "()" * n).encode(),
        "subscript chain": ("x = a" + "[0]" * n).encode(),
        "unary chain": ("x = " + "-" * n + "a").encode(),
        "not chain": ("x = " + "not " * n + "a").encode(),
        "power chain": ("x = " + "**".join(["a"] * n)).encode(),
        "conditional chain": ("x = " + "a if b else " * n + "c").encode(),
        "lambda chain": ("x = " + "lambda: " * n + "a").encode(),
        "parentheses": ("x = " + "(" * n + "a" + ")" * n).encode(),
        "lists": ("x = " + "[" * n + "]" * n).encode(),
        "comparisons": ("x = " + " < ".join(["a"] * n)).encode(),
        "boolean ops": ("x = " + " and ".join(["a"] * n)).encode(),
        "string concatenation": ("x = " + " ".join(['"a"'] * n)).encode(),
        "getattr nest": ("x = " + "getattr(" * n + "a" + ", 'b')" * n).encode(),
    }


PATHOLOGICAL = {
    "empty": b"",
    "comments only": b"# nothing\n",
    "null byte": b"import torch\nx = 1\x00\n",
    "non-UTF-8": b"import torch\nx = '\xff\xfe'\n",
    "unknown coding": b"# coding: no-such-codec\nx = 1\n",
    "UTF-16 without a cookie": "x = 1\n".encode("utf-16"),
    "BOM": b"\xef\xbb\xbfimport torch\n",
    "CR line endings": b"import torch\rx = torch.empty(1)\r",
    "form feeds": b"\x0cimport torch\n\x0cx = 1\n",
    "deep indentation": "".join(" " * i + "if a:\n" for i in range(120)).encode() + b" " * 120 + b"pass\n",
    "one long line": b"x = [" + b"1," * 100_000 + b"]\n",
    "unterminated string": b"x = '''\n",
    "tabs and spaces": b"if a:\n\tx = 1\n        y = 2\n",
    "over the size cap": b"x = 1\n" * (MAX_SOURCE_BYTES // 6 + 1),
    "f-string nesting": b"x = f'{a!r:{b:{c}}}'\n",
    "match statement": b"match x:\n    case {'a': [torch, *rest]}:\n        pass\n",
    "global/nonlocal": b"def f():\n    global eval\n    x = 1\n    def g():\n        nonlocal x\n",
    "async": b"async def f():\n    async with a as b:\n        await b\n    return [c async for c in d]\n",
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_sources_give_findings_or_none(name):
    found = check_source(PATHOLOGICAL[name], set())
    assert isinstance(found, list) and all(isinstance(f, Finding) for f in found)
    assert all(isinstance(str(f), str) for f in found)


@pytest.mark.parametrize("n", [700, 5_000, 100_000])
def test_deep_nesting_gives_findings_or_none(n):
    for name, src in _deep(n).items():
        found = check_source(src, set())
        assert isinstance(found, list), name
        assert all(isinstance(f, Finding) for f in found), name


def test_a_700_term_sum_is_checked_not_crashed():
    assert check_source("x = " + " + ".join(["a"] * 700)) == []
    found = check_source("import torch\nx = " + " + ".join(["torch.mm(a, b)"] * 700))
    assert len(found) == 101 and found[0].rule == "torch-product"


def test_specific_pathological_outcomes():
    assert check_source(PATHOLOGICAL["null byte"])[0].rule == "syntax"
    assert check_source(PATHOLOGICAL["non-UTF-8"])[0].line == 2
    assert check_source(PATHOLOGICAL["over the size cap"])[0].rule == "too-large"
    assert check_source(_deep(100_000)["unary chain"])[0].rule in ("too-complex", "syntax")
    assert check_source("x = '\ud800'")[0].rule == "syntax"  # a lone surrogate cannot be source


def test_time_is_bounded_for_the_largest_file_checked():
    """10 s on the project's idle 2-core machine, scaled to this one's load now (tests.helpers.scaled):
    the bound is on the check's work, not on the machine's speed."""
    big = (b"y = torch.empty(1).contiguous().view(-1)[0:1] + a * b - c\n" * (MAX_SOURCE_BYTES // 60))
    limit = scaled(10)
    start = time.perf_counter()
    check_source(b"import torch\n" + big, set())
    assert time.perf_counter() - start < limit


def test_fuzzed_sources_never_raise():
    rng = random.Random(1234)
    base = (ROOT / "solutions" / "w8a8.py").read_bytes()
    tokens = ["torch", "tl", ".", "(", ")", "[", "]", "@", "lambda", ":", ",", "x", "=", "\n", "    ", "def",
              "getattr", "'mm'", "@triton.jit\n", "import ", "from ", " as ", "**", "not ", "async ", "await ",
              "class ", "global ", "yield ", "{", "}", "*", "f'{x}'", "__dict__", "0", "\\", "#", "\t"]
    for _ in range(150):
        kind = rng.randrange(4)
        if kind == 0:  # random token soup
            src = "".join(rng.choice(tokens) for _ in range(rng.randrange(1, 400))).encode()
        elif kind == 1:  # byte flips of a real kernel file
            b = bytearray(base)
            for _ in range(rng.randrange(1, 20)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            src = bytes(b)
        elif kind == 2:  # truncated kernel file
            src = base[:rng.randrange(len(base))]
        else:  # spliced kernel file
            i, j = sorted(rng.randrange(len(base)) for _ in range(2))
            src = base[:i] + base[j:] + base[i:j]
        found = check_source(src, set())
        assert all(isinstance(f, Finding) for f in found)
        assert not any(f.rule == "internal" for f in found), (src[:200], found)


# --- the kernel language: listed name by name ---------------------------------------------------

def test_every_public_triton_language_name_is_listed_or_refused_on_purpose():
    """A name of triton.language is either on the list a kernel file may use or refused
    with its reason; a new Triton's new names fail here until a maintainer decides."""
    import triton.language as tl

    from grader.staticcheck import TL_NAMES, TL_REFUSED

    public = {n for n in dir(tl) if not n.startswith("_")}
    assert not TL_NAMES & set(TL_REFUSED)
    assert public <= TL_NAMES | set(TL_REFUSED), sorted(public - TL_NAMES - set(TL_REFUSED))
    math_functions = {n for n in dir(tl.math) if not n.startswith("_") and callable(getattr(tl.math, n))
                      and str(getattr(getattr(tl.math, n), "__module__", "")).startswith("triton.language")}
    assert {f"math.{n}" for n in math_functions} <= TL_NAMES, sorted(math_functions)
    for name in sorted(public & TL_NAMES):
        assert check_source(HEADER + f"x = tl.{name}\n") == [], name
    for name in sorted(public & set(TL_REFUSED)):
        found = check_source(HEADER + f"x = tl.{name}\n")
        assert any(TL_REFUSED[name] in f.detail for f in found), (name, [str(f) for f in found])


def test_what_the_reference_kernels_use_from_triton_is_listed():
    """Everything the reference, the tutorial-style kernels and the stubs take from
    triton and triton.language is on the list: the list is what a kernel needs."""
    import re

    from grader.staticcheck import ALLOWED_PATHS
    used = set()
    for path in LEGIT:
        text = "\n".join(line for line in path.read_text().splitlines()
                         if not line.lstrip().startswith(("import ", "from ")))   # imports: checked as such
        used |= {"triton.language." + m for m in re.findall(r"\btl\.([A-Za-z_][\w.]*)", text)}
        used |= {"triton." + m for m in re.findall(r"\btriton\.(?!language)([A-Za-z_]\w*)", text)}
    assert len(used) > 20
    missing = {u for u in used if not any(u == p or u.startswith(p + ".") for p in ALLOWED_PATHS)
               and not u.startswith(("triton.language.extra.cuda.libdevice.", "triton.language.extra.libdevice."))}
    assert not missing, sorted(missing)
