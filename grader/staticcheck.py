"""Read a kernel file, without running it, and name what a kernel file may not use.

This is teaching feedback, not the security boundary: the worker's OS sandbox
and the trusted harness (which judges and times outputs itself) are what make a
grade hold. Its job is to tell an honest student, before anything runs, which
line uses something outside the rules, why, and what to use instead.

**Allowlist, not denylist.** Every name the file reaches through an import is
resolved to a dotted path (``F.linear`` -> ``torch.nn.functional.linear``) and
must be on ``ALLOWED_PATHS``; everything else is refused by default. The lists were chosen from what the reference solutions
(``solutions/``), the tutorial-style kernels (``calibration/naive/``) and the stubs
(``assignment/``) use, plus what an honest first-time Triton student would
write:

- torch, outside a kernel: allocation (``torch.empty``, ``zeros``, ``full``,
  ``*_like``, ``arange``, ``tensor``), dtypes, layouts, ``torch.device``,
  ``torch.Tensor`` (for ``isinstance`` and annotations), ``finfo``/``iinfo``,
  ``no_grad``/``inference_mode``, a few index helpers on BSR metadata (``cat``,
  ``stack``, ``diff``, ``repeat_interleave``, ``argsort``, ``sort``), and GPU
  queries (``torch.cuda.is_available``, ``get_device_capability``,
  ``get_device_properties``, ``synchronize``). No operator that computes the
  product or a reduction on data (matmul family, einsum, linear, convolutions,
  ``embedding_bag``, ``_trilinear``, ``sum``/``mean``, sparse ops,
  ``to_dense``), nothing under ``torch.nn``, ``torch.ops``, ``torch._C``,
  ``torch.utils``, ``torch.library``, no streams, events, ``torch.load``.
  Elementwise math (``torch.clamp``, ``torch.round``) is refused too: the
  kernel itself quantizes and dequantizes.
- triton: ``jit``, ``autotune``, ``heuristics``, ``Config``, ``cdiv``,
  ``next_power_of_2``, ``set_allocator`` (device-side TMA descriptors), host
  ``TensorDescriptor``, the driver's device queries, and the names of
  ``triton.language`` a kernel needs (``TL_NAMES``: the language's functions,
  dtypes and types, ``tl.math``'s functions, libdevice, the PDL intrinsics).
  Of ``triton.backends`` only the class ``CUDAOptions`` may be imported (no
  attribute of it): the reference asks ``dataclasses.fields(CUDAOptions)``
  whether this Triton can launch a kernel with ``launch_pdl=True``; the
  dataclass only describes compile options.
  Every other public name of ``triton.language`` is refused on purpose, with
  its reason (``TL_REFUSED``: ``tl.core``, ``tl.standard``, ``tl.target_info``,
  the ``extra`` and ``random`` modules as such, inline PTX, Triton's type
  internals): through them a file reaches Triton's runtime (knobs, drivers,
  launch hooks, the builtins). A new Triton's new names are refused until a
  maintainer lists them (tests/test_staticcheck.py walks every public name).
- math (no ``fsum``/``sumprod``), functools (``lru_cache``/``cache`` for config
  caching, ``partial``, ``wraps``; not ``reduce``), typing (plain type names;
  not ``get_type_hints``, which evaluates strings), dataclasses, itertools,
  collections, enum, ``warnings.warn``, ``__future__``, and the helpers that
  ``.utils`` defines (read from the grader's own copy of utils.py).
- os: only ``os.environ.get`` and ``os.getenv``. Reading ``TRITON_INTERPRET``
  to pick tile sizes is a common honest pattern and cannot change anything;
  writing the environment, files, processes and signals are refused. The
  sandbox gives the worker an environment of its own (harness/session.py:
  ``TRITON_INTERPRET=1`` on a CPU run, none of the student's variables), as
  the handout says; tests/test_integrity.py holds the two together.

**Values** (tensors, dicts, your own objects) have unknown types, so their
attributes are checked by name: outside a ``@triton.jit`` function a value
attribute must be on ``VALUE_ATTRS`` (shape/stride/dtype/device, views,
``.contiguous()``, ``.to()``, BSR ``.crow_indices()``/``.col_indices()``/
``.values()``, ``.item()``, ``.max``/``.min`` for ``finfo``/``iinfo``, dict/list/
str methods) or be an attribute that the file's own classes define, unless
that name is also an attribute of ``torch.Tensor`` or of a Triton kernel object
(a class field named ``matmul`` does not unlock ``x.matmul``), or of the
interpreter's frames, code objects and generators (``gi_frame``, ``f_globals``,
``mro``). Inside a real ``@triton.jit`` function any attribute of Triton's own
values is fine. Dunder attributes are refused everywhere, except ``__name__``,
``__qualname__``, ``__doc__``, ``__init__`` and ``__version__``.

**Builtins** are listed too: the ordinary ones (``len``, ``range``, ``min``,
``max``, ``isinstance``, ``print``, exceptions, ...) are fine; ``eval``,
``exec``, ``compile``, ``__import__``, ``open``, ``input``, ``globals``,
``locals``, ``vars``, ``dir``, ``setattr``, ``delattr``, ``breakpoint``,
``exit``, ``memoryview``, ``SystemExit`` and the builtin ``sum`` (it adds
tensors in PyTorch; ``math.prod`` and loops serve shapes) are refused unless a
function binds that name locally (a parameter called ``input`` is fine).
``getattr`` is fine called with a literal name (it is read as ``x.name``),
refused with a computed one or as a value (``g = getattr``); ``type()`` with
three arguments (a class built at run time) is refused.

**Kernels.** A function is a kernel only if a decorator resolves through the
imports to ``triton.jit``: a local ``def jit(f): return f`` is ordinary Python
and its body is checked as such. Outside kernels ``@`` is refused (it is a
PyTorch matmul there); inside, Triton code (``tl.dot``, ``@``, ``.sum``) is
allowed. Outside kernels a kernel may be launched (``k[grid](...)``) and
chosen through a plain alias (``k = _a if small else _b``), nothing else: not
called, returned, passed, stored, aliased in a class, or wrapped by any
decorator but ``triton.jit``/``autotune``/``heuristics``, and it is defined at
the top level; the Triton interpreter (the CPU grader) runs a direct call as
plain Python on PyTorch tensors.

**Rebinding** a name that the file imports (``tl = torch``, ``def jit``, a
parameter called ``tl``) is refused, so that every name keeps the meaning the
check gave it; so is naming something ``eval`` or ``sum`` at module level.
Assigning to attributes of modules or library objects, ``setattr``,
subclassing ``torch.Tensor`` and defining ``__torch_function__`` count as
monkeypatching. So does reaching a method of the file's own class unbound
(``_Setter.install(obj, v)``, ``type(s).install``, ``cls.install`` in a
classmethod) or using an own class as a plain value (an alias, an argument):
a method called with another object as ``self`` makes ``self.x = v`` a store
on that object, a library's knobs say. ``Base.__init__(self, ...)`` with the
method's own ``self`` stays fine.

**Cannot crash.** The source is parsed from bytes (as Python's import would,
coding cookie included); the walk is iterative, so a 700-term sum or a deep
chain costs no recursion; files over ``MAX_SOURCE_BYTES`` are not parsed.
Every input gives a list of findings, possibly empty, never an exception.

**Findings** carry a stable ``rule``: ``torch-product`` (PyTorch computes the
product or a reduction), ``not-allowed`` (a name off the list), ``attribute``,
``import``, ``cross-file``, ``module-value``, ``introspection``,
``dynamic-code``, ``builtin``, ``patching``, ``jit-call``; and for files that
cannot be checked ``syntax``, ``too-large``, ``too-complex``, ``internal``;
``truncated`` closes a list cut at ``MAX_FINDINGS``. ``extra_allowed_imports``
(rubric.toml) adds modules, each with everything under it.

Left to run time (the static check cannot see types): elementwise arithmetic
with ``* + /`` on tensors, and a PyTorch tensor smuggled into a kernel as a
``tl.constexpr`` (the GPU compile of that kernel fails). ``str.format`` can
still spell ``{0.__class__}``: it yields text, never an object.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

MAX_SOURCE_BYTES = 256 * 1024  # the reference kernel files are 8-15 KiB
MAX_FINDINGS = 100

# --- what a kernel file may import ------------------------------------------------------

ALLOWED_MODULES = {
    "torch", "triton", "triton.language", "triton.tools.tensor_descriptor", "triton.backends.nvidia.compiler",
    "triton.language.math", "triton.language.extra", "triton.language.extra.cuda",
    "triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice",
    "math", "functools", "typing", "dataclasses", "itertools", "collections", "enum", "warnings", "os",
    "__future__",
}
# libdevice's math functions, each by name from the installed Triton: the one tree whose
# names are not listed one by one (about 200 elementwise functions, nothing else).
MODULE_TREES = ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice")
UTILS = "<utils>"  # the path root of names imported from the package's own utils.py (".utils")


def _kernel_siblings() -> set[str]:
    """The package's other modules: every task's kernel file, and the layers."""
    from .tasks import TASKS

    return {Path(t.file).stem for t in TASKS.values()} | {"layers"}


# --- what a kernel file may use from them (dotted paths) ---------------------------------

_TORCH = """
float16 half float32 float bfloat16 float64 double int8 uint8 int16 int32 int64 int long short bool
uint16 uint32 uint64 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz
dtype device Size Tensor layout strided sparse_bsr sparse_csr sparse_coo sparse_bsc sparse_csc
contiguous_format preserve_format finfo iinfo is_tensor is_floating_point get_default_dtype __version__
empty empty_like empty_strided zeros zeros_like ones ones_like full full_like arange tensor as_tensor
cat stack diff repeat_interleave argsort sort
no_grad inference_mode
version.cuda version.hip
cuda.is_available cuda.get_device_capability cuda.get_device_properties cuda.get_device_name
cuda.current_device cuda.device_count cuda.device cuda.synchronize
"""
_TRITON = """
jit autotune heuristics Config cdiv next_power_of_2 set_allocator __version__
tools.tensor_descriptor.TensorDescriptor backends.nvidia.compiler.CUDAOptions
runtime.driver.active.get_current_target runtime.driver.active.get_current_device
runtime.driver.active.utils.get_device_properties
"""
# triton.language (tl.*): what a kernel needs, by name. Every other public name is in
# TL_REFUSED, with the reason (tests/test_staticcheck.py checks that the two cover them all).
_TL = """
program_id num_programs arange zeros zeros_like full cdiv constexpr static_range range static_assert
static_print device_print device_assert debug_barrier multiple_of max_contiguous max_constancy assume
condition expect_zero
load store make_block_ptr make_tensor_descriptor load_tensor_descriptor store_tensor_descriptor
tensor_descriptor atomic_add atomic_and atomic_cas atomic_max atomic_min atomic_or atomic_xchg atomic_xor
atomic_load atomic_store atomic_poll
dot dot_scaled
abs ceil floor cos sin exp exp2 log log2 sqrt sqrt_rn rsqrt erf fma div_rn fdiv umulhi sigmoid softmax clamp
maximum minimum where cast add sub mul map_elementwise
sum max min argmax argmin reduce xor_sum reduce_or cumsum cumprod associative_scan sort topk flip histogram
gather bitonic_merge
reshape view broadcast broadcast_to expand_dims trans permute ravel join split interleave cat squeeze
unsqueeze slice swizzle2d
rand randn randint randint4x rand4x randn4x philox philox_impl pair_uniform_to_normal uint_to_uniform_float
float16 bfloat16 float32 float64 int1 int8 int16 int32 int64 uint8 uint16 uint32 uint64
float8e4nv float8e5 float8e4b8 float8e5b16 float8e4b15 dtype void pointer_type block_type tensor const tuple
pi32_t PropagateNan TRITON_MAX_TENSOR_NUMEL
math.abs math.ceil math.floor math.cos math.sin math.exp math.exp2 math.log math.log2 math.sqrt math.sqrt_rn
math.rsqrt math.erf math.fma math.div_rn math.fdiv math.umulhi
extra.cuda.gdc_wait extra.cuda.gdc_launch_dependents
"""
TL_NAMES = set(_TL.split())
_INTERNALS = "is part of Triton's own machinery for types and values, not of the kernel language"
TL_REFUSED = {
    "core": "holds the language's internals and re-exports Triton's runtime (knobs, launch hooks, builtins); "
            "use the tl.* names themselves",
    "standard": "is the module behind tl.sum, tl.max, tl.softmax, ...: use those names",
    "semantic": "is the code generator behind the language, not part of it",
    "target_info": "asks the driver about the GPU; ask in the wrapper with torch.cuda.get_device_capability",
    "random": "is a module: use tl.rand, tl.randn, tl.randint, ... by name",
    "math": "is a module: use its functions by name (tl.math.div_rn)",
    "extra": "is a module: of it a kernel file may use libdevice and the PDL intrinsics "
             "(tl.extra.cuda.gdc_wait, gdc_launch_dependents)",
    "inline_asm_elementwise": "runs inline PTX, which no one can check and the CPU interpreter cannot run; "
                              "libdevice has the roundings and conversions a kernel needs",
    "str_to_ty": _INTERNALS, "to_tensor": _INTERNALS, "aggregate_replace": _INTERNALS, "tuple_type": _INTERNALS,
    "tensor_descriptor_type": _INTERNALS, "constexpr_type": _INTERNALS,
}

_MATH = """
ceil floor trunc log log2 log10 exp sqrt isqrt pow fabs gcd lcm prod comb perm factorial copysign
fmod remainder modf frexp ldexp isfinite isinf isnan isclose pi e inf nan tau
sin cos tan asin acos atan atan2 sinh cosh tanh
"""
_OTHERS = {
    "functools": "lru_cache cache partial wraps cached_property total_ordering",
    "typing": """Any Optional Union Tuple List Dict Set FrozenSet Callable Sequence Iterable Iterator
                 Mapping MutableMapping NamedTuple TypedDict Literal Final ClassVar TYPE_CHECKING cast
                 overload TypeVar Generic Protocol""",
    "dataclasses": "dataclass field fields replace asdict astuple InitVar KW_ONLY",
    "itertools": "product chain islice count repeat cycle pairwise zip_longest permutations combinations",
    "collections": "namedtuple OrderedDict defaultdict deque Counter",
    "enum": "Enum IntEnum Flag IntFlag auto unique",
    "warnings": "warn",
    "os": "environ.get getenv",
}


def _paths(module: str, names: str) -> set[str]:
    return {f"{module}.{n}" for n in names.split()}


ALLOWED_PATHS = (_paths("torch", _TORCH) | _paths("triton", _TRITON) | _paths("triton.language", _TL)
                 | _paths("math", _MATH) | {p for m, names in _OTHERS.items() for p in _paths(m, names)})

# Names whose use means "PyTorch computes the product (or a reduction) here".
PRODUCT_NAMES = {
    "matmul", "mm", "bmm", "addmm", "addmm_", "baddbmm", "addbmm", "addmv", "addr", "mv", "dot", "vdot",
    "inner", "outer", "ger", "kron", "tensordot", "einsum", "linear", "bilinear", "chain_matmul",
    "matrix_power", "multi_dot", "vecdot", "_int_mm", "_scaled_mm", "_weight_int4pack_mm",
    "_weight_int8pack_mm", "_trilinear", "to_dense", "_to_dense", "embedding_bag", "embedding",
    "sum", "nansum", "mean", "nanmean", "cumsum", "cumprod", "prod", "logsumexp", "trace", "norm",
    "sspaddmm", "smm", "hspmm", "sparse_mm", "_sparse_mm", "baddbmm_", "addmv_", "sumprod", "fsum",
    "reduce", "conv1d", "conv2d", "conv3d", "convolution", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "conv_tbc", "scaled_dot_product_attention", "multi_head_attention_forward",
}
PRODUCT_MODULES = ("torch.nn", "torch.sparse", "torch.linalg", "torch.ops", "torch._C", "torch.special",
                   "torch.fft", "torch.functional", "torch.masked", "torch.nested", "numpy", "operator")

# --- attributes of values (tensors, dicts, your own objects) outside kernels -------------

VALUE_ATTRS = set("""
shape dtype device ndim layout is_cuda is_cpu is_sparse is_contiguous is_floating_point numel dim size
stride storage_offset element_size itemsize nbytes data_ptr nelement get_device requires_grad
view reshape t T mT transpose permute contiguous unsqueeze squeeze flatten unflatten expand expand_as
view_as reshape_as narrow select split chunk unbind
to half float double bfloat16 int long short bool byte char cuda cpu type type_as
clone detach zero_ fill_ copy_ new_empty new_zeros new_ones new_full new_empty_strided
crow_indices col_indices values ccol_indices row_indices _nnz item
max min eps tiny bits resolution smallest_normal index
multi_processor_count major minor name total_memory L2_cache_size warp_size
max_threads_per_multi_processor regs_per_multiprocessor shared_memory_per_block
shared_memory_per_block_optin shared_memory_per_multiprocessor
from_tensor best_config kwargs num_warps num_stages num_ctas maxnreg cache_info cache_clear
get items keys pop setdefault update copy clear append extend insert count sort reverse remove
format join strip lstrip rstrip startswith endswith lower upper replace isdigit bit_length
value _replace _asdict _fields
""".split())
ALLOWED_DUNDERS = {"__name__", "__qualname__", "__doc__", "__init__", "__version__"}
MATMUL_DUNDERS = {"__matmul__", "__rmatmul__", "__imatmul__"}
# Attributes of Triton kernel objects that reach the plain Python function or its source.
KERNEL_OBJECT_ATTRS = {"fn", "base_fn", "rewritten_fn", "rewrite", "src", "run", "warmup", "cache",
                       "device_caches", "arg_names", "params", "kernel_decorators", "_set_src",
                       "_unsafe_update_src", "_call_hook", "add_pre_run_hook", "pre_run_hooks"}
HOST_COPY_ATTRS = {"numpy", "tolist", "tofile", "untyped_storage", "storage", "data", "__array__",
                   "_typed_storage", "share_memory_", "pin_memory", "to_sparse", "apply_", "map_",
                   "register_hook", "set_", "resize_", "as_strided", "as_subclass"}

# --- builtins ---------------------------------------------------------------------------

ALLOWED_BUILTINS = set("""
abs all any ascii bin bool bytearray bytes callable chr classmethod complex dict divmod enumerate filter
float format frozenset hasattr hash hex id int isinstance issubclass iter len list map max min next
object oct ord pow print property range repr reversed round set slice sorted staticmethod str super
tuple type zip NotImplemented Ellipsis None True False __name__ __debug__ aiter anext
""".split()) | {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
                and issubclass(getattr(builtins, n), BaseException)
                and n not in ("SystemExit", "KeyboardInterrupt", "GeneratorExit")}
REFUSED_BUILTINS = {
    "eval": ("dynamic-code", "runs code built at run time, which no one can check"),
    "exec": ("dynamic-code", "runs code built at run time, which no one can check"),
    "compile": ("dynamic-code", "builds code at run time, which no one can check"),
    "__import__": ("dynamic-code", "imports a module by name at run time; use a plain import"),
    "open": ("builtin", "opens files: a kernel file reads and writes no files"),
    "input": ("builtin", "reads from stdin: a kernel file talks only through its return value"),
    "globals": ("introspection", "reaches the module's namespace; use names directly"),
    "locals": ("introspection", "reaches the namespace; use names directly"),
    "vars": ("introspection", "reaches an object's namespace; use its attributes by name"),
    "dir": ("introspection", "lists an object's names; use them by name"),
    "setattr": ("patching", "sets attributes by name (monkeypatching); keep state in your own variables"),
    "delattr": ("patching", "deletes attributes (monkeypatching)"),
    "breakpoint": ("builtin", "starts a debugger; remove it before submitting"),
    "exit": ("builtin", "ends the process; raise an exception instead"),
    "quit": ("builtin", "ends the process; raise an exception instead"),
    "SystemExit": ("builtin", "ends the process; raise an exception such as ValueError instead"),
    "KeyboardInterrupt": ("builtin", "fakes an interrupt; raise an exception such as ValueError instead"),
    "memoryview": ("builtin", "reads raw memory; use tensors and Triton pointers"),
    "getattr": ("introspection", "is allowed only as getattr(obj, 'a literal name'), which is read as obj.name"),
    "sum": ("torch-product", "adds tensors in PyTorch when given tensors; do reductions with tl.sum in "
                             "your kernel, and use math.prod or a loop for shapes"),
}
ALLOWED_NAME_DUNDERS = {"__name__", "__debug__"}
ALLOWED_STORE_DUNDERS = {"__all__", "__doc__", "__version__", "__author__"}
BUILTIN_NAMES = set(vars(builtins))
KERNEL_DECORATORS = (["triton", "jit"], ["triton", "autotune"], ["triton", "heuristics"])
MODULE, CLASS, FUNCTION = 0, 1, 2  # where a statement runs: what a name bound there hides
DISPATCH_HOOKS = {"__torch_function__", "__torch_dispatch__"}
SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
               ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _library_attrs() -> tuple[set[str], set[str]]:
    """(names of attributes that torch/Triton objects have, those of Triton's in-kernel values)."""
    import torch

    lib = set(dir(torch.Tensor)) | KERNEL_OBJECT_ATTRS | HOST_COPY_ATTRS | PRODUCT_NAMES
    triton_values: set[str] = set()
    try:
        import triton.language as tl
        from triton.runtime.autotuner import Autotuner, Heuristics
        from triton.runtime.jit import JITFunction

        lib |= set(dir(JITFunction)) | set(dir(Autotuner)) | set(dir(Heuristics))
        for cls in (tl.tensor, tl.constexpr, tl.dtype, getattr(tl, "tensor_descriptor", object),
                    getattr(tl, "block_type", object), getattr(tl, "pointer_type", object)):
            triton_values |= set(dir(cls))
    except Exception:  # pragma: no cover - a Triton without these modules
        pass
    return lib, triton_values


def _python_internal_attrs() -> set[str]:
    """Non-dunder attributes of the interpreter's own objects: generators, coroutines, frames,
    tracebacks, code objects, classes (``g.gi_frame.f_globals`` reaches every module)."""
    import sys
    import types

    def gen():
        yield

    async def coro():
        return None

    async def agen():
        yield

    c = coro()
    c.close()
    try:
        raise ValueError
    except ValueError as e:
        tb = e.__traceback__
    objects = (gen(), c, agen(), sys._getframe(), tb, gen.__code__, gen, type, types.ModuleType("m"),
               property(), BaseException(), types.SimpleNamespace())
    names = {n for o in objects for n in dir(o) if not n.startswith("__")}
    return {n for n in names if n.startswith(("gi_", "cr_", "ag_", "f_", "tb_", "co_", "_co_")) or n == "mro"}


PY_INTERNAL_ATTRS = _python_internal_attrs() - VALUE_ATTRS
LIBRARY_ATTRS, TRITON_VALUE_ATTRS = _library_attrs()
LIBRARY_ATTRS |= PY_INTERNAL_ATTRS


def _library_methods() -> set[str]:
    """Attribute names that are methods of torch.Tensor or of kernel objects: ``self.<name> = ...``
    would replace one of them if ``self`` were such an object."""
    import torch

    names = {n for n in dir(torch.Tensor) if callable(getattr(torch.Tensor, n, None))}
    return names | KERNEL_OBJECT_ATTRS | HOST_COPY_ATTRS | PRODUCT_NAMES | PY_INTERNAL_ATTRS


LIBRARY_METHODS = _library_methods()
# In a kernel, values are Triton's; refuse what only a PyTorch tensor or a kernel object has.
REFUSED_IN_KERNEL = ((LIBRARY_ATTRS - TRITON_VALUE_ATTRS - VALUE_ATTRS) | HOST_COPY_ATTRS | KERNEL_OBJECT_ATTRS
                     | PY_INTERNAL_ATTRS)


def _utils_names() -> tuple[set[str], set[str]]:
    """(public names of the grader's utils.py, those that are @triton.jit functions).

    utils.py is trusted (the grader stages its own copy), so its helpers are
    allowed; its module imports (os, torch) are not names a kernel file may take."""
    from .submission import TRUSTED_FILES

    names, jit = set(), set()
    tree = ast.parse(Path(TRUSTED_FILES["utils.py"]).read_bytes())
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Try, ast.If)):
            stack += node.body + node.orelse + getattr(node, "finalbody", [])
            stack += [s for h in getattr(node, "handlers", []) for s in h.body]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
            if any(ast.unparse(d).startswith("triton.jit") for d in getattr(node, "decorator_list", [])):
                jit.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("triton"):
            names |= {a.asname or a.name for a in node.names}
    return {n for n in names if not n.startswith("_")}, {n for n in jit if not n.startswith("_")}


