"""Verdicts on what the harness measured. Runs in the trusted grading process only."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .compare import check_sanity, check_task_output, reference_and_slack
from .diagnose import likely_cause
from .harness.measure import CallResult, Timing
from .rubric import TestSpec
from .tracebacks import explain_error, final_exception


@dataclass
class Verdict:
    """The outcome of one test: ``fraction`` of its points (None: not run here) and why."""
    passed: bool
    message: str
    fraction: float | None = 0.0
    details: dict = field(default_factory=dict)


def not_run(why: str) -> Verdict:
    return Verdict(False, f"not run: {why}", None)


def flag(kind: str, detail: str) -> dict:
    """A reason that voids a whole task, as data: ``kind`` (stable, for the class
    CSV and scripts) and ``detail`` (the sentence a student reads)."""
    return {"kind": kind, "detail": detail}


def task_flags(results: list[tuple[str, CallResult]]) -> list[dict]:
    """Reasons that void the whole task, from the worker's own evidence.

    The worker could hide such evidence, never invent points with it: these
    flags can only take points away (docs/integrity.md).
    """
    flags = []
    for name, r in results:
        ev = r.evidence
        if ev.get("library_matmuls"):
            flags.append(flag("library_matmul", f"library matmul: {name} ran PyTorch op(s) "
                              f"{ev['library_matmuls']} instead of computing the product in Triton"))
        if r.status == "ok" and not ev.get("own_launches"):
            foreign = ev.get("foreign_launches") or []
            flags.append(flag("no_triton_kernel", f"no Triton kernel: {name} launched no Triton kernel of "
                              "the submission" + (f" (only {foreign})" if foreign else "")))
        if ev.get("oversized_ops"):
            flags.append(flag("computed_outside_triton", f"computed outside Triton: {name} built PyTorch "
                              f"tensors larger than any input or output: {ev['oversized_ops'][:3]}"))
        if r.inputs_modified:
            flags.append(flag("inputs_modified", f"inputs modified: {name} wrote into input(s) "
                              f"{r.inputs_modified}"))
    seen, unique = set(), []
    for f in flags:  # one line per kind of problem is enough
        if f["kind"] not in seen:
            seen.add(f["kind"])
            unique.append(f)
    return unique


def judge_call(spec: TestSpec, result: CallResult, args: tuple, extras: dict) -> Verdict:
    """Correctness of one checked call against the reference on the same inputs."""
    if result.status == "gone":
        return Verdict(False, result.message)
    if result.status == "error":
        # The first line (the report's table) names the exception; the frame follows.
        return Verdict(False, f"raised {final_exception(result.message)}\n" + explain_error(result.message))
    if result.status == "unusable":
        return Verdict(False, result.message)
    ref_slack = reference_and_slack(spec.task, args)   # computed once: the check and the diagnosis share it
    tight = check_task_output(result.output, spec.task, args, ref_slack)
    details = {"max_abs_err": tight.max_abs_err, "max_rel_err": tight.max_rel_err, "bad_elements": tight.bad}
    if not tight.passed:
        cause = likely_cause(spec.task, result.output, args, ref_slack[0])
        return Verdict(False, tight.message + (f"\n{cause}" if cause else ""), details=details)
    if result.stray_write:
        return Verdict(False, "wrote outside its output tensor (a store with a missing mask?)",
                       details=details)
    sane = check_sanity(result.output, args[0], extras["weight"], spec.task)
    if not sane.passed:
        return Verdict(False, sane.message, details=details)
    return Verdict(True, f"{tight.message}; {sane.message}", 1.0, details)


def floor_parts(task: str, shape, options: dict) -> dict[str, int]:
    """Fewest bytes each tensor of a call must move, by argument name (inputs.ARG_NAMES)
    and "output": every input read once, the output written once."""
    M, N, K = shape
    if task == "w8a8":
        return {"x": 2 * M * K, "qweight_t": N * K, "input_scale": 4 * M, "weight_scale": 4 * N,
                "output": 2 * M * N}
    if task == "w4a16":
        groups = K // (options.get("group_size") or K)
        return {"x": 2 * M * K, "qweight": N * K // 2, "scales": 2 * groups * N, "output": 2 * M * N}
    nnz = round(options.get("density", 0.25) * (N // 32) * (K // 32))
    index = 4 if options.get("index_dtype") == "int32" else 8
    return {"x": 2 * M * K, "weight_bsr.crow_indices": index * (N // 32 + 1),
            "weight_bsr.col_indices": index * nnz, "weight_bsr.values": nnz * 32 * 32 * 2,
            "output": 2 * M * N}


def dot_flops_floor(task: str, shape, options: dict) -> int:
    """FLOPs of the product itself: 2 M N K, over the stored blocks only for DDS."""
    M, N, K = shape
    if task == "dds":
        return 2 * M * 32 * 32 * round(options.get("density", 0.25) * (N // 32) * (K // 32))
    return 2 * M * N * K


def memory_floor_bytes(spec: TestSpec) -> int:
    """Fewest bytes the call must move: every input read once, the output written once."""
    return sum(floor_parts(spec.task, spec.shape, spec.options).values())


def ratio_fraction(spec: TestSpec, ratio: float) -> float:
    frac = (ratio - spec.zero_ratio) / (spec.full_ratio - spec.zero_ratio)
    return min(1.0, max(0.0, frac))


def judge_timing(spec: TestSpec, timing: Timing, bandwidth_gbs: float) -> Verdict:
    """Score from the ratio of the baseline's per-call time to the kernel's."""
    t = statistics.median(timing.kernel_ms)
    base = statistics.median(timing.baseline_ms)
    ratio = base / t
    details = {"kernel_ms": t, "baseline_ms": base, "ratio": ratio, "rounds": len(timing.kernel_ms),
               "calls_per_batch": timing.calls, "weight_sets": timing.weight_sets,
               "cuda_graph": timing.graph}
    if timing.wrong:
        return Verdict(False, f"the output of a timed call is wrong: {timing.wrong}", details=details)
    floor_ms = memory_floor_bytes(spec) / (bandwidth_gbs * 1e9) * 1e3
    details["memory_floor_ms"] = floor_ms
    if t < 0.8 * floor_ms:
        return Verdict(False, f"timed at {t * 1e3:.1f} us, below the memory floor of {floor_ms * 1e3:.1f} us "
                              "(bytes that must move / measured bandwidth): the timing is not trusted",
                       details=details)
    frac = ratio_fraction(spec, ratio)
    msg = (f"{t * 1e3:.1f} us vs torch.matmul fp16 {base * 1e3:.1f} us per call: ratio {ratio:.2f} "
           f"(full credit at {spec.full_ratio:g}, none at {spec.zero_ratio:g})")
    if not timing.graph:
        msg += ("; timed eagerly, host overhead included: the calls could not be captured in a CUDA "
                f"graph ({timing.note})")
    return Verdict(frac > 0, msg, frac, details)


def borderline(spec: TestSpec, timing: Timing) -> bool:
    """Within 3% of a threshold: measure more rounds before the score is fixed."""
    if not timing.kernel_ms:
        return False
    return any(abs(timing.ratio / r - 1) < 0.03 for r in (spec.full_ratio, spec.zero_ratio) if r)
