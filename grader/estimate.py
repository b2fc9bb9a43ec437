"""The speed of each performance test, predicted on a CPU run: an estimate, never a score.

    estimate(run, rubric) -> {test: prediction}      (run.capture and run.kernels of a CPU run)

A CPU run cannot time anything, but it knows what the GPU will run: the
wrapper's launches at each performance test's GPU shape (grader/harness/
capture.py), each compiled for the target (grader/worker/compile.py: its
registers, shared memory, warps and stages; grader/worker/ptx.py reads its
PTX: per thread the instructions of one trip of its innermost loop, the
width of each global load and store, which loads are asynchronous copies,
and per warp the passes its memory instructions cost the load/store unit),
and for a few sampled programs of each launch what they load, store and
multiply (grader/worker/capture.py). From that, for each GPU the rubric was
calibrated on (grader/targets.toml, generated from the results files), a
launch's time is modelled from six bounds:

- **DRAM**: the bytes that must come from device memory at the measured copy
  bandwidth, in the 32-byte sectors the GPU moves (a program's 64-byte run of
  a row is two sectors, whatever its neighbours read). A tensor is read from
  DRAM once (its footprint), and again for each re-read that the L2 cache
  cannot serve: the re-read comes from a program too far behind in launch
  order for the data to still be in L2 (the sampled programs say how far back
  the nearest program reading the same rows runs; the window is what runs at
  once, or what fits in L2 if more, counted in the 128-byte lines the
  programs hold there: the L2 keeps a line's tag for any sector of it). Data a
  previous launch of the same call wrote is in L2 if it fits.
- **L2**: every sector the programs touch, at a multiple of that bandwidth.
- **tensor cores**: the ``tl.dot`` work at the tensor cores' rate for its type:
  the measured fp16 peak (``torch.matmul``) times the type's dense peak over
  fp16's in NVIDIA's figures for the GPU (grader/targets.toml's
  ``tensor_tflops``: int8 twice fp16 on Hopper), less for the older
  ``mma.sync`` instructions Triton uses for small tiles. The library's own
  int8 product (``torch._int_mm``) reaches far less than the hardware's rate,
  so its measured peak is no measure of what a Triton kernel can reach.
- **issue**: every instruction of every warp, four warps' worth per cycle per SM.
- **load/store unit**: every pass its memory instructions cost a warp (one per
  128-byte line a global access touches: a 16-byte vector load of 32 adjacent
  lanes takes 4, a 2-byte load whose lanes sit in 32 rows takes 32; shared
  memory one per 128 bytes and per bank conflict), one line a cycle on each
  SM, for the programs of the busiest SM. Loads the compiler could not
  vectorize, with their lanes far apart, make a kernel slow here.
- **latency**: waves of programs (as many run at once as the occupancy from the
  compile allows) times one program's time: its loop trips, each as long as
  its instructions take one warp that waits on each result (unless enough
  warps share the scheduler to hide that), or its loads take to arrive (a load
  in the software pipeline waits less, by the number of stages in flight; a
  load whose address needs another load of the same trip waits in full), and
  one round trip to memory per trip of an enclosing loop; plus the start of
  each program, which overlaps with the others resident on its multiprocessor
  (a grid of many short programs pays for it).

They overlap, so they combine as ``(sum t^p)^(1/p)``, plus a fixed cost per
launch. A call is its launches in order, an autotuned launch predicted for
every config its autotuner tries and taken at the fastest, as the autotuner on
the GPU would pick it (the report names that config and the slowest); no call
is predicted faster than moving the task's fewest bytes (every input read
once, the output written once: the judge's memory floor) at the measured copy
bandwidth. The time modelled is the kernels' alone, as the grader's clock
times a call, and the fp16 baseline of grader/targets.toml is
``torch.matmul`` alone (results recorded while the clock also timed a copy of
each output into the harness's arena are corrected by that copy:
``output_copy_ms``).

The constants below were fitted to the times the grader measured for the
tutorial-style kernels and the kernels written from the handout on an H100
and an H200 (tests/engine/test_estimate.py checks the fit; tools/
validate_estimate.py measures it again on a GPU for more kernels), except
``LSU_LINES_PER_CYCLE``, the L1's documented 128 bytes a cycle. The
prediction is shown as a range, with the points that range would earn, and
says what bounds each launch: it teaches where the time goes, it does not
promise a score. The range is the model's own measured error: on the
validation runs (tools/validate_estimate.py, recorded in results/), the
spread of measured over predicted time among calls bound by the same thing
(DRAM, latency, tensor cores, ...), its 10th to 90th percentile
(grader/targets.toml's ``[uncertainty]``: a :class:`Band` per bound kind,
with how many validation tests it rests on and how many fell inside). A kind
with fewer than ``MIN_BAND_TESTS`` such tests takes the band of all kinds
together; with no validation runs at all, the range is time / 1.5 to
time * 1.5 (``UNCERTAINTY``), and the report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from .rubric import Rubric, TestSpec, tomllib

TARGETS_FILE = Path(__file__).with_name("targets.toml")

# The model's version: bump it with every change that moves a prediction. Validation rows
# record the version that predicted them; the ranges (``[uncertainty]``) are fitted only
# from rows of this version, so after a bump run ``python -m tools.validate_estimate
# --predict`` on every results file with estimate rows, then ``make docs``.
MODEL_VERSION = "2026-12-07"

# Model constants (see the docstring; fitted as it says).
LATENCY_US = 1.0          # a global load's round trip, microseconds
SYNC_SHARE = 0.3          # of it, what a synchronous load leaves unhidden in its trip
CPI_DEPENDENT = 3.5       # cycles one warp waits for an instruction's result before the next
SERIAL_CYCLES = 150.0     # cycles one warp spends on a serial instruction (ptx.SERIAL: a correctly rounded
                          # division or square root, an integer division or modulo): its chain, its branch
PROGRAM_US = 0.3          # per program and multiprocessor: starting a block (one resident at a time)
L2_FACTOR = 3.0           # L2-to-SM bandwidth / DRAM copy bandwidth
LAUNCH_US = 2.5           # per launch: start, fill, drain
MMA_SYNC = 0.5            # mma.sync's share of the tensor cores' peak (wgmma: all of it)
L2_USABLE = 0.6           # share of the L2 that holds re-read data
SOFT_P = 3.0              # (sum t^p)^(1/p)
UNCERTAINTY = 1.5         # the range where no validation run says more: time / 1.5 .. time * 1.5
MIN_BAND_TESTS = 6        # validation tests a bound kind needs for a range of its own (else all kinds pooled)
LSU_LINES_PER_CYCLE = 1.0  # per SM: 128-byte lines the L1's load/store path serves a cycle (128 B/clk)


@dataclass(frozen=True)
class Target:
    """One GPU a grade is predicted for (grader/targets.toml)."""
    name: str
    sms: int
    copy_gbs: float                  # device copy, bytes read + written, GB/s (measured)
    tflops: dict                     # dot operand type -> TFLOP/s of the library product (measured)
    l2_bytes: int
    clock_ghz: float
    source: str = ""                 # the results file the figures come from
    smem_per_sm: int = 233472        # bytes a multiprocessor shares among its blocks
    regs_per_sm: int = 65536
    max_warps: int = 64
    max_blocks: int = 32
    baseline_ms: dict = field(default_factory=dict)   # "MxNxK" -> fp16 torch.matmul per call, as graded
    reference_ms: dict = field(default_factory=dict)  # test -> the reference solution's time, as graded
    tensor_tflops: dict = field(default_factory=dict)  # dot operand type -> dense tensor-core peak (NVIDIA's)
    tensor_source: str = ""          # where tensor_tflops comes from

    def tensor_peak(self, kind: str) -> float:
        """TFLOP/s of a dot whose operands are ``kind`` (Triton's type name): the measured fp16
        peak scaled by the type's share of NVIDIA's dense figures for the GPU (the same
        tensor cores: what fp16 reaches of its figure, every type reaches of its own)."""
        fp16 = self.tflops.get("fp16", 1.0)
        kind = {"uint8": "int8", "fp32": "tf32"}.get(kind, "fp8" if kind.startswith("fp8") else kind)
        figures = self.tensor_tflops
        if figures.get("fp16") and figures.get(kind):
            return fp16 * figures[kind] / figures["fp16"]
        # A GPU without NVIDIA's figures recorded (one tools/validate_estimate meets first):
        # the ratios of Ampere's and Hopper's dense figures.
        return fp16 * {"int8": 2.0, "fp8": 2.0, "tf32": 0.5}.get(kind, 1.0)


@dataclass(frozen=True)
class Band:
    """How far the GPU's time fell from the predicted one on the validation runs, for
    calls bound by one thing (grader/targets.toml's ``[uncertainty]``): the range shown
    is predicted time * low .. predicted time * high."""
    kind: str                 # what bounds the call ("DRAM", "latency", ...), "all", or "default"
    low: float                # measured / predicted time: the range's lower end (at most 1)
    high: float               # ... and its upper end (at least 1)
    tests: int = 0            # validation tests it rests on
    within: int = 0           # of them, how many were measured inside the range

    def as_dict(self) -> dict:
        return {"kind": self.kind, "low": self.low, "high": self.high, "tests": self.tests, "within": self.within}


DEFAULT_BAND = Band("default", 1 / UNCERTAINTY, UNCERTAINTY)


def load_bands(path: Path = TARGETS_FILE) -> dict[str, Band]:
    """grader/targets.toml's ``[uncertainty]``: {bound kind: Band}, "all" among them; {} when absent."""
    try:
        data = tomllib.loads(path.read_text()).get("uncertainty", {})
    except (OSError, ValueError):
        return {}
    out = {}
    for kind, b in data.items():
        if not isinstance(b, dict):
            continue
        try:
            low, high = min(1.0, float(b["low"])), max(1.0, float(b["high"]))
            out[kind] = Band(kind, low, high, int(b.get("tests", 0)), int(b.get("within", 0)))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def band_for(kind: str, bands: dict[str, Band]) -> Band:
    """The range for a call bound by ``kind``: its own band where enough validation tests
    were bound by it, else that of all kinds together, else ``DEFAULT_BAND``."""
    own = bands.get(kind)
    if own is not None and own.tests >= MIN_BAND_TESTS:
        return own
    pooled = bands.get("all")
    return pooled if pooled is not None and pooled.tests >= MIN_BAND_TESTS else DEFAULT_BAND


def call_bound(launches: list[dict]) -> str:
    """What bounds a call: the bound of its longest launch ("" when nothing launches)."""
    timed = [launch for launch in launches if math.isfinite(launch.get("us", 0.0))]
    return max(timed, key=lambda launch: launch["us"])["bound"] if timed else ""


def load_targets(path: Path = TARGETS_FILE) -> list[Target]:
    """The GPUs of grader/targets.toml; [] when the file is missing or unreadable."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        return []
    out = []
    for g in data.get("gpu", []):
        try:
            out.append(Target(**g))
        except TypeError:
            continue
    return out


def shape_key(shape) -> str:
    return "x".join(str(int(v)) for v in shape)


def output_copy_ms(shape, copy_gbs: float) -> float:
    """What the grader's clock added to every timed call, on both sides, before it
    timed the calls alone: a copy of the call's [M, N] fp16 output into the harness's
    arena (one more kernel in the graph: a launch, and the bytes read and written at
    the copy bandwidth). tools.gpu_session.kernel_only_ms takes it off such times."""
    M, N = int(shape[0]), int(shape[1])
    return LAUNCH_US * 1e-3 + 2 * (2 * M * N) / (copy_gbs * 1e9) * 1e3



# ---------------------------------------------------------------------------
# One launch
# ---------------------------------------------------------------------------

def occupancy(row: dict, gpu: Target) -> tuple[int, str]:
    """(programs that fit on one multiprocessor at once, what limits them)."""
    warps = int(row.get("num_warps") or 4)
    regs = row.get("registers") or 0
    smem = row.get("shared_bytes") or 0
    limits = {"warps": gpu.max_warps // warps, "blocks": gpu.max_blocks}
    if regs:
        per_warp = math.ceil(regs * 32 / 256) * 256   # registers are allocated 256 per warp at a time
        limits["registers"] = gpu.regs_per_sm // (per_warp * warps)
    if smem:
        limits["shared memory"] = gpu.smem_per_sm // (smem + 1024)   # 1 KiB a block is the system's
    why = min(limits, key=limits.get)
    return max(0, limits[why]), why


def launch_time(launch: dict, row: dict | None, gpu: Target, in_l2: set) -> dict:
    """The modelled time of one captured launch, microseconds, and its parts.

    ``in_l2``: names of tensors an earlier launch of the call wrote that fit in L2.
    Keys: us, bound, parts {dram, l2, tensor cores, issue, latency}, dram_bytes,
    l2_bytes, flops, occupancy, limit, waves, programs."""
    row = row or {}
    P = int(launch.get("programs") or 0)
    out = {"programs": P, "kernel": launch.get("kernel", "?")}
    if P == 0:
        return {**out, "us": 0.0, "bound": "empty grid", "parts": {}}
    occ, limit = occupancy(row, gpu)
    if occ == 0:
        return {**out, "us": math.inf, "bound": f"does not launch ({limit})", "parts": {}, "launchable": False}
    warps = int(row.get("num_warps") or 4)
    stages = int(row.get("num_stages") or 3)
    loop = row.get("loop") or {}
    counts = launch.get("counts") or {}
    tensors = launch.get("tensors") or {}
    resident = min(occ, math.ceil(P / gpu.sms))            # programs one SM runs at once
    waves = math.ceil(P / (occ * gpu.sms))
    bw = gpu.copy_gbs * 1e9                                 # bytes / s

    # Memory: what the programs touch (L2, DRAM: sectors), what they hold of the L2 (lines).
    per_program = sum(_held(c, "read") + _held(c, "written") for c in counts.values())
    window = max(occ * gpu.sms, (L2_USABLE * gpu.l2_bytes) / max(per_program, 1.0))
    footprints = 0.0
    reads = {}
    for key, c in counts.items():
        size = float((tensors.get(key) or {}).get("bytes") or 0)
        r = c.get("sectors_read", 0) * P
        w = c.get("sectors_written", 0) * P
        reads[key] = (size, r, w)
        footprints += min(size, _held(c, "read") * P) + min(size, _held(c, "written") * P)
    fits = footprints <= L2_USABLE * gpu.l2_bytes
    dram = l2 = 0.0
    for key, (size, r, w) in reads.items():
        c = counts[key]
        name = (tensors.get(key) or {}).get("name", key)
        first = min(size, r)
        again = r - first
        shared_at = c.get("shared_at")
        hits = fits or (shared_at is not None and shared_at <= window)
        dram += (0.0 if name in in_l2 else first) + (0.0 if hits else again) + min(size, w)
        l2 += r + w
    flops = sum(launch.get("dot_flops", {}).values()) * P
    mma_s = 0.0
    mma_share = 1.0 if loop.get("wgmma") or not loop.get("mma") else MMA_SYNC
    for kind, f in (launch.get("dot_flops") or {}).items():
        mma_s += f * P / (gpu.tensor_peak(kind) * 1e12 * mma_share)

    # Instructions: per thread, the loop's trips and the rest of the kernel once.
    steps = float(launch.get("steps") or 0)
    per_trip = _num(loop.get("instructions"))
    serial_trip = _num(loop.get("serial"))
    rest = max(0.0, _num(loop.get("kernel_instructions")) - per_trip)
    rest_serial = max(0.0, _num(loop.get("kernel_serial")) - serial_trip)
    clock = gpu.clock_ghz * 1e9
    issue_s = P * warps * (steps * per_trip + rest) / (gpu.sms * 4 * clock)

    # The load/store unit: each warp's passes (ptx.py), the programs of the busiest SM.
    lines_trip = _num(loop.get("wavefronts"))
    lines_rest = max(0.0, _num(loop.get("kernel_wavefronts")) - lines_trip)
    lsu_s = math.ceil(P / gpu.sms) * warps * (steps * lines_trip + lines_rest) / (LSU_LINES_PER_CYCLE * clock)

    # Latency: one program's trips, waves of them. One warp alone waits on each
    # result; several warps on a scheduler take turns, up to one instruction a cycle.
    warps_per_scheduler = resident * warps / 4
    def cycles(instr, serial):
        return max(CPI_DEPENDENT * instr + SERIAL_CYCLES * serial, warps_per_scheduler * instr)
    alu_trip = cycles(per_trip, serial_trip) / clock
    lat = LATENCY_US * 1e-6
    async_wait = lat / max(1, stages - 1) if loop.get("async_loads") else 0.0
    chain = _num(loop.get("load_chain"))
    sync_wait = SYNC_SHARE * lat * (chain or (1 if _num(loop.get("loads")) else 0))
    mma_trip = 0.0
    if steps:
        for kind, f in (launch.get("dot_flops") or {}).items():
            mma_trip += (f / steps) * resident / (gpu.tensor_peak(kind) * 1e12 * mma_share / gpu.sms)
    trip = _soft((alu_trip, async_wait, mma_trip)) + sync_wait
    waits = {"its instructions": alu_trip, "its pipelined loads": async_wait, "the tensor cores": mma_trip,
             (f"a chain of {chain:g} loads, each waiting for the one before" if chain > 1 else
              "its loads (not pipelined: each trip waits for its own)"): sync_wait}
    # An enclosing loop's trips each refill the inner loop's pipeline and wait for their own loads.
    outer = float(launch.get("outer_steps") or 0)
    program = steps * trip + outer * lat + cycles(rest, rest_serial) / clock + 2 * lat
    # Starting a block: the programs resident on a multiprocessor start while others run, so
    # the cost of many short programs grows with the square root of how many share it
    # (fitted on the slow kernels of tools/validate_estimate.py, H100, 2026-11-25).
    latency_s = waves * program + P / gpu.sms / math.sqrt(max(1, resident)) * PROGRAM_US * 1e-6

    parts = {"DRAM": dram / bw, "L2": l2 / (bw * L2_FACTOR), "tensor cores": mma_s, "issue": issue_s,
             "load/store unit": lsu_s, "latency": latency_s}
    total = _soft(parts.values()) + LAUNCH_US * 1e-6
    bound = max(parts, key=parts.get)
    return {**out, "us": total * 1e6, "bound": bound, "parts": {k: v * 1e6 for k, v in parts.items()},
            "dram_bytes": dram, "l2_bytes": l2, "flops": flops, "occupancy": occ, "limit": limit,
            "waves": waves, "launchable": True, "steps": steps, "trip_us": trip * 1e6, "program_us": program * 1e6,
            "trip_bound": max(waits, key=waits.get), "trip_instructions": per_trip, "serial": serial_trip,
            "sms": gpu.sms, "code": _code(loop)}


def _num(x) -> float:
    """A count the worker reported, as a float: 0 unless a finite number >= 0."""
    try:
        v = float(x or 0)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) and v >= 0 else 0.0


def _code(loop: dict) -> dict:
    """What the report says of a launch's compiled loop (ptx.py's keys, the worker's report)."""
    out = {}
    for key in ("load_widths", "async_widths", "store_widths", "serial_kinds", "narrow_loads"):
        found = loop.get(key)
        if isinstance(found, dict):
            out[key] = {str(k)[:60]: _num(v) for k, v in list(found.items())[:8]}
    top = loop.get("top")
    if isinstance(top, list):
        out["top"] = [[str(k)[:60], _num(v)] for k, v in (t for t in top[:4] if isinstance(t, list) and len(t) == 2)]
    for key in ("loads", "async_loads", "tma", "staged", "wavefronts", "instructions", "lanes_known"):
        if key in loop:
            out[key] = _num(loop.get(key))
    return out


def _held(c: dict, how: str) -> float:
    """Bytes of the L2 a program's reads or writes of one tensor hold: whole 128-byte lines
    (a capture without them: its sectors)."""
    return c.get(f"lines_{how}", c.get(f"sectors_{how}", 0))


def _soft(times) -> float:
    """Bounds that overlap, as one time: (sum t^p)^(1/p), between their maximum and their sum."""
    return sum(t ** SOFT_P for t in times) ** (1 / SOFT_P)


def call_time(launches: list[dict], rows: dict, gpu: Target) -> dict:
    """The modelled time of one call: its launches in order, microseconds. An autotuned
    launch is every config predicted, and the fastest taken, as the autotuner would pick;
    its "autotune" says which and how far apart the configs are."""
    in_l2: set = set()
    parts, total = [], 0.0
    for launch in launches:
        if launch.get("trial"):
            continue
        trials, configs = _configs(launch, launches)
        timed = [launch_time(c, rows.get(c.get("variant")), gpu, in_l2) for c in configs]
        pick = min(range(len(timed)), key=lambda i: timed[i]["us"])
        best = timed[pick]
        if len(trials) > 1:
            best["autotune"] = _autotune(trials, configs, timed, pick)
        parts.append(best)
        total += best["us"]
        for key, c in (configs[pick].get("counts") or {}).items():
            t = (configs[pick].get("tensors") or {}).get(key) or {}
            if c.get("sectors_written") and t.get("bytes", 0) <= L2_USABLE * gpu.l2_bytes / 2:
                in_l2.add(t.get("name"))
    return {"us": total, "launches": parts}


def _configs(launch: dict, launches: list[dict]) -> tuple[list[dict], list[dict]]:
    """An autotuned launch's trial launches (one per config the autotuner tries) and those of
    them predicted: the counted ones (an uncounted config would look free). A plain launch
    has no trials and is its own one config."""
    trials = [launches[j] for j in launch.get("alternatives", []) if 0 <= j < len(launches)]
    return trials, [t for t in trials if t.get("sampled")] or [launch]


def _autotune(trials: list[dict], configs: list[dict], timed: list[dict], pick: int) -> dict:
    """What the report says of an autotuned launch: how many configs the autotuner tries, the
    one it would pick (the fastest predicted), the slowest that launches, and how many do not
    launch (too big for a multiprocessor) or were not counted (the capture's time ran out)."""
    fits = [i for i, t in enumerate(timed) if math.isfinite(t["us"])]
    slowest = max(fits, key=lambda i: timed[i]["us"], default=pick)
    return {"configs": len(trials), "chosen": configs[pick].get("config", "?"),
            "slowest": configs[slowest].get("config", "?"), "us": [timed[pick]["us"], timed[slowest]["us"]],
            "unlaunchable": len(timed) - len(fits), "uncounted": sum(not t.get("sampled") for t in trials)}


# ---------------------------------------------------------------------------
# A task's performance tests
# ---------------------------------------------------------------------------

def _points(spec: TestSpec, ratio: float) -> float:
    frac = (ratio - spec.zero_ratio) / (spec.full_ratio - spec.zero_ratio)
    return spec.points * min(1.0, max(0.0, frac))


def estimate(run, rubric: Rubric, targets: list[Target] | None = None,
             bands: dict[str, Band] | None = None) -> dict:
    """Per performance test of ``run``'s task: the predicted time, ratio and points on
    each GPU the rubric grades on (its ``calibrated_on``; ``graded_on`` names them),
    and what bounds it; or why there is no prediction. Plain JSON. ``bands``: the ranges
    per bound kind (default: grader/targets.toml's)."""
    targets = load_targets() if targets is None else targets
    bands = load_bands() if bands is None else bands
    captured = (run.capture or {}).get("cases") or {}
    if not captured or not targets:
        why = (run.capture or {}).get("error") or ("no GPU figures (grader/targets.toml)" if not targets else "")
        return {"error": why} if why else {}
    rows = {}
    for row in run.kernels:
        for i in row.get("ids") or []:
            rows[i] = row
    calibrated = [t for t in targets if any(t.name in c for c in rubric.settings.calibrated_on)] or targets
    tests = {}
    for spec in rubric.tests_for(run.task, "performance"):
        case = captured.get(spec.name)
        if case is None:
            continue
        tests[spec.name] = _predict(spec, case, rows, calibrated, run.gpu_launch_errors.get(spec.name), bands)
    used = {g["band"]["kind"]: g["band"] for t in tests.values() for g in t.get("gpus", [])}
    return {"tests": tests, "uncertainty": used, "graded_on": [t.name for t in calibrated]}


def _predict(spec: TestSpec, case: dict, rows: dict, targets: list[Target], launch_error: str | None,
             bands: dict[str, Band]) -> dict:
    launches = case.get("launches") or []
    if case.get("error"):
        return {"error": "the wrapper raised at this shape: " + str(case["error"]).strip().splitlines()[-1][:300]}
    if launch_error:
        return {"error": launch_error[:500]}
    if not launches:
        return {"error": "no Triton launch at this shape"}
    missing = [launch["kernel"] for launch in launches
               if not launch.get("trial") and not _configs(launch, launches)[1][0].get("sampled")]
    if missing:   # a launch nobody counted would be modelled as free: no prediction rather than a wrong one
        return {"error": "not predicted: the CPU run's time for counting ran out before it counted "
                         f"{', '.join(dict.fromkeys(missing[:3]))} at this shape (a slow interpreter run, or very "
                         "many autotune configs); the other tests' predictions stand"}
    floor_bytes = spec.registered_task.minimum_bytes(spec.shape, spec.options)
    per_gpu = []
    for gpu in targets:
        base = gpu.baseline_ms.get(shape_key(spec.shape))
        call = call_time(launches, rows, gpu)
        # The judge's memory floor: no call moves the task's fewest bytes faster than the copy bandwidth.
        floor_us = floor_bytes / (gpu.copy_gbs * 1e9) * 1e6
        us = max(call["us"], floor_us)
        kind = call_bound(call["launches"])
        band = band_for(kind, bands)
        entry = {"gpu": gpu.name, "us": us, "launches": call["launches"], "baseline_us": None,
                 "floor_us": floor_us, "at_floor": call["us"] < floor_us, "bound": kind, "band": band.as_dict(),
                 "us_range": [max(us * band.low, floor_us), us * band.high]}
        if base and us and math.isfinite(us):
            ratio = base * 1e3 / us
            slowest, fastest = (base * 1e3 / t for t in reversed(entry["us_range"]))
            entry.update(baseline_us=base * 1e3, ratio=ratio, ratio_range=[slowest, fastest],
                         points=_points(spec, ratio),
                         points_range=[_points(spec, slowest), _points(spec, fastest)])
        if gpu.reference_ms.get(spec.name):
            entry["reference_us"] = gpu.reference_ms[spec.name] * 1e3
        per_gpu.append(entry)
    return {"gpus": per_gpu, "shape": list(spec.shape), "points_max": spec.points, "full_ratio": spec.full_ratio,
            "zero_ratio": spec.zero_ratio}