try:
    UTILS_NAMES, UTILS_KERNELS = _utils_names()
except Exception:  # pragma: no cover - the grader without assignment/utils.py
    UTILS_NAMES, UTILS_KERNELS = set(), set()


@dataclass(frozen=True)
class Finding:
    """One thing the file may not do: ``rule`` is a short stable kind, ``line``
    and ``col`` are 1-based (0 when unknown), ``detail`` says what, why and what
    to use instead."""

    rule: str
    line: int
    col: int
    detail: str

    def __str__(self) -> str:
        where = f"line {self.line}, col {self.col}" if self.col else f"line {self.line}"
        return f"{where} [{self.rule}]: {self.detail}"


# --- resolving dotted paths ---------------------------------------------------------------

_SAFE_CONSTANTS = (int, float, bool, str, type(None))
_resolved: dict[str, tuple] = {}


def _triton_object(obj) -> bool:
    """True for a module, class, function or value that Triton itself defines."""
    import types

    if isinstance(obj, _SAFE_CONSTANTS):
        return True
    if isinstance(obj, types.ModuleType):
        return obj.__name__.startswith("triton.")
    owner = obj if isinstance(obj, type) or callable(obj) and hasattr(obj, "__module__") else type(obj)
    return str(getattr(owner, "__module__", "") or "").startswith("triton")


