"""Read a kernel file, without running it, and name what a kernel file may not use.

The gate of the rule "the product is computed by the file's own Triton kernel"
(docs/integrity.md, "Uses Triton"): a finding voids the task's points
(``forbidden_code``, grader/judge.py), and the worker's run-time records come
second. It is not the security boundary: a flagged file still runs, and the
worker's OS sandbox and the trusted harness (which judges and times outputs
itself) are what make a grade hold against code that gets past the check. For
an honest student it says, before anything runs, which line uses something
outside the rules, why, and what to use instead.

**Allowlist, not denylist.** Every name the file reaches through an import is
resolved to a dotted path (``F.linear`` -> ``torch.nn.functional.linear``) and
must be on ``ALLOWED_PATHS``; everything else is refused by default. The lists
were chosen from what the reference solutions (``solutions/``), the
tutorial-style kernels (``calibration/naive/``) and the stubs
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
  maintainer lists them (tests/integrity/test_staticcheck.py walks every public name).
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
  the handout says; tests/integrity/test_integrity.py holds the two together.

**Syntax** is an allowlist too (``policy.SYNTAX``): every node of Python's grammar
a kernel file may contain, each of its fields with a rule; everything else
(``match``, ``async``, ``await``, ``except*``, class keywords such as
``metaclass=``, type parameters, a newer Python's nodes and fields) is refused
with its name in words ("a `match` statement has no place in a kernel file":
its class patterns read attributes off any object). Dunder identifiers are
refused everywhere (parameters, keywords, imports, except targets, globals, item
keys), but ``__name__``, ``__qualname__``, ``__doc__``, ``__version__`` and the
ordinary protocol methods a class may define (``__init__``, ``__repr__``,
``__eq__``, ...; not ``__getattr__``, ``__init_subclass__``, ``__set_name__``,
``__new__``).

**Values** (tensors, dicts, your own objects) have unknown types, so their
attributes are checked by name: outside a ``@triton.jit`` function a value
attribute must be on ``VALUE_ATTRS`` (shape/stride/dtype/device, views,
``.contiguous()``, ``.to()``, BSR ``.crow_indices()``/``.col_indices()``/
``.values()``, ``.item()``, ``.max``/``.min`` for ``finfo``/``iinfo``,
``Config.kwargs``/``all_kwargs()``, dict/list/str methods). An attribute that a
class of the file declares is accepted only on a value the check can tie to that
class (owntypes.py: ``self``, the class, ``C(...)``, annotations, annotated
returns and containers), never on every object; and never when the name is also
an attribute of ``torch.Tensor``, of a Triton kernel object, or of the
interpreter's frames, code objects and generators (``gi_frame``, ``f_globals``,
``mro``), nor Triton's internal names (``.handle``, the interpreter's numpy arrays;
``._flatten_ir``). Dunder attributes are refused everywhere, except ``__name__``,
``__qualname__``, ``__doc__``, ``__init__`` and ``__version__`` outside kernels.
``"...".format(...)`` is allowed on a string literal whose fields read no
attribute or item starting with ``_``; on anything else (a computed string,
``str.format``) it is refused. ``type(x)`` may be read (``type(x).__name__``) or
compared (``type(x) is C``), not kept, passed or called.

**Builtins** are listed too: the ordinary ones (``len``, ``range``, ``min``,
``max``, ``isinstance``, ``print``, exceptions, ...) are fine; ``eval``,
``exec``, ``compile``, ``__import__``, ``open``, ``input``, ``globals``,
``locals``, ``vars``, ``dir``, ``setattr``, ``delattr``, ``breakpoint``,
``exit``, ``memoryview``, ``SystemExit`` and the builtin ``sum`` (it adds
tensors in PyTorch; ``math.prod`` and loops serve shapes) are refused unless a
function binds that name locally (a parameter called ``input`` is fine).
Outside kernels ``getattr`` is fine called with a literal name (it is read as ``x.name``),
refused with a computed one or as a value (``g = getattr``); ``type()`` with
three arguments (a class built at run time) is refused.

**Inside a kernel** the allowlist is what Triton's language has, because the CPU
interpreter runs a kernel as Python on values that hold numpy arrays while the GPU
compiler sees only IR, and whatever tells the two apart picks a branch the GPU never
builds. An attribute of a value must be one of Triton's language values' public
attributes (``KERNEL_ATTRS``: ``tl.tensor``'s methods and ``dtype``/``shape``/``numel``,
the dtypes', ``constexpr.value``, block pointers' ``advance``, tensor descriptors'
``load``/``store``/``block_shape``, ...), which tests/integrity/test_staticcheck_kernel.py
holds against the installed Triton (every public attribute is listed or refused with its
reason in ``KERNEL_REFUSED_ATTRS``: ``handle``, the code generator's). The builtins are
those the GPU compiler knows (``len``, ``list``, ``range``, ``float``, ``int``,
``print``, ``min``, ``max``), not ``hasattr``, ``getattr``, ``isinstance`` (they answer
differently in the interpreter), nor ``str``, ``type``, ``abs``, .... Through imports a
kernel reaches ``tl.*``, triton's listed names, math and ``.utils``, never a host module
(``os.environ`` in a kernel). A global a kernel reads is another kernel or a constant
(grader/staticcheck/constants.py: a number, bool, string, dtype, ``tl.constexpr`` of one,
arithmetic on these, bound once at module level), never a function, class or lambda of
the file, nor a value from the environment; and every ``tl.constexpr(...)`` outside a
kernel holds such a constant, never ``os.environ``, a callable or a module.

**Kernels.** A function is a kernel only if a decorator resolves through the
imports to ``triton.jit``: a local ``def jit(f): return f`` is ordinary Python
and its body is checked as such. Outside kernels ``@`` is refused (it is a
PyTorch matmul there); inside, Triton code (``tl.dot``, ``@``, ``.sum``) is
allowed. Outside kernels a kernel may be launched (``k[grid](...)``) and
chosen through a plain alias (``k = _a if small else _b``), nothing else: not
called, returned, passed, stored, aliased in a class, or wrapped by any
decorator but ``triton.jit``/``autotune``/``heuristics``, and it is defined at
the top level; ``k2 = triton.autotune(...)(k)`` (or ``heuristics``, nested) at
the top level makes ``k2`` a kernel too, launched as ``k2[grid](...)``. The
Triton interpreter (the CPU grader) runs a direct call as plain Python on
PyTorch tensors. What a launch returns (Triton's compiled
kernel) is dropped or returned, never kept: launched again as
``compiled[grid](...)`` it would bypass the launch record.

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
``dynamic-code``, ``builtin``, ``patching``, ``jit-call``, ``kernel-global`` (a
global a kernel may not read, a ``tl.constexpr`` of something not constant), ``syntax-refused``
(a construct off ``policy.SYNTAX``); and for files that
cannot be checked ``syntax``, ``too-large``, ``too-complex``, ``internal``;
``truncated`` closes a list cut at ``MAX_FINDINGS``. ``extra_allowed_imports``
(rubric.toml) adds modules, each with everything under it.

Left to run time (the static check cannot see types): elementwise arithmetic
with ``* + /`` on tensors, and a PyTorch tensor smuggled into a kernel as a
``tl.constexpr`` (the GPU compile of that kernel fails).

The package: policy.py holds the lists, the grammar and the reasons, scopes.py
how names bind, owntypes.py which values are the file's own classes', constants.py
which module-level names are constants, checker.py
the pass over a file; ``check_source`` (here) is the entry.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

from .checker import Finding, _Checker
from .policy import ALLOWED_MODULES, ALLOWED_PATHS, TL_NAMES, TL_REFUSED

__all__ = ["ALLOWED_MODULES", "ALLOWED_PATHS", "MAX_FINDINGS", "MAX_SOURCE_BYTES", "TL_NAMES", "TL_REFUSED", "Finding",
           "check_source", "forbidden_message"]

MAX_SOURCE_BYTES = 256 * 1024  # the reference kernel files are 8-15 KiB
MAX_FINDINGS = 100


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


def forbidden_message(file: str, findings) -> str:
    """The one line a grade gives a kernel file with findings (its task's
    ``forbidden_code`` flag), also what ``make submit`` prints before it refuses
    to upload the file: the first five findings."""
    return f"forbidden code in {file}: " + "; ".join(str(f) for f in list(findings)[:5])


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
