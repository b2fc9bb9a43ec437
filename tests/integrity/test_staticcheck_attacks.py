"""A clever student's routes around the static check (grader/staticcheck/), each refused.

Each entry is what a student could hand in to reach the builtins, imports, frames,
dunder attributes or the grader's runtime from a kernel file; each must give a
finding on one of its own lines (not the header's). The issue-40 route comes first:
a `match` class pattern that read ``__builtins__`` off any object, and an attribute
name declared by the file's own class accepted on every object.
"""

from __future__ import annotations

import pytest

from grader.staticcheck import check_source

HEADER = "import torch\nimport triton\nimport triton.language as tl\nimport os\nimport functools\nimport typing\n"
HEADER_LINES = HEADER.count("\n")

ATTACKS = {
    # issue 40: match/case class patterns read attributes the check never saw
    "match class pattern reaches __builtins__": ("match f:\n    case object(__builtins__=b):\n"
                                                 "        imp = b['__import__']"),
    "match class pattern, plain attribute name": "match f:\n    case object(start=s):\n        s()",
    "match mapping pattern": "match d:\n    case {'eval': e}:\n        e('1')",
    "match capture": "match torch:\n    case m:\n        m.matmul(a, b)",
    # issue 40: an attribute name declared by the file's class accepted on every object
    "own attribute name on a foreign object": "class C:\n    start = 0\ndef f(t):\n    t.start()",
    "own attribute name on a call's result": "class C:\n    Thread = 0\nt = torch.cuda.get_device_properties(0).Thread",
    "own attribute through self-store, on another object": ("class C:\n    def __init__(self):\n"
                                                            "        self.load_binary = 1\n"
                                                            "u = triton.runtime.driver.active.get_current_target()"
                                                            ".load_binary"),
    # walrus
    "walrus rebinds tl": "y = (tl := torch).matmul(a, b)",
    "walrus in a comprehension keeps getattr": "g = [(h := getattr) for _ in (0,)]\nh(x, 'mat' + 'mul')",
    # lambda defaults and decorators evaluate expressions
    "lambda default holds __builtins__": "f = lambda b=__builtins__: b['eval']('1')",
    "lambda default holds getattr": "f = lambda o, g=getattr: g(o, 'mat' + 'mul')",
    "decorator evaluates an import": "@(lambda fn: __import__('os'))\ndef f():\n    pass",
    "decorator that is a refused builtin": "@vars\nclass C:\n    pass",
    "decorator expression reaching the builtins": "@__builtins__['exec']\ndef f():\n    pass",
    # class bodies
    "class body binds a builtin's name": "class C:\n    exec = exec",
    "metaclass keyword": "class M(type):\n    pass\nclass C(metaclass=M):\n    pass",
    "__init_subclass__": "class B:\n    def __init_subclass__(cls, **kw):\n        pass",
    "__getattr__ on a class": "class B:\n    def __getattr__(self, name):\n        return 0",
    "__set_name__ runs on class creation": "class D:\n    def __set_name__(self, owner, name):\n        pass",
    "__class_getitem__": "class B:\n    def __class_getitem__(cls, item):\n        return item",
    "__new__": "class B:\n    def __new__(cls):\n        return object.__new__(cls)",
    # f-strings and str.format
    "f-string format spec with a dunder": "s = f\"{x!r:{__builtins__}}\"",
    "f-string format spec with getattr": "s = f\"{x:{getattr(x, 'mat' + 'mul')}}\"",
    "f-string conversion of a frame": "s = f\"{(i for i in ()).gi_frame!r:>10}\"",
    "str.format reads a dunder attribute": "s = \"{0.__class__}\".format(x)",
    "str.format reads a private attribute": "s = \"{0._version}\".format(torch)",
    "str.format reads a dunder item": "s = \"{0[__builtins__]}\".format(g)",
    "str.format_map": "s = \"{x.__class__.__init__.__globals__}\".format_map({'x': x})",
    "str.format on a computed string": "fmt = '{0.__cl' + 'ass__}'\ns = fmt.format(x)",
    "str.format through the type": "s = str.format('{0.__class__}', x)",
    # star-unpacking and other stores into attributes
    "star-unpacking into a module attribute": "*torch.allclose, = [print]",
    "tuple unpacking into a knob": "a, triton.knobs = 1, 2",
    "for loop target is an attribute": "for torch.matmul in [print]:\n    pass",
    "with target is an attribute": "with open('x') as torch.load:\n    pass",
    "augmented store into an attribute": "def f(x):\n    x.hook += 1",
    # type(...)
    "type() called on a function": "F = type(lambda: 0)",
    "calling what type() returns": "t = type(x)(3)",
    "type(x).mro": "o = type(x).mro()",
    "three-argument type": "T = type('T', (object,), {})",
    "object.__subclasses__": "s = object.__subclasses__()",
    # exceptions, generators, frames
    "exception __traceback__": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    fr = e.__traceback__.tb_frame",
    "exception tb_frame via with_traceback": ("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n"
                                              "    tb = e.with_traceback(None)"),
    "generator gi_frame": "g = (i for i in ())\nf = g.gi_frame.f_globals",
    "generator gi_code": "def gen():\n    yield 1\nc = gen().gi_code",
    "function __globals__": "def f():\n    pass\ng = f.__globals__['__builtins__']",
    "method __self__ is the builtins module": "b = print.__self__",
    "__builtins__ as a name": "b = __builtins__",
    "__loader__": "m = __loader__.load_module('os')",
    "__spec__": "s = __spec__",
    "dunder keyword argument": "d = dict(__builtins__=1)",
    "dunder parameter": "def f(__builtins__=None):\n    return 0",
    "dunder import alias": "from math import pi as __builtins__",
    "dunder except target": "try:\n    pass\nexcept Exception as __builtins__:\n    pass",
    "global dunder": "def f():\n    global __builtins__",
    "dunder string key": "e = d['__builtins__']['eval']",
    # operator, functools
    "operator.attrgetter": "import operator\ng = operator.attrgetter('__class__')",
    "from operator import attrgetter": "from operator import attrgetter",
    "functools.reduce": "y = functools.reduce(lambda a, b: a + b, xs)",
    "functools.partial of getattr": "g = functools.partial(getattr, torch)",
    "functools.singledispatch": "d = functools.singledispatch(print)",
    "functools.update_wrapper": "functools.update_wrapper(f, torch.matmul)",
    # imports
    "importlib": "import importlib\nnp = importlib.import_module('numpy')",
    "from importlib import import_module": "from importlib import import_module",
    "__import__": "np = __import__('numpy')",
    "sys.modules": "import sys\nnp = sys.modules['numpy']",
    "os.sys.modules": "np = os.sys.modules['numpy']",
    "typing.sys": "np = typing.sys.modules['numpy']",
    "functools' own imports": "r = functools.recursive_repr",
    # torch internals
    "torch.ops": "y = torch.ops.aten.mm(a, b)",
    "torch.ops.load_library": "torch.ops.load_library('/tmp/x.so')",
    "torch._C": "s = torch._C._get_tracing_state()",
    "import torch._C": "import torch._C",
    "torch.utils.cpp_extension": "m = torch.utils.cpp_extension.load_inline('m', '')",
    "import torch.utils.cpp_extension": "import torch.utils.cpp_extension as ext",
    "from torch.utils.cpp_extension import": "from torch.utils.cpp_extension import load_inline",
    "torch.load": "w = torch.load('w.pt')",
    "torch.jit.fork": "f = torch.jit.fork(print)",
    "torch.multiprocessing": "import torch.multiprocessing as mp",
    "torch.cuda.cudart": "rt = torch.cuda.cudart()",
    "torch.UntypedStorage.from_file": "s = torch.UntypedStorage.from_file('/proc/self/mem', False, 8)",
    # numpy in any spelling
    "import numpy": "import numpy",
    "import numpy as np": "import numpy as np",
    "from numpy import": "from numpy import dot",
    "import numpy.linalg": "import numpy.linalg",
    "tensor.numpy()": "a = x.numpy()",
    "Tensor.numpy(x)": "a = torch.Tensor.numpy(x)",
    "getattr numpy": "a = getattr(x, 'numpy')()",
    "__array__": "a = x.__array__()",
    "torch.from_numpy": "t = torch.from_numpy(a)",
    "torch._numpy": "import torch._numpy as tnp",
    "torch.utils.dlpack": "t = torch.utils.dlpack.to_dlpack(x)",
    "x.tolist()": "a = x.tolist()",
    # threads, processes, memory, the collector, introspection
    "threading": "import threading\nthreading.Thread(target=print).start()",
    "from threading import Thread": "from threading import Thread",
    "_thread": "import _thread",
    "concurrent.futures": "from concurrent.futures import ThreadPoolExecutor",
    "asyncio": "import asyncio",
    "multiprocessing": "import multiprocessing",
    "ctypes": "import ctypes",
    "from ctypes import": "from ctypes import CDLL",
    "gc": "import gc\ngc.disable()",
    "inspect": "import inspect\nf = inspect.currentframe()",
    "time": "import time",
    "signal": "import signal",
    "builtins module": "import builtins",
    "help imports pydoc": "help(torch)",
    "memoryview": "m = memoryview(b'x')",
    # Triton's runtime
    "triton.runtime.driver hook": "triton.runtime.driver.active.launch_enter_hook = print",
    "triton.runtime.driver.set_active": "triton.runtime.driver.set_active(None)",
    "from triton.runtime import driver": "from triton.runtime import driver",
    "triton.runtime.jit": "j = triton.runtime.jit.JITFunction",
    "triton.runtime.interpreter": "import triton.runtime.interpreter",
    "triton.runtime.autotuner": "from triton.runtime.autotuner import Autotuner",
    "triton.knobs": "triton.knobs.runtime.launch_enter_hook = print",
    "triton.knobs read": "k = triton.knobs.runtime",
    "tl.core.knobs": "k = tl.core.knobs",
    "triton.compiler": "import triton.compiler",
    "driver load_binary": "b = triton.runtime.driver.active.utils.load_binary",
    "kernel pre-run hook": ("@triton.jit\ndef k(x):\n    pass\nk.add_pre_run_hook(print)"),
    "kernel .fn runs as Python": "@triton.jit\ndef k(x):\n    return x\ny = k.fn(x)",
    # other syntax a kernel file has no use for
    "async def": "async def f():\n    pass",
    "await in async": "async def f(c):\n    await c",
    "except*": "try:\n    pass\nexcept* ValueError:\n    pass",
    "yield from a frame": "def g():\n    yield\nf = g().gi_frame",
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_every_route_around_the_check_is_refused(name):
    findings = check_source(HEADER + ATTACKS[name])
    assert any(f.line > HEADER_LINES for f in findings), (name, [str(f) for f in findings])


def test_a_match_statement_is_named_in_words():
    [f, *_] = check_source("match x:\n    case object(__builtins__=b):\n        pass\n")
    assert (f.rule, f.line, f.col) == ("syntax-refused", 1, 1)
    assert f.detail.startswith("a `match` statement has no place in a kernel file")


def test_refused_syntax_is_named_with_its_line():
    src = "x = 1\nasync def f():\n    pass\ntry:\n    pass\nexcept* ValueError:\n    pass\n"
    found = [(f.line, f.detail.split(" has no place")[0]) for f in check_source(src)]
    assert (2, "an `async def` function") in found
    assert (4, "an `except*` clause") in found


def test_an_own_attribute_is_accepted_only_on_the_own_class():
    own = ("class C:\n    start = 0\n    def __init__(self):\n        self.size2 = 1\n"
           "def f(c: C, t):\n    a = C()\n    return c.start + a.size2 + C.start + a.start\n")
    assert check_source(own) == []
    [f] = check_source(own + "def g(t):\n    return t.start\n")
    assert (f.rule, f.line) == ("attribute", 9)
    assert "C" in f.detail and "annotate" in f.detail