def _tree_covered(root: str, attrs: list[str]) -> tuple[int, bool]:
    """(1 if ``attrs[0]`` is a function that Triton defines in the module ``root``
    (libdevice's math), else 0; False: a function is not a module)."""
    import types

    if not attrs or attrs[0].startswith("_"):
        return 0, False
    key = f"{root}.{attrs[0]}"
    if key not in _resolved:
        ok = False
        try:
            obj = getattr(importlib.import_module(root), attrs[0], None)
            ok = (callable(obj) and not isinstance(obj, (type, types.ModuleType)) and _triton_object(obj))
        except Exception:  # pragma: no cover - a Triton without libdevice
            ok = False
        _resolved[key] = (ok, None)
    return (1 if _resolved[key][0] else 0), False


def _is_product(path: str) -> bool:
    leaf = path.rsplit(".", 1)[-1]
    return (leaf in PRODUCT_NAMES or leaf.startswith("conv") or path.startswith(PRODUCT_MODULES))


def _path_reason(path: str) -> tuple[str, str]:
    """(rule, why) for a dotted path that is not allowed."""
    module = path.split(".")[0]
    parts = path.split(".")
    if parts[:2] == ["triton", "language"] and len(parts) > 2 and parts[2] in TL_REFUSED:
        return "not-allowed", f"{TL_REFUSED[parts[2]]}"
    if parts[:2] == ["triton", "language"]:
        return "not-allowed", ("is not a name of the kernel language a kernel file may use (tl.load, tl.store, "
                               "tl.dot, tl.arange, tl.program_id, tl.zeros, tl.where, tl.sum, the dtypes, "
                               "tl.math.*, libdevice, ...: the handout's section 3)")
    if _is_product(path):
        return "torch-product", ("computes the product (or a reduction) in PyTorch; the product must come "
                                 "from your @triton.jit kernel (tl.dot, tl.sum)")
    if module == "torch":
        return "not-allowed", ("is not on the list of PyTorch names a kernel file may use: outside a kernel, "
                               "use torch only to allocate (torch.empty, torch.zeros, ...), for dtypes and "
                               "devices, and to ask about the GPU (torch.cuda.get_device_capability); do the "
                               "arithmetic in your @triton.jit kernel")
    if module == "triton":
        return "not-allowed", ("is not on the list of Triton names a kernel file may use: triton.jit, "
                               "triton.autotune, triton.heuristics, triton.Config, triton.cdiv, "
                               "triton.next_power_of_2 and the kernel language (tl.*)")
    if module == "os":
        return "not-allowed", ("is not allowed: from os a kernel file may only read the environment (os.environ.get, "
                               "os.getenv; when graded, only TRITON_INTERPRET is set, to 1 on a CPU); files, "
                               "processes, signals and the environment are the grader's business")
    if path.startswith(UTILS + "."):
        return "not-allowed", ("is not a helper that .utils defines; available: "
                               + ", ".join(sorted(UTILS_NAMES)[:12]) + ", ...")
    allowed = sorted(p.split(".", 1)[1] for p in ALLOWED_PATHS if p.startswith(module + "."))
    if allowed:
        return "not-allowed", f"is not allowed: from {module} a kernel file may use only {', '.join(allowed)}"
    return "not-allowed", "is not on the list of names a kernel file may use"


