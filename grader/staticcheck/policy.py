"""What a kernel file may use, and why the rest is refused: the static check's policy.

The allowlists (modules; the dotted paths of torch, triton and ``tl`` a kernel
file may reach; attributes of values; builtins), what is refused on purpose
with its reason (``TL_REFUSED``, ``REFUSED_BUILTINS``), the names the
package's own utils.py offers, and the reason given for a path that is not
allowed (``_path_reason``). Why the lists are what they are: the package's
docstring (grader/staticcheck/__init__.py).
"""

from __future__ import annotations

import ast
import builtins
import importlib
from pathlib import Path

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
    from ..tasks import TASKS

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
# TL_REFUSED, with the reason (tests/integrity/test_staticcheck.py checks that the two cover them all).
_TL = """
program_id num_programs arange zeros zeros_like full cdiv constexpr static_range range static_assert
static_print device_print device_assert debug_barrier multiple_of max_contiguous max_constancy assume
condition expect_zero
load store make_block_ptr advance make_tensor_descriptor load_tensor_descriptor store_tensor_descriptor
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
dtype void pointer_type block_type tensor const tuple
pi32_t PropagateNan TRITON_MAX_TENSOR_NUMEL
math.abs math.ceil math.floor math.cos math.sin math.exp math.exp2 math.log math.log2 math.sqrt math.sqrt_rn
math.rsqrt math.erf math.fma math.div_rn math.fdiv math.umulhi
extra.cuda.gdc_wait extra.cuda.gdc_launch_dependents
"""
# the language's dtypes (also what a constexpr global may hold: grader/staticcheck/constants.py)
TL_DTYPES = set("""float16 bfloat16 float32 float64 int1 int8 int16 int32 int64 uint8 uint16 uint32 uint64
float8e4nv float8e5 float8e4b8 float8e5b16 float8e4b15""".split())
TL_NAMES = set(_TL.split()) | TL_DTYPES
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


