"""Ask the submission's wrapper what it would launch at the GPU's shapes, without running it.

    args = build(descriptions)            the call's inputs at a GPU shape, uninitialised
                                          (torch.empty); BSR index arrays are real
    with Capture(probe=True) as cap:      Triton's interpreted launches are intercepted:
        y = fn(*args)                     each is recorded (kernel, grid, arguments), and
    cap.report(named, y)                  with ``probe`` a few of its programs are run
                                          and counted; nothing else of it executes

A CPU run grades correctness on small shapes, where a wrapper may choose other
tiles, warps or kernels than at the GPU's shapes. Calling the wrapper itself
at those shapes shows what the GPU will launch: the launches go to the compile
check (compile.py compiles them for the target GPU with the JIT's own
specialization) and, for the performance tests, to the speed estimate of the
trusted side (grader/estimate.py), which needs per launch:

- its grid and the tensors it was given (shape, strides, size in bytes);
- per program, measured on a few sampled programs run in the interpreter on
  the uninitialised inputs: the bytes each tensor's loads and stores touch
  (every live lane, the distinct 32-byte sectors and 128-byte lines, all as
  bytes), the ``tl.dot`` work by operand type, the element operations of the
  rest (weighted: a division is dearer than an add), and the number of loop steps (the most any one load
  of the kernel ran: a load in a @triton.jit helper is one per call of the
  helper, a load in a ``tl.static_range`` body one per unrolled iteration,
  as the compiler inlines and unrolls them);
- per tensor, how far back in launch order the nearest program that reads the
  same rows runs (from the first loop step of a few more programs): whether a
  re-read can come from the L2 cache depends on it.

An autotuned kernel's configs are all recorded, each launch named by its config
(the GPU's autotuner picks the fastest; the estimate predicts each and does the
same). A sampled program that runs past its time limit (a loop that waits for
another program, say) stops and is marked incomplete. Counts are what the
submission's process reports about itself: the harness validates them and they
never change a score.

This file runs in the untrusted worker and depends on torch, triton and numpy only.
"""

from __future__ import annotations

import inspect
import signal
import sys
import time
import warnings

import numpy as np
import torch

from .hooks import Hooks
from .shapes import describe_config

SECTOR = 32                 # bytes: what DRAM and the caches move at least (a 64-byte access is two)
LINE = 128                  # bytes: a cache line, four sectors under one tag (the L2 holds whole lines' tags)
MAX_LAUNCHES = 12           # launch records kept per call
MAX_FULL_PROGRAMS = 6       # programs run to the end per launch
MAX_SIGNATURES = 12         # programs run for one loop step per base program (sharing distances)
PROGRAM_LIMIT_S = 6.0       # one sampled program, CPU seconds
LAUNCH_BUDGET_S = 20.0      # all sampled programs of one launch, CPU seconds of the worker
WALL_FACTOR = 2.0           # a capture's budget in CPU seconds, on the clock at most this many times as long
FULL_RUN_S = 4.0            # a launch this cheap in the interpreter (counted, CPU seconds) is also run whole

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32,
          "int64": torch.int64}

# Element operations of the interpreter's builder, weighted by what they cost a
# GPU thread relative to an add (about one instruction each, a precise
# division a dozen and more, an integer division about twenty). Layout-only
# operations (broadcasts, reshapes, ranges, constants) cost nothing here.
OP_WEIGHTS = {"create_precise_divf": 14.0, "create_fdiv": 3.0, "create_approx_divf": 2.0,
              "create_idiv": 20.0, "create_sdiv": 20.0, "create_udiv": 20.0, "create_srem": 20.0,
              "create_urem": 20.0, "create_frem": 20.0, "create_precise_sqrt": 8.0, "create_sqrt": 2.0,
              "create_exp": 2.0, "create_exp2": 2.0, "create_log": 2.0, "create_log2": 2.0,
              "create_sin": 4.0, "create_cos": 4.0, "create_rsqrt": 2.0, "create_erf": 8.0,
              "create_extern_elementwise": 8.0, "create_inline_asm": 2.0, "create_reduce": 2.0,
              "create_scan": 4.0, "create_histogram": 4.0, "create_addptr": 1.0}