def _text(root: str, attrs: list[str]) -> str:
    text = ".".join([root, *attrs])
    return text if len(text) <= 80 else text[:77] + "..."


# --- the check ----------------------------------------------------------------------------

class _Scope:
    """Names bound in one function-like scope (params, assignments, loop targets, ...);
    ``self_name`` is the first parameter when the function is an instance method or a
    classmethod of the file's own class (never of a staticmethod, whose first parameter
    can be any object); ``cls_name`` that of a classmethod."""

    __slots__ = ("names", "parent", "self_name", "cls_name")

    def __init__(self, names: set[str], parent: _Scope | None, self_name: str | None = None,
                 cls_name: str | None = None):
        self.names, self.parent, self.self_name, self.cls_name = names, parent, self_name, cls_name

    def binds(self, name: str) -> bool:
        s = self
        while s is not None:
            if name in s.names:
                return True
            s = s.parent
        return False


def _bound_in(node: ast.AST) -> set[str]:
    """Names a scope node binds locally, without descending into nested scopes."""
    names: set[str] = set()
    declared: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        names |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
        stack = list(node.body) if isinstance(node.body, list) else [node.body]
    elif isinstance(node, COMPREHENSIONS):
        stack = [g.target for g in node.generators]
    else:
        stack = list(node.body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            declared |= set(n.names)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            names.add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            names.add(n.rest)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
            stack += list(getattr(n, "decorator_list", []))
            continue
        if isinstance(n, (ast.Lambda, *COMPREHENSIONS)):
            continue
        stack += list(ast.iter_child_nodes(n))
    return names - declared


def _decorated(fn: ast.AST, names: tuple[str, ...]) -> bool:
    """Whether ``fn`` has one of the plain decorators ``names`` (``@staticmethod``)."""
    return any(isinstance(d, ast.Name) and d.id in names for d in getattr(fn, "decorator_list", []))


class _Checker:
    """One pass over a parsed file; ``findings`` holds what it found."""

    def __init__(self, tree: ast.Module, lines: list[bytes] | None, extra_modules: set[str]):
        self.tree, self.lines = tree, lines
        self.extra = extra_modules
        self.findings: list[Finding] = []
        self.imports: dict[str, str] = {}    # local name -> dotted path it was imported as
        self.kernels: set[str] = set()       # names of @triton.jit functions and of their aliases
        self.aliases: set[str] = set()       # names assigned a kernel (``k = _a if c else _b``)
        self.own_attrs: set[str] = set()     # attribute names the file's own classes define
        self.defined: set[str] = set()       # every name the file binds anywhere
        self.own_classes: set[str] = set()   # names of the file's classes
        self.own_methods: set[str] = set()   # names of their instance methods (__init__ included)
        self._class_ok: set[int] = set()     # ids of Name nodes where an own class may appear
        self._unbound_ok: set[int] = set()   # ids of Base.method attributes called with the own self

    # -- reporting
    def flag(self, node: ast.AST | None, rule: str, detail: str) -> None:
        line = getattr(node, "lineno", 0) or 0
        col = getattr(node, "col_offset", -1)
        if col is not None and col >= 0 and self.lines and 0 < line <= len(self.lines):
            col = len(self.lines[line - 1][:col].decode("utf-8", "replace")) + 1
        else:
            col = 0
        self.findings.append(Finding(rule, line, col, detail))

    # -- first pass: imports, kernels, the file's own attributes
    def collect(self) -> None:
        nodes = list(ast.walk(self.tree))
        for node in nodes:
            if isinstance(node, SCOPE_NODES):
                self.defined |= _bound_in(node) | ({node.name} if hasattr(node, "name") else set())
            if isinstance(node, ast.Import):
                for a in node.names:
                    self._bind_import(node, a.asname or a.name.split(".")[0],
                                      a.name if a.asname else a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                for a in node.names:
                    if a.name == "*":
                        continue
                    if node.level:
                        base = UTILS if node.module == "utils" else "." * node.level + (node.module or "")
                        path = UTILS if (node.module is None and a.name == "utils") else f"{base}.{a.name}"
                    else:
                        path = f"{node.module}.{a.name}"
                    self._bind_import(node, a.asname or a.name, path)
        self.kernels |= {name for name, path in self.imports.items()
                         if path.startswith(UTILS + ".") and path.split(".", 1)[1] in UTILS_KERNELS}
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and self._is_kernel(node):
                self.kernels.add(node.name)
        assigns = [n for n in nodes if isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) for t in n.targets)]
        for _ in range(8):  # kernel = _a if small else _b: the alias is a kernel name too
            grown = {t.id for n in assigns if self._kernel_parts(n.value) is not None for t in n.targets}
            if grown <= self.kernels:
                break
            self.kernels |= grown
            self.aliases |= grown
        for node in nodes:
            if isinstance(node, ast.ClassDef):
                for s in node.body:
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        self.own_attrs.add(s.name)
                    for t in (s.targets if isinstance(s, ast.Assign) else
                              [s.target] if isinstance(s, ast.AnnAssign) else []):
                        self.own_attrs |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                self.own_attrs.add(node.attr)
            elif isinstance(node, ast.Call) and self._call_path(node) in ("collections.namedtuple",
                                                                         "typing.NamedTuple"):
                for arg in node.args[1:2]:
                    for c in ast.walk(arg):
                        if isinstance(c, ast.Constant) and isinstance(c.value, str):
                            self.own_attrs |= set(c.value.replace(",", " ").split())
        self.defined |= _bound_in(self.tree) | set(self.imports)
        self._collect_classes(nodes)

    def _collect_classes(self, nodes) -> None:
        """The file's classes, their instance methods, and where a class name may stand:
        called, as an attribute's root, a base, a decorator, an annotation, the class of
        isinstance/issubclass/except, or compared (``type(x) is C``)."""
        for node in nodes:
            if isinstance(node, ast.ClassDef):
                self.own_classes.add(node.name)
                for st in node.body:
                    if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _decorated(
                            st, ("staticmethod", "classmethod")):
                        self.own_methods.add(st.name)
        ok: list[ast.AST] = []
        for node in nodes:
            if isinstance(node, ast.Call):
                ok.append(node.func)
                if isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass") \
                        and len(node.args) > 1:
                    ok.append(node.args[1])
            elif isinstance(node, ast.Attribute):
                ok.append(node.value)
            elif isinstance(node, ast.ClassDef):
                ok += node.bases + node.decorator_list
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                ok += node.decorator_list + ([node.returns] if node.returns else [])
            elif isinstance(node, ast.arg) and node.annotation is not None:
                ok.append(node.annotation)
            elif isinstance(node, ast.AnnAssign):
                ok.append(node.annotation)
            elif isinstance(node, ast.ExceptHandler) and node.type is not None:
                ok.append(node.type)
            elif isinstance(node, ast.Compare):
                ok += [node.left, *node.comparators]
        for root in ok:   # a tuple of classes, a subscripted annotation: every name inside
            for n in ast.walk(root) if isinstance(root, (ast.Tuple, ast.Subscript, ast.BinOp)) else [root]:
                if isinstance(n, ast.Name):
                    self._class_ok.add(id(n))
        self.own_attrs = {a for a in self.own_attrs if a not in LIBRARY_ATTRS and not a.startswith("__")}

    def _bind_import(self, node: ast.AST, name: str, path: str) -> None:
        old = self.imports.get(name)
        if old is not None and old != path:
            self.flag(node, "patching", f"imports {path} as {name}, which already names {old}; "
                                        "give each import its own name")
        self.imports.setdefault(name, path)

    def _call_path(self, call: ast.Call) -> str | None:
        resolved = self._resolve(call.func)
        return ".".join(resolved) if resolved else None

    def _resolve(self, node: ast.AST) -> list[str] | None:
        """The dotted path of a Name/Attribute chain rooted at an imported name, else None."""
        attrs = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.imports:
            return self.imports[node.id].split(".") + attrs[::-1]
        return None

    def _is_kernel_name(self, name: str, scope: _Scope | None) -> bool:
        """Whether ``name`` here means a kernel: a function's own variable does only if it is assigned one."""
        if scope is not None and scope.binds(name) and name not in self.imports:
            return name in self.aliases
        return name in self.kernels

    def _kernel_parts(self, expr: ast.AST) -> list[ast.AST] | None:
        """For an expression whose value is one of the file's kernels (``k``, ``a if c else b``),
        the parts that still need checking (the conditions); None for any other expression."""
        parts, stack = [], [expr]
        while stack:
            e = stack.pop()
            if isinstance(e, ast.IfExp):
                parts.append(e.test)
                stack += [e.body, e.orelse]
            elif not (isinstance(e, ast.Name) and e.id in self.kernels):
                return None
        return parts

    def _is_kernel(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if self._resolve(target) == ["triton", "jit"]:
                return True
        return False

    # -- path checks
    def covered(self, parts: list[str]) -> tuple[int, bool]:
        """(how many leading parts of a dotted path name something a kernel file may use; whether
        that prefix is a module, whose other names are then not values but unlisted paths)."""
        best, module = 0, False
        for i in range(2, len(parts) + 1):
            if ".".join(parts[:i]) in ALLOWED_PATHS:
                best = i
        if parts[0] == UTILS and len(parts) > 1 and parts[1] in UTILS_NAMES:
            best = max(best, 2)
        for root in MODULE_TREES:
            r = root.split(".")
            if parts[:len(r)] == r and len(parts) > len(r):
                n, is_module = _tree_covered(root, parts[len(r):])
                if n and len(r) + n >= best:
                    best, module = len(r) + n, is_module
        if parts[0] == "__future__" or any(parts[:len(m.split("."))] == m.split(".") for m in self.extra):
            best, module = len(parts), False
        return best, module

    def importable(self, module: str) -> bool:
        return (module in ALLOWED_MODULES or module in self.extra
                or any(module.startswith(t + ".") for t in MODULE_TREES)
                or any(module.startswith(e + ".") for e in self.extra))

    # -- the walk
    def run(self) -> None:
        self.collect()
        stack: list[tuple[ast.AST, bool, _Scope | None, int]] = [(self.tree, False, None, MODULE)]
        handlers: dict[type, object] = {}
        ctx: tuple = ()

        def push(n: ast.AST) -> None:  # visit ``n`` in the context of the node being visited
            stack.append((n, *ctx))

        while stack:
            node, *rest = stack.pop()
            ctx = tuple(rest)
            kind = type(node)
            if kind not in handlers:
                handlers[kind] = getattr(self, "visit_" + kind.__name__, None)
            handler = handlers[kind]
            if handler is not None:
                handler(node, *ctx, push, stack)
            else:
                for field in node._fields:
                    value = getattr(node, field, None)
                    if isinstance(value, ast.AST):
                        stack.append((value, *ctx))
                    elif isinstance(value, list):
                        stack.extend((v, *ctx) for v in value if isinstance(v, ast.AST))

    # Each visit_X checks its node and pushes the children that still need visiting.

    def visit_Import(self, node, in_kernel, scope, level, push, stack):
        for a in node.names:
            if not self.importable(a.name):
                self._flag_import(node, a.name)

    def visit_ImportFrom(self, node, in_kernel, scope, level, push, stack):
        if node.level:
            siblings = {node.module or ""} | {a.name for a in node.names}
            if node.level > 1 or siblings & _kernel_siblings():
                self.flag(node, "cross-file", f"imports {'.' * node.level}{node.module or ''} "
                          f"({', '.join(a.name for a in node.names)}): each kernel file must stand alone; "
                          "copy what you need into this file")
                return
            for a in node.names:
                ok = (node.module == "utils" and a.name in UTILS_NAMES) or (node.module is None
                                                                          and a.name == "utils")
                if not ok:
                    self.flag(node, "import", f"imports {a.name} from .{node.module or ''}: from the "
                              "package a kernel file may import only the helpers .utils defines ("
                              + ", ".join(sorted(UTILS_NAMES)[:8]) + ", ...), one by one")
            return
        module = node.module or ""
        if module == "__future__":
            return
        if not self.importable(module):
            self._flag_import(node, module)
            return
        for a in node.names:
            path = f"{module}.{a.name}"
            if a.name == "*":
                self.flag(node, "import", f"imports * from {module}: import the names you use one by one, "
                                          "so that each can be checked")
            elif not self.importable(path) and self.covered(path.split("."))[0] < len(path.split(".")):
                rule, why = _path_reason(path)
                self.flag(node, rule, f"imports {path}, which {why}")

    def _flag_import(self, node, module: str) -> None:
        top = module.split(".")[0]
        if module.startswith("torch.") and _is_product(module):
            rule, why = "torch-product", "holds PyTorch's products and layers; the product must come from " \
                                         "your @triton.jit kernel"
        elif top in ("os", "sys", "subprocess", "ctypes", "multiprocessing", "signal", "shutil", "pathlib",
                     "io", "importlib", "builtins", "pickle", "socket", "threading"):
            rule, why = "import", "reaches processes, files, memory or the interpreter, which are the " \
                                  "grader's business"
        else:
            rule, why = "import", "is not on the list of modules a kernel file may import"
        self.flag(node, rule, f"imports {module}, which {why}. A kernel file may import torch, triton, "
                              "triton.language, math, functools, typing, dataclasses, itertools, "
                              "collections, enum, warnings, os (os.environ.get only) and helpers from .utils")

    def visit_FunctionDef(self, node, in_kernel, scope, level, push, stack):
        self._check_binding(node, node.name, level)
        if node.name in DISPATCH_HOOKS:
            self.flag(node, "patching", f"defines {node.name}, which intercepts PyTorch operations; "
                                        "a kernel file has no use for it")
        for d in node.decorator_list:
            push(d)
        self._push_arguments(node.args, push)
        if node.returns is not None:
            push(node.returns)
        params = node.args.posonlyargs + node.args.args
        method = level == CLASS and params and not _decorated(node, ("staticmethod",))
        inner = _Scope(_bound_in(node), scope, params[0].arg if method else None,
                       params[0].arg if method and _decorated(node, ("classmethod",)) else None)
        kernel = self._is_kernel(node)
        if kernel:
            others = [d for d in node.decorator_list
                      if self._resolve(d.func if isinstance(d, ast.Call) else d) not in KERNEL_DECORATORS]
            if others or level != MODULE:
                self.flag(others[0] if others else node, "jit-call",
                          f"kernel {node.name} must be defined at the top level of the file with only triton.jit, "
                          "triton.autotune and triton.heuristics as decorators (another decorator or a class "
                          "receives the kernel and could run it as plain Python)")
        for s in node.body:
            stack.append((s, kernel, inner, FUNCTION))

    visit_AsyncFunctionDef = visit_FunctionDef

    def _push_arguments(self, args: ast.arguments, push) -> None:
        for d in args.defaults + [d for d in args.kw_defaults if d is not None]:
            push(d)
        for a in args.posonlyargs + args.args + args.kwonlyargs + [x for x in (args.vararg, args.kwarg) if x]:
            if a.arg in self.imports:
                self.flag(a, "patching", f"parameter {a.arg} hides the imported {self.imports[a.arg]}; "
                                         "rename the parameter")
            if a.annotation is not None:
                push(a.annotation)

    def visit_Lambda(self, node, in_kernel, scope, level, push, stack):
        self._push_arguments(node.args, push)
        stack.append((node.body, False, _Scope(_bound_in(node), scope), FUNCTION))

    def visit_ClassDef(self, node, in_kernel, scope, level, push, stack):
        self._check_binding(node, node.name, level)
        for b in node.bases:
            if self._resolve(b) == ["torch", "Tensor"]:
                self.flag(b, "patching", "subclasses torch.Tensor, which can change what PyTorch operations "
                                         "do; a kernel file has no use for it")
        for n in node.decorator_list + node.bases + [k.value for k in node.keywords]:
            push(n)
        for s in node.body:
            stack.append((s, False, scope, CLASS))

    def _comprehension(self, node, in_kernel, scope, level, push, stack):
        inner = _Scope(_bound_in(node), scope)
        for i, g in enumerate(node.generators):
            if i == 0:
                push(g.iter)
            else:
                stack.append((g.iter, in_kernel, inner, FUNCTION))
            stack.append((g.target, in_kernel, inner, FUNCTION))
            for c in g.ifs:
                stack.append((c, in_kernel, inner, FUNCTION))
        for part in ("elt", "key", "value"):
            if hasattr(node, part):
                stack.append((getattr(node, part), in_kernel, inner, FUNCTION))

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def _check_binding(self, node, name: str, level: int) -> None:
        if name in self.imports:
            self.flag(node, "patching", f"rebinds {name}, which this file imports as {self.imports[name]}: "
                                        "a local name (a `def jit`, `tl = ...`) would change what the name "
                                        "means; rename it")
        elif level == MODULE and (name in REFUSED_BUILTINS or (name in BUILTIN_NAMES
                                                                and name not in ALLOWED_BUILTINS)):
            self.flag(node, "patching", f"names something {name}, which hides the builtin {name}; rename it")

    def visit_ExceptHandler(self, node, in_kernel, scope, level, push, stack):
        if node.name:
            self._check_binding(node, node.name, level)
        for child in ast.iter_child_nodes(node):
            push(child)

    def visit_Global(self, node, in_kernel, scope, level, push, stack):
        for name in node.names:
            self._check_binding(node, name, MODULE)

    visit_Nonlocal = visit_Global

    def visit_Name(self, node, in_kernel, scope, level, push, stack):
        name = node.id
        if not isinstance(node.ctx, ast.Load):
            if name.startswith("__") and name.endswith("__") and name not in ALLOWED_STORE_DUNDERS:
                self.flag(node, "patching", f"assigns {name}, a name the interpreter gives meaning to "
                                            "(__builtins__ changes what every builtin is); rename it")
            elif not (level == FUNCTION and name not in self.imports):
                self._check_binding(node, name, level)
            return
        if name in self.own_classes and id(node) not in self._class_ok and self._class_itself(node, scope):
            self.flag(node, "patching", f"uses the class {name} as a value (an alias, an argument): make "
                                        f"instances with {name}(...), read its constants as {name}.NAME; its methods "
                                        "may be called only on instances")
        if not in_kernel and self._is_kernel_name(name, scope):
            self.flag(node, "jit-call", f"uses the @triton.jit function {name} outside a kernel other than to "
                                        f"launch it: write {name}[grid](...), choosing the kernel with `if` or "
                                        "`k = a if c else b` (a direct call would run it as plain Python)")
        elif name in self.imports:
            self._check_use(node, self.imports[name].split("."), in_kernel, name)
        elif scope is not None and scope.binds(name):
            return
        elif name in REFUSED_BUILTINS:
            rule, why = REFUSED_BUILTINS[name]
            self.flag(node, rule, f"uses {name}, which {why}")
        elif name.startswith("__") and name.endswith("__") and name not in ALLOWED_NAME_DUNDERS:
            self.flag(node, "introspection", f"uses {name}: module internals are not for kernel files")
        elif name in BUILTIN_NAMES and name not in ALLOWED_BUILTINS:
            self.flag(node, "builtin", f"uses the builtin {name}, which is not on the list a kernel file may "
                                       "use (len, range, min, max, isinstance, print, exceptions, ...)")

    def _check_use(self, node, parts: list[str], in_kernel: bool, text_root: str,
                   attrs: list[str] | None = None) -> None:
        """Check an imported name ``text_root`` (imported as the path ``parts``) followed by ``attrs``."""
        attrs = attrs or []
        # __init__ of a library's class (tl.tensor.__init__(obj, ...)) would run on any object as self.
        dunders = [a for a in attrs if a.startswith("__") and a.endswith("__")
                   and (a not in ALLOWED_DUNDERS or a == "__init__")]
        if set(dunders) & MATMUL_DUNDERS:
            self.flag(node, "torch-product", f"uses {_text(text_root, attrs)}, the @ operator by another name: "
                                             "a PyTorch matrix product; use tl.dot in your @triton.jit kernel")
            return
        if dunders:
            self.flag(node, "introspection", f"uses {_text(text_root, attrs)}: {dunders[0]} and other dunder "
                                             "attributes are not allowed in a kernel file; use public names")
            return
        full = parts + attrs
        got, is_module = self.covered(full)
        if got < len(parts) or (got < len(full) and is_module):
            text, path = _text(text_root, attrs), ".".join(full)
            if not attrs and (self.importable(path) or parts == [UTILS]):
                self.flag(node, "module-value", f"uses the module {text} as a value; use its functions "
                                                "by name (torch.empty(...), tl.load(...))")
            else:
                rule, why = _path_reason(path)
                path = path.replace(UTILS, ".utils")
                shown = text if text == path else f"{text} ({path})"
                self.flag(node, rule, f"uses {shown}, which {why}")
            return
        for attr in full[got:]:
            self._check_attr(node, attr, in_kernel, ".".join(full[:got]))

    def _check_attr(self, node, attr: str, in_kernel: bool, owner: str = "", store: bool = False) -> None:
        """Check one attribute of a value (not of a module)."""
        if attr in MATMUL_DUNDERS:
            self.flag(node, "torch-product", f"uses .{attr}, the @ operator by another name: a PyTorch matrix "
                                             "product; use tl.dot in your @triton.jit kernel")
            return
        if attr.startswith("__") and attr.endswith("__"):
            if attr not in ALLOWED_DUNDERS or store:
                self.flag(node, "introspection", f"uses .{attr}: introspection and dunder attributes are not "
                                                 "allowed in a kernel file; use the object's public API")
            return
        if store:
            if attr in LIBRARY_METHODS:
                self.flag(node, "patching", f"assigns .{attr}, a method that torch and Triton objects have "
                                            "(monkeypatching, if self were one); name your field differently")
            return
        if attr in PY_INTERNAL_ATTRS:
            self.flag(node, "introspection", f"uses .{attr}, which reaches the interpreter's internals (frames, "
                                             "code objects, classes); a kernel file has no use for it")
            return
        if in_kernel:
            if attr in REFUSED_IN_KERNEL:
                self.flag(node, "attribute", f"uses .{attr} in a kernel, where values are Triton tensors; "
                                             f".{attr} is a PyTorch or host-side attribute")
            return
        if attr in VALUE_ATTRS or attr in self.own_attrs:
            return
        of = f" of {owner}" if owner else ""
        if attr in PRODUCT_NAMES or attr.startswith("conv") or "mm" in attr.split("_"):
            self.flag(node, "torch-product", f"uses .{attr}{of}, which computes on tensor data in PyTorch; the "
                                             "product and reductions must come from your @triton.jit kernel")
        elif attr in HOST_COPY_ATTRS:
            self.flag(node, "attribute", f"uses .{attr}{of}, which copies or exposes tensor memory outside "
                                         "PyTorch and Triton; keep data in tensors and read it in your kernel")
        else:
            self.flag(node, "attribute", f"uses .{attr}{of}, which is not on the list of attributes a kernel "
                                         "file may use outside a @triton.jit function (shape, stride, dtype, "
                                         "device, views, .contiguous(), .to(), .crow_indices(), .values(), "
                                         "dict/list/str methods, your own classes' attributes)")

    def _class_itself(self, expr: ast.AST, scope: _Scope | None) -> str | None:
        """The text of ``expr`` if it is one of the file's classes itself (its name, a
        classmethod's ``cls``, ``type(x)``), not an instance; else None."""
        if isinstance(expr, ast.Name):
            local = scope is not None and scope.binds(expr.id)
            if expr.id in self.own_classes and not local:
                return expr.id
            s = scope
            while s is not None:
                if s.cls_name == expr.id:
                    return expr.id
                s = s.parent
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "type" \
                and not (scope is not None and scope.binds("type")):
            return "type(...)"
        return None

    def _check_unbound(self, node: ast.AST, owner: ast.AST, method: str, scope: _Scope | None) -> None:
        """Refuse a method of the file's own class taken from the class itself: called with
        another object as ``self``, its ``self.x = v`` would store on that object."""
        if method not in self.own_methods or id(node) in self._unbound_ok:
            return
        text = self._class_itself(owner, scope)
        if text is not None:
            self.flag(node, "patching", f"uses {text}.{method}, a method of this file's class taken from the "
                                        "class itself: called with another object as self, it would change that "
                                        "object (monkeypatching); call it on an instance (obj.method(...))")

    def visit_Attribute(self, node, in_kernel, scope, level, push, stack):
        attrs, root = [], node
        while isinstance(root, ast.Attribute):
            attrs.append(root.attr)
            inner = root
            root = root.value
        attrs.reverse()
        store = not isinstance(node.ctx, ast.Load)
        self._check_unbound(inner, root, attrs[0], scope)
        if isinstance(root, ast.Name) and not in_kernel and not store and self._is_kernel_name(root.id, scope):
            for attr in attrs:
                self._check_attr(node, attr, False, root.id)
            return
        if isinstance(root, ast.Name) and root.id in self.imports:
            if store:
                self.flag(node, "patching", f"assigns to {_text(root.id, attrs)}: changing modules or their "
                                            "objects (monkeypatching) is not allowed")
                return
            self._check_use(node, self.imports[root.id].split("."), in_kernel, root.id, attrs)
            return
        own = (isinstance(root, ast.Name) and scope is not None and root.id == scope.self_name
               and len(attrs) == 1)
        if store and not own:
            self.flag(node, "patching", f"assigns to {_text(getattr(root, 'id', '(...)'), attrs)}: assign "
                                        "attributes only on self in your own classes' methods; changing other "
                                        "objects is monkeypatching")
            store = False  # reported once
        owner = ""
        if isinstance(root, ast.Name) and root.id not in self.defined and root.id not in BUILTIN_NAMES:
            owner = f"{root.id} (which this file never imports or defines)"
        for i, attr in enumerate(attrs):
            self._check_attr(node, attr, in_kernel, owner, store=store and i == len(attrs) - 1)
        push(root)

    def visit_Subscript(self, node, in_kernel, scope, level, push, stack):
        if isinstance(node.value, ast.Name) and self._is_kernel_name(node.value.id, scope):
            push(node.slice)  # kernel[grid] is how kernels are launched
            return
        if not isinstance(node.ctx, ast.Load) and self._resolve(node.value) is not None:
            self.flag(node, "patching", "assigns into a module's object (monkeypatching) is not allowed")
        push(node.value)
        push(node.slice)

    def visit_Call(self, node, in_kernel, scope, level, push, stack):
        func = node.func
        local = scope is not None and isinstance(func, ast.Name) and scope.binds(func.id)
        if (isinstance(func, ast.Attribute) and node.args and isinstance(node.args[0], ast.Name)
                and scope is not None and scope.self_name and scope.cls_name is None
                and node.args[0].id == scope.self_name):
            self._unbound_ok.add(id(func))   # Base.__init__(self, ...): the method's own self
        if isinstance(func, ast.Name) and not local and func.id == "type" and len(node.args) + len(node.keywords) > 1:
            self.flag(node, "patching", "calls type() with several arguments, which builds a class at run time; "
                                        "write a class statement so that it can be checked")
        if isinstance(func, ast.Name) and not local and func.id in ("getattr", "hasattr") \
                and func.id not in self.imports:
            obj = node.args[0] if node.args else None
            name = node.args[1] if len(node.args) > 1 else None
            literal = isinstance(name, ast.Constant) and isinstance(name.value, str)
            if func.id == "hasattr":  # only answers yes or no: a module may be asked
                if obj is not None and self._resolve(obj) is None:
                    push(obj)
                for a in node.args[1:] + [k.value for k in node.keywords]:
                    push(a)
                return
            if not literal or node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                self.flag(node, "introspection", "calls getattr with a computed name; write the attribute out "
                                                 "(x.shape) so that it can be checked")
            elif obj is not None:
                resolved = self._resolve(obj)
                if resolved is not None:
                    self._check_use(node, resolved, in_kernel, ".".join(resolved), [name.value])
                else:
                    self._check_unbound(node, obj, name.value, scope)
                    self._check_attr(node, name.value, in_kernel)
                    push(obj)
            for a in node.args[2:]:
                push(a)
            return
        push(func)
        for a in node.args:
            push(a)
        for k in node.keywords:
            push(k.value)

    def visit_Assign(self, node, in_kernel, scope, level, push, stack):
        parts = self._kernel_parts(node.value)
        if parts is None or level == CLASS or not all(isinstance(t, ast.Name) for t in node.targets):
            parts = [node.value]
        for n in node.targets + parts:
            push(n)

    def visit_BinOp(self, node, in_kernel, scope, level, push, stack):
        if isinstance(node.op, ast.MatMult) and not in_kernel:
            self.flag(node, "torch-product", "uses @ outside a @triton.jit function, where it is a PyTorch "
                                             "matrix product; the product must come from your kernel (tl.dot, "
                                             "or @ inside the kernel)")
        push(node.left)
        push(node.right)

    def visit_AugAssign(self, node, in_kernel, scope, level, push, stack):
        if isinstance(node.op, ast.MatMult) and not in_kernel:
            self.flag(node, "torch-product", "uses @= outside a @triton.jit function, where it is a PyTorch "
                                             "matrix product; the product must come from your kernel")
        push(node.target)
        push(node.value)


def _parse(data: bytes) -> tuple[ast.Module | None, Finding | None]:
    try:
        return ast.parse(data), None
    except SyntaxError as e:
        line, col = e.lineno or 0, max(e.offset or 0, 0)
        return None, Finding("syntax", line, col, f"the file does not parse: {e.msg}; fix this line first "
                                                  "(python -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' "
                                                  "FILE shows the same error)")
    except (RecursionError, MemoryError):
        return None, Finding("too-complex", 0, 0, "the file nests expressions too deeply for Python's parser "
                                                  "(a very long chain of operators, calls or brackets); split the "
                                                  "expression up")
    except (ValueError, OverflowError, UnicodeError) as e:
        return None, Finding("syntax", 0, 0, f"the file does not parse: {e}")


def _lines(data: bytes) -> list[bytes] | None:
    """The file's lines as UTF-8 (what ast's byte columns count), or None."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
        return [line.encode("utf-8") for line in re.split(r"\r\n|\r|\n", text)]
    except Exception:
        return None


def check_source(source: bytes | str, extra_allowed_imports: set[str] | None = None) -> list[Finding]:
    """Findings for one kernel file, sorted by position; an empty list means nothing forbidden was found.

    ``source`` is the file's bytes (or text); ``extra_allowed_imports`` are modules
    a TA allows besides the standard list (rubric.toml: ``extra_allowed_imports``),
    each with everything under it. Never raises.
    """
    try:
        if isinstance(source, str):
            try:
                data = source.encode("utf-8")
            except UnicodeEncodeError as e:
                return [Finding("syntax", 0, 0, f"the file is not valid text: {e.reason}")]
        else:
            data = bytes(source)
        if len(data) > MAX_SOURCE_BYTES:
            return [Finding("too-large", 0, 0, f"the file is {len(data) // 1024} KiB; the static check reads "
                                               f"kernel files up to {MAX_SOURCE_BYTES // 1024} KiB (the reference "
                                               "solutions are under 16 KiB): remove generated code or data")]
        tree, problem = _parse(data)
        if problem is not None:
            return [problem]
        checker = _Checker(tree, _lines(data), set(extra_allowed_imports or ()))
        checker.run()
        found = sorted(set(checker.findings), key=lambda f: (f.line, f.col, f.rule, f.detail))
        if len(found) > MAX_FINDINGS:
            rest = len(found) - MAX_FINDINGS
            found = found[:MAX_FINDINGS] + [Finding("truncated", found[MAX_FINDINGS].line, 0,
                                                    f"{rest} more finding(s) not shown")]
        return found
    except RecursionError:
        return [Finding("too-complex", 0, 0, "the file is too deeply nested to check; split long expressions")]
    except Exception as e:  # noqa: BLE001 - the check must never take the grader down
        return [Finding("internal", 0, 0, f"the static check failed on this file ({type(e).__name__}); "
                                          "a TA will read it by hand")]