ALLOWED_PATHS = (_paths("torch", _TORCH) | _paths("triton", _TRITON) | _paths("triton.language", " ".join(TL_NAMES))
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
from_tensor best_config kwargs all_kwargs num_warps num_stages num_ctas maxnreg cache_info cache_clear
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
DISPATCH_HOOKS = {"__torch_function__", "__torch_dispatch__"}


def _library_attrs() -> set[str]:
    """Names of attributes that torch/Triton objects have."""
    import torch

    lib = set(dir(torch.Tensor)) | KERNEL_OBJECT_ATTRS | HOST_COPY_ATTRS | PRODUCT_NAMES
    try:
        from triton.runtime.autotuner import Autotuner, Heuristics
        from triton.runtime.jit import JITFunction

        lib |= set(dir(JITFunction)) | set(dir(Autotuner)) | set(dir(Heuristics))
    except Exception:  # pragma: no cover - a Triton without these modules
        pass
    return lib


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
LIBRARY_ATTRS = _library_attrs()
LIBRARY_ATTRS |= PY_INTERNAL_ATTRS


def _library_methods() -> set[str]:
    """Attribute names that are methods of torch.Tensor or of kernel objects: ``self.<name> = ...``
    would replace one of them if ``self`` were such an object."""
    import torch

    names = {n for n in dir(torch.Tensor) if callable(getattr(torch.Tensor, n, None))}
    return names | KERNEL_OBJECT_ATTRS | HOST_COPY_ATTRS | PRODUCT_NAMES | PY_INTERNAL_ATTRS


LIBRARY_METHODS = _library_methods()

# --- inside @triton.jit functions: what Triton's language values have ----------------------
# In a kernel every value is one of the language's: a tensor (a block pointer is one), a dtype
# (pointer and block types included), a constexpr, a tensor descriptor, a tuple. An attribute
# there must be one of theirs, by name: KERNEL_ATTRS, or it is refused. The installed Triton's
# public attributes of those classes (methods, properties, what __init__ sets) are each either in
# KERNEL_ATTRS or in KERNEL_REFUSED_ATTRS with the reason, and nothing else is in either
# (tests/integrity/test_staticcheck_kernel.py): a new Triton's additions fail that test until
# someone lists them.
KERNEL_VALUE_CLASSES = ("tensor", "dtype", "pointer_type", "block_type", "constexpr", "tensor_descriptor", "tuple")
_KERNEL_ATTRS = {
    "tensor": """T abs advance argmax argmin associative_scan atomic_add atomic_and atomic_cas atomic_max atomic_min
                 atomic_or atomic_xchg atomic_xor broadcast_to cast cdiv ceil cos cumprod cumsum erf exp exp2
                 expand_dims flip floor gather histogram item log log2 logical_and logical_or max min permute ravel
                 reduce reduce_or reshape rsqrt sigmoid sin softmax sort split sqrt sqrt_rn store sum to trans view
                 xor_sum dtype numel shape type""",
    "dtype": """get_int_max_value get_int_min_value is_bf16 is_block is_bool is_const is_dtype is_floating is_fp16
                is_fp32 is_fp64 is_fp8 is_fp8e4b15 is_fp8e4b8 is_fp8e4nv is_fp8e5 is_fp8e5b16 is_int is_int1 is_int16
                is_int32 is_int64 is_int8 is_int_signed is_int_unsigned is_ptr is_standard_floating is_uint16
                is_uint32 is_uint64 is_uint8 is_void kind scalar with_element_ty exponent_bias fp_mantissa_width
                int_bitwidth int_signedness itemsize name primitive_bitwidth""",
    "pointer_type": "address_space const element_ty",
    "block_type": "get_block_shapes nbytes element_ty numel shape",
    "constexpr": "value type logical_and logical_or",
    "tensor_descriptor": """atomic_add atomic_and atomic_max atomic_min atomic_or atomic_xor block_shape block_type
                            dtype gather load scatter store shape strides type""",
    "tuple": "values type",
}
KERNEL_ATTRS = {a for names in _KERNEL_ATTRS.values() for a in names.split()}
_CODEGEN = "is part of Triton's code generator, not of the kernel language"
_TYPE_TABLES = "is one of Triton's tables of type names, not part of the kernel language; ask the dtype (.is_fp16())"
KERNEL_REFUSED_ATTRS = {
    "handle": ("is the interpreter's internals (its numpy arrays) or the compiler's IR value, not part of Triton's "
               "language; use the tensor itself with tl.* operations"),
    "to_ir": _CODEGEN, "mangle": _CODEGEN, "codegen_name": _CODEGEN, "cache_key_part": _CODEGEN,
    "KIND": _TYPE_TABLES, "SIGNEDNESS": _TYPE_TABLES, "FP_TYPES": _TYPE_TABLES, "SINT_TYPES": _TYPE_TABLES,
    "UINT_TYPES": _TYPE_TABLES, "STANDARD_FP_TYPES": _TYPE_TABLES, "OTHER_TYPES": _TYPE_TABLES,
}


def _triton_internal_attrs() -> set[str]:
    """Names that reach inside Triton's language values (the interpreter's numpy arrays, the compiler's
    IR): the refused public ones and every private one (``_flatten_ir`` hands out the handles). They
    join LIBRARY_ATTRS, which no class of the file may declare, so that no annotation (``t: Mine``)
    makes ``t.handle`` readable in a host function that a kernel calls."""
    names = set(KERNEL_REFUSED_ATTRS)
    try:
        import triton.language.core as core

        for cls in KERNEL_VALUE_CLASSES + ("base_value", "base_type"):
            names |= {n for n in dir(getattr(core, cls, object)) if n.startswith("_") and not n.endswith("__")}
    except Exception:  # pragma: no cover - a Triton without these classes
        pass
    return names


TRITON_INTERNAL_ATTRS = _triton_internal_attrs()
LIBRARY_ATTRS |= TRITON_INTERNAL_ATTRS

# The builtins a kernel may use: those Triton's GPU compiler knows in a kernel (its code generator's
# builtin_namespace; tests/integrity/test_staticcheck_kernel.py holds the two together), less the
# three below. Any other (str, repr, type, abs, ...) is a NameError on the GPU, and in the
# interpreter some turn a tensor's values into Python (str(x) is their text).
KERNEL_BUILTINS = {"len", "list", "range", "float", "int", "print", "min", "max"}
# Known to the GPU compiler but refused: each answers differently in Triton's interpreter (where a
# value holds numpy arrays) and in the GPU compiler (where it holds IR), so a branch on one runs code
# the GPU compiler never sees.
KERNEL_REFUSED_BUILTINS = {
    "hasattr": "asks what a value has, which differs between the CPU interpreter and the GPU compiler",
    "getattr": "reads an attribute by name; write it out (x.dtype), so that it is checked",
    "isinstance": ("asks a value's class, which differs between the CPU interpreter and the GPU compiler; "
                   "a kernel knows its values' types (x.dtype, tl.static_assert)"),
}
# What a kernel may reach through the file's imports: the kernel language (triton.language), the
# triton names on ALLOWED_PATHS, math on constexprs, and the .utils helpers; never host modules
# (os.environ in a kernel is read by the interpreter but folded away by the GPU compiler).
KERNEL_IMPORT_ROOTS = ("triton", "math", UTILS)


def _utils_names() -> tuple[set[str], set[str]]:
    """(public names of the grader's utils.py, those that are @triton.jit functions).

    utils.py is trusted (the grader stages its own copy), so its helpers are
    allowed; its module imports (os, torch) are not names a kernel file may take."""
    from ..submission import TRUSTED_FILES

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
        return "not-allowed", ("is not allowed: from os a kernel file may only read the environment "
                               "(os.environ.get, os.getenv; when graded, only TRITON_INTERPRET is set, to 1 on "
                               "a CPU); files, processes, signals and the environment are the grader's business")
    if path.startswith(UTILS + "."):
        return "not-allowed", ("is not a helper that .utils defines; available: "
                               + ", ".join(sorted(UTILS_NAMES)[:12]) + ", ...")
    allowed = sorted(p.split(".", 1)[1] for p in ALLOWED_PATHS if p.startswith(module + "."))
    if allowed:
        return "not-allowed", f"is not allowed: from {module} a kernel file may use only {', '.join(allowed)}"
    return "not-allowed", "is not on the list of names a kernel file may use"


# --- syntax: the grammar a kernel file may use, node by node and field by field ------------
# Every node class of Python's ast is either here, with a rule for each of its fields, or in
# REFUSED_SYNTAX with the words a student reads (tests/integrity/test_staticcheck_syntax.py walks
# every class of the running Python's ast, and every field of the nodes allowed here). A field's
# rule: WALK, its sub-nodes are checked in turn; NAME, an identifier, which may not be a dunder
# unless DUNDERS_ALLOWED says so; DATA, a constant or a flag the checker reads; any other string
# names a construct that must be absent (the field is empty), in a student's words. A field this
# table does not list (a newer Python's) must be empty too.
WALK, NAME, DATA = "walk", "name", "data"
_TYPE_COMMENT = "a `# type:` comment read as syntax"
_TYPE_PARAMS = "type parameters (`def f[T]`, `class C[T]`)"
_FUNCTION = {"name": NAME, "args": WALK, "body": WALK, "decorator_list": WALK, "returns": WALK,
             "type_comment": _TYPE_COMMENT, "type_params": _TYPE_PARAMS}
_NO_FIELDS = ("Load Store Del And Or Add Sub Mult MatMult Div Mod Pow LShift RShift BitOr BitXor BitAnd FloorDiv "
              "Invert Not UAdd USub Eq NotEq Lt LtE Gt GtE Is IsNot In NotIn Pass Break Continue")
SYNTAX: dict[str, dict[str, str]] = {
    **{n: {} for n in _NO_FIELDS.split()},
    "Module": {"body": WALK, "type_ignores": "a `# type: ignore` comment read as syntax"},
    "FunctionDef": _FUNCTION,
    "ClassDef": {"name": NAME, "bases": WALK, "body": WALK, "decorator_list": WALK,
                 "keywords": "keyword arguments in a class statement (`metaclass=...`)", "type_params": _TYPE_PARAMS},
    "Return": {"value": WALK},
    "Delete": {"targets": WALK},
    "Assign": {"targets": WALK, "value": WALK, "type_comment": _TYPE_COMMENT},
    "AugAssign": {"target": WALK, "op": WALK, "value": WALK},
    "AnnAssign": {"target": WALK, "annotation": WALK, "value": WALK, "simple": DATA},
    "For": {"target": WALK, "iter": WALK, "body": WALK, "orelse": WALK, "type_comment": _TYPE_COMMENT},
    "While": {"test": WALK, "body": WALK, "orelse": WALK},
    "If": {"test": WALK, "body": WALK, "orelse": WALK},
    "With": {"items": WALK, "body": WALK, "type_comment": _TYPE_COMMENT},
    "withitem": {"context_expr": WALK, "optional_vars": WALK},
    "Raise": {"exc": WALK, "cause": WALK},
    "Try": {"body": WALK, "handlers": WALK, "orelse": WALK, "finalbody": WALK},
    "ExceptHandler": {"type": WALK, "name": NAME, "body": WALK},
    "Assert": {"test": WALK, "msg": WALK},
    "Import": {"names": WALK},
    "ImportFrom": {"module": NAME, "names": WALK, "level": DATA},
    "alias": {"name": NAME, "asname": NAME},
    "Global": {"names": NAME},
    "Nonlocal": {"names": NAME},
    "Expr": {"value": WALK},
    "BoolOp": {"op": WALK, "values": WALK},
    "NamedExpr": {"target": WALK, "value": WALK},
    "BinOp": {"left": WALK, "op": WALK, "right": WALK},
    "UnaryOp": {"op": WALK, "operand": WALK},
    "Lambda": {"args": WALK, "body": WALK},
    "arguments": {"posonlyargs": WALK, "args": WALK, "vararg": WALK, "kwonlyargs": WALK, "kw_defaults": WALK,
                  "kwarg": WALK, "defaults": WALK},
    "arg": {"arg": NAME, "annotation": WALK, "type_comment": _TYPE_COMMENT},
    "IfExp": {"test": WALK, "body": WALK, "orelse": WALK},
    "Dict": {"keys": WALK, "values": WALK},
    "Set": {"elts": WALK},
    "ListComp": {"elt": WALK, "generators": WALK},
    "SetComp": {"elt": WALK, "generators": WALK},
    "DictComp": {"key": WALK, "value": WALK, "generators": WALK},
    "GeneratorExp": {"elt": WALK, "generators": WALK},
    "comprehension": {"target": WALK, "iter": WALK, "ifs": WALK, "is_async": "an `async for` in a comprehension"},
    "Yield": {"value": WALK},
    "YieldFrom": {"value": WALK},
    "Compare": {"left": WALK, "ops": WALK, "comparators": WALK},
    "Call": {"func": WALK, "args": WALK, "keywords": WALK},
    "keyword": {"arg": NAME, "value": WALK},
    "FormattedValue": {"value": WALK, "conversion": DATA, "format_spec": WALK},
    "JoinedStr": {"values": WALK},
    "Constant": {"value": DATA, "kind": DATA},
    "Attribute": {"value": WALK, "attr": NAME, "ctx": WALK},
    "Subscript": {"value": WALK, "slice": WALK, "ctx": WALK},
    "Starred": {"value": WALK, "ctx": WALK},
    "Name": {"id": NAME, "ctx": WALK},
    "List": {"elts": WALK, "ctx": WALK},
    "Tuple": {"elts": WALK, "ctx": WALK},
    "Slice": {"lower": WALK, "upper": WALK, "step": WALK},
}
_ASYNC = "async code (coroutines carry frames, and a kernel file's wrapper runs synchronously)"
_PATTERN = ("its patterns read attributes and items that the check cannot see (`case object(__builtins__=b)` "
            "reaches the builtins); use if/elif")
_NOT_PARSED = "is not produced by Python's parser for a file (an old or a non-module form)"
# node class -> (the construct in a student's words, why it is refused)
REFUSED_SYNTAX: dict[str, tuple[str, str]] = {
    "Match": ("a `match` statement", _PATTERN),
    "match_case": ("a `case` clause", _PATTERN),
    **{n: ("a `case` pattern", _PATTERN) for n in ("MatchValue", "MatchSingleton", "MatchSequence", "MatchMapping",
                                                  "MatchClass", "MatchStar", "MatchAs", "MatchOr")},
    "AsyncFunctionDef": ("an `async def` function", _ASYNC),
    "AsyncFor": ("an `async for` loop", _ASYNC),
    "AsyncWith": ("an `async with` block", _ASYNC),
    "Await": ("`await`", _ASYNC),
    "TryStar": ("an `except*` clause", "exception groups are not needed in a kernel file; use `except`"),
    "TypeAlias": ("a `type X = ...` statement", "write a plain assignment `X = ...`"),
    **{n: (_TYPE_PARAMS, "write the function or class without them")
       for n in ("TypeVar", "ParamSpec", "TypeVarTuple")},
    "TemplateStr": ("a template string (`t'...'`)", "its values reach the program as objects; use an f-string"),
    "Interpolation": ("a template string (`t'...'`)", "its values reach the program as objects; use an f-string"),
    "TypeIgnore": ("a `# type: ignore` comment read as syntax", _NOT_PARSED),
    **{n: (f"the syntax node ast.{n}", _NOT_PARSED)
       for n in ("Expression", "Interactive", "FunctionType", "Suite", "Param", "AugLoad", "AugStore", "Index",
                 "ExtSlice", "Num", "Str", "Bytes", "NameConstant", "Ellipsis")},
}
# The abstract classes of the grammar: no node is of one of these classes itself.
ABSTRACT_SYNTAX = {"AST", "mod", "stmt", "expr", "expr_context", "boolop", "operator", "unaryop", "cmpop",
                   "comprehension_base", "excepthandler", "arguments_base", "pattern", "type_ignore", "type_param",
                   "slice"}
# Dunder identifiers: refused everywhere but here. A class may define the methods of the ordinary
# protocols (construction, printing, comparison, containers, calls); not those that change how
# attributes are looked up or classes are built (__getattr__, __init_subclass__, __set_name__,
# __class_getitem__, __new__), nor PyTorch's dispatch hooks. Name and Attribute are checked
# with their own reasons (checker.visit_Name, checker._check_attr).
ALLOWED_DEF_DUNDERS = {"__init__", "__post_init__", "__repr__", "__str__", "__eq__", "__ne__", "__hash__", "__lt__",
                       "__le__", "__gt__", "__ge__", "__len__", "__iter__", "__contains__", "__getitem__", "__bool__",
                       "__call__"}
DUNDERS_ALLOWED: dict[tuple[str, str], set[str]] = {
    ("FunctionDef", "name"): ALLOWED_DEF_DUNDERS,
    ("ImportFrom", "module"): {"__future__"},
}


def is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")