FREE_OPS = {"create_make_range", "create_expand_dims", "create_broadcast", "create_splat",
            "create_unsplat", "create_reshape", "create_trans", "create_permute", "create_join",
            "create_split", "create_cat", "create_get_program_id", "create_get_num_programs",
            "create_masked_load", "create_masked_store", "create_load", "create_store", "create_dot",
            "create_dot_scaled", "create_atomic_rmw", "create_atomic_cas", "create_print", "create_assert",
            "create_assume", "create_barrier", "create_bitcast", "create_int_to_ptr", "create_ptr_to_int",
            "create_make_tensor_descriptor", "create_descriptor_load", "create_descriptor_store",
            "create_descriptor_gather", "create_descriptor_scatter", "create_make_block_ptr", "create_advance",
            "create_tensor_pointer_load", "create_tensor_pointer_store",
            "create_gather", "create_atomic_load", "create_atomic_store", "create_atomic_poll"}
# Block pointers and tensor descriptors load and store through create_masked_load/_store (counted
# there); their own builder calls are address bookkeeping, free like a pointer's layout.


# ---------------------------------------------------------------------------
# Inputs at a GPU shape
# ---------------------------------------------------------------------------

def build(desc: dict):
    """One argument from its description (trusted data from the harness):
    {"empty": {"shape", "stride", "dtype"}} or {"bsr": {"size", "crow", "col",
    "index_dtype", "dtype", "blocksize"}} (index arrays as lists)."""
    if "empty" in desc:
        d = desc["empty"]
        return torch.empty_strided(tuple(d["shape"]), tuple(d["stride"]), dtype=DTYPES[d["dtype"]])
    d = desc["bsr"]
    index = DTYPES[d["index_dtype"]]
    crow = torch.tensor(d["crow"], dtype=index)
    col = torch.tensor(d["col"], dtype=index)
    bm, bk = d["blocksize"]
    values = torch.empty((len(d["col"]), bm, bk), dtype=DTYPES[d["dtype"]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse BSR support is in beta"
        return torch.sparse_bsr_tensor(crow, col, values, size=tuple(d["size"]), check_invariants=False)


def named_ranges(args, names: list[str]) -> list[tuple[str, int, int]]:
    """(name, first byte, past the last byte) of each input tensor; a BSR
    argument's parts as "<name>.crow_indices" and so on."""
    out = []
    for a, name in zip(args, names):
        if a.layout == torch.strided:
            out.append((name, *_extent(a)))
        else:
            for part in ("crow_indices", "col_indices", "values"):
                out.append((f"{name}.{part}", *_extent(getattr(a, part)())))
    return out


def _extent(t: torch.Tensor) -> tuple[int, int]:
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    return t.data_ptr(), t.data_ptr() + span * t.element_size()


# ---------------------------------------------------------------------------
# Counting one program
# ---------------------------------------------------------------------------

class _Stop(Exception):
    """Ends a sampled program early: its first loop step is done, or its time is up."""


def _stop_of(e: BaseException) -> _Stop | None:
    """The _Stop behind ``e``: a @triton.jit helper re-raises whatever stops inside it as an
    InterpreterError ``from`` it (once per helper it was nested in)."""
    seen = 0
    while e is not None and seen < 64:
        if isinstance(e, _Stop):
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


class _Tensors:
    """The tensors one launch was given: byte range, element size, and the stride
    of their outermost dimension (a "row": what two programs that read the same
    tile of the tensor share)."""

    def __init__(self, tensors: list[tuple[str, torch.Tensor]]):
        self.items = []
        for key, t in tensors:
            start, end = _extent(t)
            if end <= start:
                continue
            strides = [st for s, st in zip(t.shape, t.stride()) if s > 1] or [1]
            row = max(strides) * t.element_size()
            if t.dim() <= 1 or row <= t.element_size():
                row = 128   # a vector: a row is one 128-byte line
            self.items.append((start, end, key, row))
        self.items.sort()
        self.starts = np.array([i[0] for i in self.items], dtype=np.uint64)
        self.ends = np.array([i[1] for i in self.items], dtype=np.uint64)

    def inside(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        """bool per address: whether its ``nbytes`` lie inside one tensor."""
        if not self.items:
            return np.zeros(addr.shape, dtype=bool)
        idx = np.searchsorted(self.starts, addr, side="right").astype(np.int64) - 1
        ok = idx >= 0
        ok[ok] = addr[ok] + np.uint64(nbytes) <= self.ends[idx[ok]]
        return ok

    def split(self, addr: np.ndarray):
        """(key, addresses inside that tensor, its start, its row bytes) for each tensor hit."""
        if addr.size == 0 or not self.items:
            return []
        idx = np.searchsorted(self.starts, addr, side="right").astype(np.int64) - 1
        inside = idx >= 0
        inside[inside] = addr[inside] < self.ends[idx[inside]]
        out = []
        for j in np.unique(idx[inside]):
            start, _, key, row = self.items[int(j)]
            out.append((key, addr[inside & (idx == j)], start, row))
        return out


class _Program:
    """What one sampled program did."""

    def __init__(self):
        self.lanes: dict[str, list[int]] = {}       # key -> [bytes read, bytes written], every live lane
        self.sectors: dict[str, list] = {}          # key -> [read sector arrays, written sector arrays]
        self.rows: dict[str, set] = {}              # key -> rows read (signatures)
        self.rows_written: dict[str, set] = {}      # key -> rows written
        self.dot_flops: dict[str, int] = {}         # operand type -> 2 M N K over the dots
        self.dots = 0
        self.alu = 0.0                              # weighted element operations
        self.sites: dict = {}                       # load line -> times it ran
        self.complete = True


class _Counter:
    """Patches the interpreter's builder while a sampled program runs."""

    def __init__(self, tensors: _Tensors, files: set[str]):
        self.tensors, self.files = tensors, files
        self.prog: _Program | None = None   # None: confine only, count nothing
        self.stop_at_step = False
        self.outside = 0                     # loads and stores that had lanes masked off
        self.unrolled: list[int] = []        # the iteration of each tl.static_range the program is in
        self._hooks = Hooks()

    def _site(self) -> tuple:
        """Where a load is in the compiled code: its call (line and bytecode offset) and the
        call of every @triton.jit helper that leads to it (helpers are inlined: a helper called from two
        places is two loads), and the iteration of each tl.static_range around it (unrolled:
        each iteration is a load of its own). A load line that runs again is a loop's next trip."""
        chain = []
        f = sys._getframe(2)
        for _ in range(256):   # block pointers and descriptors reach the builder many frames down
            if f is None:
                break
            if f.f_code.co_filename in self.files:
                chain.append((f.f_code.co_filename, f.f_lineno, f.f_lasti))   # two loads on one line: two
            f = f.f_back
        return (tuple(chain) or ("?",), tuple(self.unrolled))

    def _static_range(self, original):
        """tl.static_range as the interpreter runs it (a Python range), with the iteration
        kept in ``unrolled`` while its body runs."""
        def static_range(*args, **kwargs):
            stack = self.unrolled   # a program stopped inside the loop leaves this list behind
            stack.append(0)
            try:
                for i, v in enumerate(original(*args, **kwargs)):
                    stack[-1] = i
                    yield v
            finally:
                if stack:
                    stack.pop()
        return static_range

    def _touch(self, ptrs, mask, write: bool):
        """Count one load or store; the mask to use instead of ``mask`` (lanes outside
        every tensor of the launch masked off: uninitialised indices must not make the
        interpreter read or write arbitrary memory), or ``mask`` itself."""
        ty = ptrs.get_element_ty()
        nbytes = max(1, ty.primitive_bitwidth // 8)
        data = np.asarray(ptrs.data)
        flat = data.astype(np.uint64, copy=False)
        live = None if mask is None else np.broadcast_to(np.asarray(mask.data, dtype=bool), data.shape)
        inside = self.tensors.inside(flat, nbytes)
        keep = inside if live is None else inside & live
        p = self.prog
        if p is not None:
            addr = flat[keep]
            for key, a, start, row in self.tensors.split(addr):
                lanes = p.lanes.setdefault(key, [0, 0])
                lanes[write] += int(a.size) * nbytes
                p.sectors.setdefault(key, [[], []])[write].append(np.unique(a // np.uint64(SECTOR)))
                rows = p.rows_written if write else p.rows
                rows.setdefault(key, set()).update(np.unique((a - np.uint64(start)) // np.uint64(row)).tolist())
        if keep.all() if live is None else bool((keep == live).all()):
            return mask
        self.outside += 1
        import triton.language as tl
        import triton.runtime.interpreter as interp
        return interp.TensorHandle(np.ascontiguousarray(keep), mask.dtype if mask is not None else tl.int1)

    def _load(self, ptrs, mask):
        p = self.prog
        if p is not None:
            site = self._site()
            n = p.sites.get(site, 0) + 1
            p.sites[site] = n
            if n > 1 and self.stop_at_step:
                raise _Stop("first step done")
        return self._touch(ptrs, mask, False)

    def install(self) -> None:
        import triton.runtime.interpreter as interp

        B = interp.InterpreterBuilder
        me = self
        names = [n for n in dir(B) if n.startswith("create_")]
        originals = {n: getattr(B, n) for n in names}
        patch_core = interp._patch_lang_core

        # Each kernel and helper call patches the language anew (interpreter._patch_lang):
        # tl.static_range is wrapped every time, after the interpreter's own.
        def patch_lang_core(lang, scope):
            patch_core(lang, scope)
            scope.set_attr(lang, "static_range", me._static_range(lang.static_range))

        # The cache hints after the mask (cache_modifier, eviction_policy) pass through;
        # the interpreter ignores them. A descriptor load passes them by keyword.
        def masked_load(self, ptrs, mask, *rest, **kw):
            mask = me._load(ptrs, mask)
            return originals["create_masked_load"](self, ptrs, mask, *rest, **kw)

        def masked_store(self, ptrs, value, mask, *rest, **kw):
            mask = me._touch(ptrs, mask, True)
            return originals["create_masked_store"](self, ptrs, value, mask, *rest, **kw)

        def read(self, ptr, mask):
            # An atomic's read, through the interpreter's own load: no cache hints, volatile.
            return originals["create_masked_load"](self, ptr, mask, other=None, cache_modifier=None,
                                                   eviction_policy=None, is_volatile=True)

        # A counted program's atomics read and do not write: it runs alone, out of order,
        # and must not leave a counter or a lock that the module keeps between calls
        # (a split-K tile counter, say) in a state no real launch would leave it in.
        def atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope):
            me._touch(ptr, mask, False)
            mask = me._touch(ptr, mask, True)
            if me.prog is not None:
                return read(self, ptr, mask)
            return originals["create_atomic_rmw"](self, rmwOp, ptr, val, mask, sem, scope)

        def atomic_cas(self, ptr, cmp, val, sem, scope):
            # No mask to narrow: an address outside every tensor stops the program instead.
            me._touch(ptr, None, False)
            if me._touch(ptr, None, True) is not None:
                raise _Stop("an atomic outside every tensor")
            if me.prog is not None:
                import triton.language as tl
                import triton.runtime.interpreter as interp
                everywhere = interp.TensorHandle(np.ones(np.shape(ptr.data), dtype=bool), tl.int1)
                return read(self, ptr, everywhere)
            return originals["create_atomic_cas"](self, ptr, cmp, val, sem, scope)

        # A dot is counted, not computed: the inputs are uninitialised, so its values
        # mean nothing, and NumPy has no fast fp16 or int8 product.
        def dot(self, a, b, acc, *rest, **kw):
            me._dot(a, b)
            return _skipped_dot(a, b, acc)

        def dot_scaled(self, lhs, lhs_scale, lhs_format, rhs, *rest, **kw):
            me._dot(lhs, rhs)
            return _skipped_dot(lhs, rhs, kw.get("acc_handle", rest[-1] if rest else None))

        def counted(name, fn, weight):
            def op(self, *args, **kwargs):
                out = fn(self, *args, **kwargs)
                p = me.prog
                if p is not None:
                    data = getattr(out, "data", None)
                    if isinstance(data, np.ndarray):
                        p.alu += weight * data.size
                return out
            op.__name__ = name
            return op

        patches = {"create_masked_load": masked_load, "create_masked_store": masked_store,
                   "create_atomic_rmw": atomic_rmw, "create_atomic_cas": atomic_cas, "create_dot": dot}
        if "create_dot_scaled" in originals:   # an interpreter without it (3.6) runs no tl.dot_scaled
            patches["create_dot_scaled"] = dot_scaled
        for name in names:
            if name in patches or name in FREE_OPS or not callable(originals[name]):
                continue
            patches[name] = counted(name, originals[name], OP_WEIGHTS.get(name, 1.0))
        self._hooks.install({(B, name): fn for name, fn in patches.items()})
        self._hooks.install({(interp, "_patch_lang_core"): patch_lang_core})

    def _dot(self, a, b) -> None:
        p = self.prog
        if p is None:
            return
        a_shape, b_shape = np.shape(a.data), np.shape(b.data)
        k = a_shape[-1] if a_shape else 1
        n = b_shape[-1] if b_shape else 1
        flops = 2 * int(np.prod(a_shape[:-1], dtype=np.int64)) * int(k) * int(n)
        kind = str(a.get_element_ty())
        p.dot_flops[kind] = p.dot_flops.get(kind, 0) + flops
        p.dots += 1

    def restore(self) -> None:
        self._hooks.restore()


# ---------------------------------------------------------------------------
# The capture
# ---------------------------------------------------------------------------

def _skipped_dot(a, b, acc):
    """What a dot of ``a`` and ``b`` into ``acc`` returns, with zeros for the product."""
    import triton.runtime.interpreter as interp

    if acc is not None and hasattr(acc, "data"):
        return interp.TensorHandle(np.array(acc.data, copy=True), acc.dtype.scalar)
    shape = np.shape(a.data)[:-1] + np.shape(b.data)[-1:]
    return interp.TensorHandle(np.zeros(shape, dtype=np.float32), a.dtype.scalar)


def _bytes_in(parts: list, unit: int) -> int:
    """Bytes of the distinct ``unit``-byte blocks (sectors or lines) that the sector arrays
    ``parts`` of one program fall in."""
    if not parts:
        return 0
    if len(parts) == 1 and unit == SECTOR:
        return SECTOR * int(parts[0].size)   # one access's sectors: already distinct
    return unit * int(np.unique(np.concatenate(parts) // np.uint64(unit // SECTOR)).size)


def _linear(pid: int, grid) -> tuple[int, int, int]:
    """Grid coordinates of the ``pid``-th program in launch order (axis 0 fastest)."""
    return pid % grid[0], (pid // grid[0]) % grid[1], pid // (grid[0] * grid[1])


class _Alarm:
    """A limit on a sampled program's CPU time (not wall time: a busy machine must not
    change what is counted): _Stop is raised inside it when the time is spent."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __enter__(self):
        def ring(signum, frame):
            raise _Stop("time limit")
        self.old = signal.signal(signal.SIGVTALRM, ring)
        signal.setitimer(signal.ITIMER_VIRTUAL, max(0.01, self.seconds))
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, self.old)


class Capture:
    """Intercepts every interpreted launch while installed (see the module docstring)."""

    def __init__(self, probe: bool = False, files: set[str] | None = None, budget_s: float = 60.0):
        """``probe``: sample and count programs of each launch; ``files``: the
        submission's source files (the kernel lines that count as load sites);
        ``budget_s``: all probes of this capture together, in CPU seconds of this process, so
        that a busy machine counts what an idle one does (and at most ``WALL_FACTOR`` times as
        long on the clock)."""
        self.probe = probe
        self.files = files or set()
        self.cpu_deadline = time.process_time() + budget_s
        self.deadline = time.monotonic() + WALL_FACTOR * budget_s
        self.launches: list[dict] = []
        self.dropped = 0
        self.errors: list[str] = []
        self._hooks = Hooks()

    # -- patching ---------------------------------------------------------------
    def install(self) -> None:
        import triton.runtime.autotuner as autotuner
        import triton.runtime.interpreter as interp

        G, A = interp.GridExecutor, autotuner.Autotuner
        me = self
        orig_run = A.run

        def call(executor, *args, **kwargs):
            me._launch(executor, args, kwargs)

        def bench(tuner, *args, config, **meta):
            # One captured launch per config, named by it, instead of a benchmark: every config
            # ties (the autotuner keeps the first) and the estimate picks the fastest of them itself.
            first = len(me.launches)
            try:
                tuner.fn.run(*args, **meta, **config.all_kwargs())
            except Exception as e:  # noqa: BLE001 - a config that fails to launch: as the autotuner does
                me.errors.append(f"autotune config {config}: {type(e).__name__}: {e}"[:300])
                return [float("inf")] * 3
            for launch in me.launches[first:]:
                launch["config"] = describe_config(config)[:200]
            return [0.0] * 3

        def run(tuner, *args, **kwargs):
            # Every call tries all its configs, as the first call of its key does on the GPU: a key
            # met before (another test, the same key) would reuse a pick that ties made.
            first, cache = len(me.launches), tuner.cache
            tuner.cache = {}
            try:
                return orig_run(tuner, *args, **kwargs)
            finally:
                tuner.cache = cache
                mine = list(range(first, len(me.launches)))
                if len(mine) > 1:   # the trials, then the launch the autotuner chose
                    chosen = mine[-1]
                    me.launches[chosen]["alternatives"] = mine[:-1]
                    for i in mine[:-1]:
                        me.launches[i]["trial"] = True

        self._hooks.install({(G, "__call__"): call, (A, "run"): run, (A, "_bench"): bench})

    def restore(self) -> None:
        self._hooks.restore()

    def __enter__(self):
        self.install()
        return self

    def __exit__(self, *exc):
        self.restore()

    # -- one launch -------------------------------------------------------------
    def _launch(self, executor, args, kwargs) -> None:
        import triton.runtime.interpreter as interp

        spec = inspect.getfullargspec(executor.fn)
        kwargs = {k: v for k, v in kwargs.items() if k in spec.args or k in spec.kwonlyargs}
        args_hst, kwargs_hst = executor._init_args_hst(args, kwargs)
        callargs = inspect.getcallargs(executor.fn, *args_hst, **kwargs_hst)
        callargs = {n: v if n in executor.constexprs else interp._implicit_cvt(v) for n, v in callargs.items()}
        grid = executor.grid(callargs) if callable(executor.grid) else executor.grid
        grid = tuple(int(g) for g in tuple(grid)) + (1,) * (3 - len(tuple(grid)))
        tensors = []   # (parameter name, tensor) of the launch's tensor arguments
        for name, a in inspect.getcallargs(executor.fn, *args, **kwargs).items():
            _tensors_of(a, name, tensors)
        record = {"kernel": getattr(executor.fn, "__name__", "?")[:100], "grid": list(grid),
                  "programs": grid[0] * grid[1] * grid[2],
                  "tensors": [{"key": k, "ptr": t.data_ptr(), "bytes": _extent(t)[1] - _extent(t)[0],
                               "storage": t.untyped_storage().data_ptr()} for k, t in tensors]}
        if len(self.launches) >= MAX_LAUNCHES:
            self.dropped += 1
            return
        self.launches.append(record)
        if self.probe and record["programs"] > 0:
            try:
                self._probe(executor, callargs, grid, tensors, record)
            except Exception as e:  # noqa: BLE001 - a probe that fails costs its counts only
                record["probe_error"] = f"{type(e).__name__}: {e}"[:300]

    def _probe(self, executor, callargs, grid, tensors, record) -> None:
        """Run sampled programs of the launch with their work counted, then, if the
        whole launch is cheap in the interpreter, all of it (uncounted): a later
        launch of the same call may read what this one writes (a workspace, a
        list of indices) and should not see uninitialised memory there."""
        import triton.runtime.interpreter as interp

        started, cpu_started = time.monotonic(), time.process_time()
        budget = min(LAUNCH_BUDGET_S, self.cpu_deadline - cpu_started)   # CPU seconds
        if budget <= 0.5 or self.deadline - started <= 0.5:
            record["probe_error"] = "not counted: the capture's time budget ran out"
            return
        counter = _Counter(_Tensors(tensors), self.files)
        P = record["programs"]
        # The first and last programs (edges), and a few drawn at random (not at round
        # fractions of the grid, which in a 1-D grid split with % all land on one row).
        drawn = np.random.default_rng(P).choice(P, size=min(P, MAX_FULL_PROGRAMS - 2), replace=False)
        full = list(dict.fromkeys([0, P - 1, *map(int, drawn)]))[:MAX_FULL_PROGRAMS]
        # Sharing distances are looked for behind a few programs: a program next to the
        # grid's centre, one near its end, one a third of the way in (one of them at the
        # start of a group of a grouped order, say, finds no one before it that shares).
        centre = grid[0] // 2 + grid[0] * (grid[1] // 2) + grid[0] * grid[1] * (grid[2] // 2)
        bases = list(dict.fromkeys(b for b in (min(P - 1, centre + 5), P - 3, P // 3 + 7) if 0 <= b < P))
        dists = sorted({d for d in (1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                                    grid[0], 2 * grid[0], grid[0] * grid[1]) if d > 0})
        counter.install()   # first: the language patch below takes the counted tl.static_range
        patch = interp._patch_lang(executor.fn)
        programs, signatures, spent = [], {}, []
        try:
            def run(pid, count, step_only=False, limit=PROGRAM_LIMIT_S):
                left = min(cpu_started + budget - time.process_time(), self.deadline - time.monotonic())
                if left <= 0.05:
                    return None
                prog = counter.prog = _Program() if count else None
                counter.stop_at_step = step_only
                counter.unrolled = []
                interp.interpreter_builder.set_grid_dim(*grid)
                interp.interpreter_builder.set_grid_idx(*_linear(pid, grid))
                t0 = time.process_time()
                try:
                    with _Alarm(min(limit, left)):
                        executor.fn(**callargs)
                except Exception as stopped:  # noqa: BLE001 - only a _Stop, maybe raised inside a helper
                    e = _stop_of(stopped)
                    if e is None:
                        raise
                    if prog is not None:
                        prog.complete = str(e) == "first step done"
                    else:
                        return False
                finally:
                    counter.prog = None
                spent.append(time.process_time() - t0)   # CPU time: the same on a busy machine
                return prog if count else True

            for pid in full:
                prog = run(pid, True)
                if prog is None:
                    break
                programs.append(prog)
                if not prog.complete:
                    break
            for base in bases:
                for pid in [base] + [base - d for d in dists if d <= base][:MAX_SIGNATURES - 1]:
                    if pid in signatures:
                        continue
                    prog = run(pid, True, step_only=True)
                    if prog is None:
                        break
                    signatures[pid] = prog.rows
            each = sum(spent[:len(programs)]) / max(1, len(programs))
            if programs and all(p.complete for p in programs) and each * P <= FULL_RUN_S:
                record["ran"] = all(run(pid, False, limit=FULL_RUN_S) for pid in range(P))
        finally:
            patch.restore()
            counter.restore()
        record.update(_summary(programs, signatures, bases, dists))
        record["outside"] = counter.outside
        record["probe_s"] = round(time.monotonic() - started, 3)

    # -- the result -------------------------------------------------------------
    def report(self, named: list[tuple[str, int, int]], output=None) -> dict:
        """Plain JSON: the launches in order, each tensor named after the call's
        inputs ("x", "weight_bsr.values"), "output", or "scratch" (others)."""
        out_storage = output.untyped_storage().data_ptr() if isinstance(output, torch.Tensor) else None
        scratch: dict[int, str] = {}
        launches = []
        for rec in self.launches:
            names = {}
            for t in rec.pop("tensors"):
                name = next((n for n, s, e in named if s <= t["ptr"] < e), None)
                if name is None and t["storage"] == out_storage:
                    name = "output"
                elif name is None:
                    name = scratch.setdefault(t["storage"], f"scratch{len(scratch) + 1}")
                names[t["key"]] = {"name": name, "bytes": int(t["bytes"])}
            rec["tensors"] = names
            launches.append(rec)
        return {"launches": launches, "dropped": self.dropped, "errors": self.errors[:5]}


def _tensors_of(value, key: str, found: list) -> None:
    if isinstance(value, torch.Tensor) and value.layout == torch.strided:
        found.append((key, value))
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            _tensors_of(v, f"{key}.{i}", found)
    elif hasattr(value, "base") and hasattr(value, "block_shape"):   # a TensorDescriptor
        _tensors_of(value.base, key, found)


def _summary(programs: list[_Program], signatures: dict, bases: list[int], dists: list[int]) -> dict:
    """Per-program means of the counts, and per tensor the nearest sharing distance:
    the smallest d, over the base programs, such that the program d launches
    earlier reads at least half the rows the base program reads."""
    if not programs:
        return {"sampled": 0}
    n = len(programs)
    keys = sorted({k for p in programs for k in p.lanes})
    per_tensor = {}
    for k in keys:
        lanes = [p.lanes.get(k, [0, 0]) for p in programs]
        sect = [p.sectors.get(k, [[], []]) for p in programs]
        entry = {"lanes_read": sum(x[0] for x in lanes) / n, "lanes_written": sum(x[1] for x in lanes) / n,
                 "sectors_read": sum(_bytes_in(s[0], SECTOR) for s in sect) / n,
                 "sectors_written": sum(_bytes_in(s[1], SECTOR) for s in sect) / n,
                 "lines_read": sum(_bytes_in(s[0], LINE) for s in sect) / n,
                 "lines_written": sum(_bytes_in(s[1], LINE) for s in sect) / n,
                 "rows_read": sum(len(p.rows.get(k, ())) for p in programs) / n,
                 "rows_written": sum(len(p.rows_written.get(k, ())) for p in programs) / n}
        found = []
        for base in bases:
            mine = signatures.get(base, {}).get(k)
            if not mine:
                continue
            for d in dists:
                theirs = signatures.get(base - d, {}).get(k)
                if theirs is not None and len(mine & theirs) >= 0.5 * len(mine):
                    found.append(d)
                    break
        if found:
            entry["shared_at"] = min(found)
        per_tensor[k] = {name: (round(v, 1) if isinstance(v, float) else v) for name, v in entry.items()}
    flops: dict[str, float] = {}
    for p in programs:
        for kind, f in p.dot_flops.items():
            flops[kind] = flops.get(kind, 0) + f / n
    steps = [max(p.sites.values(), default=0) for p in programs]
    # Trips of an enclosing loop: load lines that run more than once, less often than the busiest.
    outer = [max((c for c in p.sites.values() if 1 < c < top), default=0) for p, top in zip(programs, steps)]
    return {"sampled": n, "complete": all(p.complete for p in programs),
            "counts": per_tensor, "dot_flops": {k: round(v) for k, v in flops.items()},
            "dots": round(sum(p.dots for p in programs) / n, 2),
            "alu": round(sum(p.alu for p in programs) / n, 1),
            "steps": round(sum(steps) / n, 2), "max_steps": max(steps), "outer_steps": round(sum(outer) / n, 2),
            "signatures": len(signatures)}
