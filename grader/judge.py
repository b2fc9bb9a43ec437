"""Verdicts on what a task's child returned. Runs in the trusted parent only."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .compare import check_output, check_sanity
from .references import REFERENCES
from .rubric import TestSpec
from .runner import TaskRun
from .harness.inputs import fresh_activations, make_inputs


@dataclass
class Verdict:
    """The outcome of one test: ``fraction`` of its points and why."""
    passed: bool
    message: str
    fraction: float = 0.0
    details: dict = field(default_factory=dict)


def task_flags(run: TaskRun) -> list[str]:
    """Reasons that void the whole task: library matmuls, no Triton kernel, edited inputs."""
    flags = []
    for name, rec in run.records.items():
        if rec.get("library_matmuls"):
            flags.append(f"library matmul: {name} ran PyTorch op(s) {rec['library_matmuls']} "
                         "instead of computing the product in Triton")
        if rec.get("status") == "ok" and not rec.get("own_launches"):
            foreign = rec.get("foreign_launches") or []
            flags.append(f"no Triton kernel: {name} launched no Triton kernel of the submission"
                         + (f" (only {foreign})" if foreign else ""))
        if rec.get("oversized_ops"):
            flags.append(f"computed outside Triton: {name} built PyTorch tensors larger than any "
                         f"input or output: {rec['oversized_ops'][:3]}")
        if rec.get("inputs_modified"):
            flags.append(f"inputs modified: {name} wrote into input(s) {rec['inputs_modified']}")
    seen, unique = set(), []
    for f in flags:  # one line per kind of problem is enough
        kind = f.split(":")[0]
        if kind not in seen:
            seen.add(kind)
            unique.append(f)
    return unique


def _error_summary(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return "\n".join(lines[-6:])


def judge_correctness(spec: TestSpec, run: TaskRun, seed: int, device: str) -> Verdict:
    rec = run.records.get(spec.name)
    if rec is None:
        return Verdict(False, run.failure_reason() or "no result came back from the child process")
    if rec.get("status") != "ok":
        return Verdict(False, "raised an exception:\n" + _error_summary(str(rec.get("error", ""))))
    out = run.outputs.get(spec.name)
    if out is None:
        return Verdict(False, f"returned {rec.get('output_type', 'nothing usable')}, expected a torch.Tensor")
    shape = spec.shape_on(device)
    args, extras = make_inputs(spec.task, shape, spec.options, seed, device)
    ref = REFERENCES[spec.task](*args)
    tight = check_output(out, ref, spec.task, (shape[0], shape[1]))
    details = {"max_abs_err": tight.max_abs_err, "max_rel_err": tight.max_rel_err,
               "bad_elements": tight.bad, "seconds": rec.get("seconds")}
    if not tight.passed:
        return Verdict(False, tight.message, details=details)
    sane = check_sanity(out, args[0], extras["weight"], spec.task)
    if not sane.passed:
        return Verdict(False, sane.message, details=details)
    return Verdict(True, f"{tight.message}; {sane.message}", 1.0, details)


def memory_floor_bytes(spec: TestSpec) -> int:
    """Fewest bytes the call must move: every input read once, the output written once."""
    M, N, K = spec.shape
    out = 2 * M * N
    if spec.task == "w8a8":
        return 2 * M * K + N * K + 4 * (M + N) + out
    if spec.task == "w4a16":
        return 2 * M * K + N * K // 2 + 2 * N + out
    nnz = round(spec.options.get("density", 0.25) * (N // 32) * (K // 32))
    return 2 * M * K + nnz * 32 * 32 * 2 + out


def judge_performance(spec: TestSpec, run: TaskRun, seed: int, baseline_ms: float,
                      bandwidth_gbs: float, correct: bool) -> Verdict:
    if not correct:
        return Verdict(False, "not timed: performance counts only for a kernel that passes "
                              "all of this task's correctness tests")
    rec = run.records.get(spec.name)
    if rec is None:
        return Verdict(False, run.failure_reason() or "no timing came back from the child process")
    if rec.get("status") != "ok":
        return Verdict(False, "raised an exception while timed:\n" + _error_summary(str(rec.get("error", ""))))
    medians = [float(m) for m in rec.get("round_medians_ms", []) if isinstance(m, (int, float)) and m > 0]
    if not medians:
        return Verdict(False, "no valid timing came back")
    t = statistics.median(medians)
    ratio = baseline_ms / t
    details = {"kernel_ms": t, "baseline_ms": baseline_ms, "ratio": ratio, "rounds": len(medians)}
    floor_ms = memory_floor_bytes(spec) / (bandwidth_gbs * 1e9) * 1e3
    details["memory_floor_ms"] = floor_ms
    if t < 0.8 * floor_ms:
        return Verdict(False, f"timed at {t * 1e3:.1f} us, below the memory floor of {floor_ms * 1e3:.1f} us "
                              "(bytes that must move / measured bandwidth): the timing is not trusted",
                       details=details)
    profiled = rec.get("profiled_ms")
    if isinstance(profiled, (int, float)) and profiled > 1.5 * t + 0.005:
        return Verdict(False, f"the profiler saw {profiled * 1e3:.1f} us of GPU work per call but the timed "
                              f"stream only {t * 1e3:.1f} us: work runs outside the timed stream",
                       details=details)
    out = run.outputs.get(spec.name)
    args, _ = make_inputs(spec.task, spec.shape, spec.options, seed, "cuda")
    fresh_activations(args[0], int(rec.get("output_seed", -1)))
    check = check_output(out, REFERENCES[spec.task](*args), spec.task, spec.shape[:2])
    if not check.passed:
        return Verdict(False, "the output of a timed call is wrong (are results cached or computed "
                              f"asynchronously?): {check.message}", details=details)
    frac = (ratio - spec.zero_ratio) / (spec.full_ratio - spec.zero_ratio)
    frac = min(1.0, max(0.0, frac))
    msg = (f"{t * 1e3:.1f} us vs torch.matmul fp16 {baseline_ms * 1e3:.1f} us: ratio {ratio:.2f} "
           f"(full credit at {spec.full_ratio:g}, none at {spec.zero_ratio:g})")
    return Verdict(frac > 0, msg, frac, details)
