"""The grader's tolerance and its likely-cause lines against kernels written as
students write them: every file in tests/variants/ is a complete kernel file,
``<task>_faithful_<what>.py`` or ``<task>_bug_<what>.py``.

- A faithful variant passes every correctness case of its task in the rubric,
  on fresh inputs, and never gets a likely cause.
- A bug variant fails at least the cases listed for it in ``BUGS``; its
  failures get the likely cause that names its bug (at least one does) or
  none where the pattern is ambiguous, never another bug's cause.
- The reference solutions pass and never get a likely cause.

Inputs sit in a guarded arena, as in the grader (grader/harness/arena.py): a
read past the end of an input reads NaN. Uninitialized memory is filled with
NaN (``torch.use_deterministic_algorithms``), so an output element the kernel
never stores is NaN.

On the CPU the cases use the rubric's ``cpu_shape`` in the interpreter; with a
CUDA GPU, ``test_*_gpu`` use the full ``shape`` plus K = 11008 cases, and must
give the same verdicts: ``python -m pytest tests/kernels/test_variants.py``. Set
``VARIANT_SEED`` to replay a run (the seed is in every failure message) and
``VARIANT_VERDICTS=file`` to write every verdict as a JSON line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
import types
from pathlib import Path

import pytest
import torch

from grader.compare import check_output, check_task_output
from grader.diagnose import QUANTIZATION, TRITON, cause_texts, diagnose, likely_cause
from grader.harness.arena import Arena, Plan
from grader.rubric import load_rubric
from grader.staticcheck import check_source
from grader.tasks import TASKS, get
from tests.helpers import DEVICE, make_inputs, needs_gpu

pytestmark = pytest.mark.slow  # every variant kernel run in the interpreter without a GPU

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ROOT / "tests" / "variants"
NAMES = sorted(p.stem for p in VARIANTS.glob("*_*_*.py"))
FAITHFUL = [n for n in NAMES if "_faithful_" in n]
BUGGY = [n for n in NAMES if "_bug_" in n]
SEED = int(os.environ.get("VARIANT_SEED", random.randrange(2**31)))
SEEDS = 3  # fresh inputs per case: SEED, SEED + 1, ...

# Each bug: the cases that must expose it (every shape they run on), and the
# likely causes its failures may get.
BUGS = {
    "w8a8_bug_half_away": (["rounding_ties"], {"ties"}),
    "w8a8_bug_half_up": (["rounding_ties"], {"ties"}),
    "w8a8_bug_no_clamp": (["rounding_ties"], {"clamp"}),
    "w8a8_bug_missing_weight_scale": (["decode_m1", "ragged_m33", "large_m4096"], {"scale"}),
    "w4a16_bug_unsigned_unpack": (["decode_m1", "ragged_m33", "group128"], {"unsigned_unpack"}),
    "w4a16_bug_nibble_order": (["decode_m1", "ragged_m33", "group128"], {"nibble_order"}),
    "w4a16_bug_no_k_mask": (["zero_rows_k_tail"], {"k_tail_mask"}),
    "w4a16_bug_scale_group": (["group128", "group32"], {"group_scale"}),
    "dds_bug_transposed_block": (["density25", "full_matrix"], {"transposed_block"}),
    "dds_bug_grid_misses_rows": (["density5_m1", "empty_matrix", "full_matrix"],
                                 {"rows_not_stored", "nothing_stored"}),
    "dds_bug_empty_rows_unstored": (["empty_matrix", "empty_block_rows"], {"empty_block_rows"}),
    "dds_bug_two_blocks_no_mask": (["nonsquare_int32"], {"block_loop_tail", "edge_mask"}),
}
# Cases beyond the rubric on a GPU: the K of a 7B model's MLP (issue 16).
GPU_EXTRA = {
    "w8a8": [("k11008", (33, 4096, 11008), {})],
    "w4a16": [("k11008", (16, 4096, 11008), {}), ("k11008_group128", (33, 4096, 11008), {"group_size": 128})],
    "dds": [("k11008", (64, 1024, 11008), {"density": 0.25})],
}


def cases(task: str, shapes: str) -> list[tuple[str, tuple, dict]]:
    """(case, [M, N, K], options) for every correctness test of ``task`` in the
    rubric, with its CPU shape (``shapes="cpu"``) or its full one (``"cuda"``)."""
    specs = load_rubric().tests_for(task, "correctness")
    out = [(s.name.split("/", 1)[1], s.shape_on(shapes), s.options) for s in specs]
    out = [c for c in out if c[1] is not None]
    return out + (GPU_EXTRA[task] if shapes == "cuda" else [])


_PACKAGE = "_variants"


def load_variant(name: str):
    """The variant's entry point, its file imported as the grader stages a
    submission: a package whose ``utils`` is the grader's assignment/utils.py."""
    if _PACKAGE not in sys.modules:
        pkg = types.ModuleType(_PACKAGE)
        pkg.__path__ = [str(ROOT / "assignment")]
        sys.modules[_PACKAGE] = pkg
    module = sys.modules.get(f"{_PACKAGE}.{name}")
    if module is None:
        spec = importlib.util.spec_from_file_location(f"{_PACKAGE}.{name}", VARIANTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    task = name.split("_", 1)[0]
    return getattr(module, f"{task}_mm")


def call_guarded(fn, args: tuple, device: str, tmp: Path):
    """``fn(*args)`` with the inputs in a guarded arena and NaN in uninitialized memory."""
    plan = Plan()
    specs = [plan.arg(a) for a in args]
    arena = Arena(plan, device, name=f"arena{random.randrange(2**32)}")
    guarded = [arena.arg(s) for s in specs]
    torch.use_deterministic_algorithms(True, warn_only=True)  # fills torch.empty with NaN
    try:
        out = fn(*guarded)
    finally:
        torch.use_deterministic_algorithms(False)
    if device == "cuda":
        torch.cuda.synchronize()
    return out


def run_all(name: str, shapes: str, tmp: Path, seeds: int = SEEDS):
    """[(case, seed, Check, Cause or None)] for every case of the variant's task
    (``shapes``: "cpu" or "cuda", see ``cases``) and every seed, run on DEVICE."""
    task = name.split("_", 1)[0]
    fn = load_variant(name)
    device = DEVICE
    results = []
    for case, shape, options in cases(task, shapes):
        for seed in range(SEED, SEED + seeds):
            args, _ = make_inputs(task, shape, options, seed, device)
            out = call_guarded(fn, args, device, tmp)
            check = check_task_output(out, task, args)
            cause = diagnose(task, out, args)
            results.append((case, seed, check, cause))
            _record(name, device, case, shape, seed, check, cause)
    return results


def _record(name, device, case, shape, seed, check, cause):
    path = os.environ.get("VARIANT_VERDICTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"variant": name, "device": device, "case": case, "shape": list(shape),
                                "seed": seed, "passed": check.passed, "cause": cause and cause.id,
                                "message": check.message[:300]}) + "\n")


def assert_faithful(name, results):
    failed = [f"{case} (seed {seed}): {c.message}" for case, seed, c, _ in results if not c.passed]
    assert not failed, f"faithful {name} rejected by the tolerance:\n" + "\n".join(failed)
    causes = [f"{case} (seed {seed}): {cause.line}" for case, seed, _, cause in results if cause]
    assert not causes, f"a likely cause for the faithful {name}:\n" + "\n".join(causes)


def assert_caught(name, results):
    """The bug fails its exposing cases; its failures get its cause or none
    (a pattern can be ambiguous on a small case), never another; and its
    cause is named at least once."""
    exposing, expected = BUGS[name]
    failed = [(case, seed, cause) for case, seed, c, cause in results if not c.passed]
    missed = [case for case in exposing if case not in {f[0] for f in failed}]
    assert not missed, f"bug {name} passes {missed} (seed {SEED}): the tolerance accepts it"
    wrong = [f"{case} (seed {seed}): {cause.line}" for case, seed, cause in failed
             if cause is not None and cause.id not in expected]
    assert not wrong, f"bug {name}: expected a cause in {sorted(expected)}, got\n" + "\n".join(wrong)
    named = [f for f in failed if f[2] is not None]
    assert named, f"bug {name} (seed {SEED}): no failure got its likely cause {sorted(expected)}"


# ---------------------------------------------------------------- CPU shapes

def test_every_bug_has_expectations():
    assert set(BUGGY) == set(BUGS), "every bug variant needs its exposing cases and causes in BUGS"
    every_case = {c for task in TASKS for c, _, _ in cases(task, "cpu")}
    assert {c for cs, _ in BUGS.values() for c in cs} <= every_case


@pytest.mark.parametrize("name", NAMES)
def test_variant_is_a_legitimate_kernel_file(name):
    """Each variant is a submission the grader would run: no forbidden code."""
    assert check_source((VARIANTS / f"{name}.py").read_text()) == []


@pytest.mark.parametrize("name", FAITHFUL)
def test_faithful_variant_passes(name, tmp_path):
    assert_faithful(name, run_all(name, "cpu", tmp_path))


@pytest.mark.parametrize("name", BUGGY)
def test_bug_variant_fails_with_its_cause(name, tmp_path):
    assert_caught(name, run_all(name, "cpu", tmp_path))


@pytest.mark.parametrize("name", BUGGY)
def test_bug_variant_with_stale_memory_gets_no_wrong_cause(name, tmp_path, monkeypatch):
    """Where the output the kernel allocates holds stale values instead of NaN
    (zeros and old numbers, as a fresh ``torch.empty`` may), an unwritten
    output may pass or lose its cause, but never gets another bug's cause."""
    g = torch.Generator(device=DEVICE).manual_seed(SEED)
    empty = torch.empty

    def stale_empty(*size, **kwargs):
        t = empty(*size, **kwargs)
        if t.is_floating_point():
            old = 5 * torch.randn(t.shape, generator=g, device=t.device)
            t.copy_(old * (torch.rand(t.shape, generator=g, device=t.device) < 0.3))
        return t

    monkeypatch.setattr(torch, "empty", stale_empty)
    results = run_all(name, "cpu", tmp_path)
    _, expected = BUGS[name]
    wrong = [f"{case} (seed {seed}): {cause.line}" for case, seed, c, cause in results
             if cause is not None and cause.id not in expected]
    assert not wrong, f"bug {name} with stale memory:\n" + "\n".join(wrong)


def assert_solution_gets_no_cause(task, shapes, tmp):
    import solutions

    fn = getattr(solutions, f"{task}_mm")
    for case, shape, options in cases(task, shapes):
        args, _ = make_inputs(task, shape, options, SEED, DEVICE)
        out = call_guarded(fn, args, DEVICE, tmp)
        check = check_task_output(out, task, args)
        assert check.passed, f"{task}/{case} (seed {SEED}): {check.message}"
        assert likely_cause(task, out, args) is None, f"{task}/{case} (seed {SEED})"


@pytest.mark.parametrize("task", sorted(TASKS))
def test_reference_solution_gets_no_cause(task, tmp_path):
    assert_solution_gets_no_cause(task, "cpu", tmp_path)


# ------------------------------------------------------------ the causes alone

def _reference_fp16(task, shape, seed, **options):
    args, _ = make_inputs(task, shape, options, seed, DEVICE)
    return args, get(task).reference(*args).to(torch.float16)


@pytest.mark.parametrize("task", sorted(TASKS))
def test_no_cause_for_errors_without_a_signature(task):
    """Wrong outputs with no bug's pattern get no cause: noise, an offset, swapped columns."""
    args, ref = _reference_fp16(task, (33, 64, 128), SEED, **({"density": 0.5} if task == "dds" else {}))
    g = torch.Generator(device=DEVICE).manual_seed(SEED)
    noise = torch.randn(ref.shape, generator=g, device=DEVICE)
    wrong = {
        "noise": (ref.float() * (1 + 0.05 * noise)).half(),
        "offset": (ref.float() + ref.float().abs().mean()).half(),
        "swapped columns": ref[:, torch.randperm(ref.shape[1], generator=g, device=DEVICE)],
    }
    for what, out in wrong.items():
        assert not check_task_output(out, task, args).passed, what
        assert likely_cause(task, out, args) is None, f"{what} (seed {SEED})"


def test_signatures_on_made_up_outputs():
    """Each pattern, drawn by hand on a right W4A16 output, gets its cause."""
    args, ref = _reference_fp16("w4a16", (40, 96, 128), SEED)
    nan = float("nan")

    def cause_of(edit):
        out = ref.clone()
        edit(out)
        return diagnose("w4a16", out, args).id

    assert cause_of(lambda y: y.fill_(nan)) == "nothing_stored"
    assert cause_of(lambda y: y[-1].fill_(nan)) == "k_tail_mask"
    assert cause_of(lambda y: y[32:].fill_(nan)) == "rows_not_stored"
    assert cause_of(lambda y: y[32:].normal_()) == "rows_not_stored"  # stale values
    assert cause_of(lambda y: y[:, 64:].fill_(nan)) == "cols_not_stored"
    assert cause_of(lambda y: y[36:, :50].fill_(nan)) == "edge_mask"
    assert cause_of(lambda y: y.mul_(2)) == "scale"
    assert cause_of(lambda y: y.mul_(torch.linspace(0.5, 2, 96, device=y.device).half())) == "scale"


def test_likely_cause_never_raises():
    args, ref = _reference_fp16("w4a16", (5, 32, 64), SEED)
    junk = [("w4a16", None, args), ("w4a16", ref[:, :16], args), ("w4a16", ref.int(), args),
            ("w4a16", ref, ()), ("w4a16", ref, (None, None, None)), ("nope", ref, args),
            ("dds", ref, args), ("w8a8", ref, args), ("w4a16", ref[:0], args)]
    for task, out, a in junk:
        assert likely_cause(task, out, a) is None
    nan = torch.full_like(ref, float("nan"))
    assert likely_cause("w4a16", nan, args).startswith("likely cause: the output was never stored")


def test_causes_quote_the_handout():
    """Every cause points to a real handout section, and the troubleshooting table
    (troubleshooting.md, which the handout's "12. Troubleshooting" points to) quotes it."""
    handout = (ROOT / "handout.md").read_text()
    headings = {line.lstrip("#").strip() for line in handout.splitlines() if line.startswith("## ")}
    sections = {QUANTIZATION, TRITON, *(t.handout_section for t in TASKS.values())}
    assert sections <= headings, sorted(sections - headings)
    assert "troubleshooting.md" in handout[handout.index("## 12. Troubleshooting"):]
    table = (ROOT / "troubleshooting.md").read_text()
    for cause_id, (text, section) in cause_texts().items():
        fixed = text.replace("}", "{").split("{")[::2]  # the text around its {fields}
        quoted = [line for line in table.splitlines() if line.startswith(f"| likely cause: {fixed[0]}")]
        assert quoted, f"{cause_id}: not quoted in the troubleshooting table"
        assert all(part in quoted[0] for part in fixed), f"{cause_id}: misquoted: {quoted[0]}"
        assert section is None or f'(handout: "{section}")' in quoted[0], f"{cause_id}: section"


# --------------------------------------------------- W8A8: division by ulps

W8A8_DIVISION_SHAPES = [shape for _, shape, _ in cases("w8a8", "cpu")] + [(256, 512, 4096)]


@pytest.mark.parametrize("shape", W8A8_DIVISION_SHAPES)
def test_w8a8_any_division_within_2_ulp_passes(shape):
    """A quantizer whose x / s is off by up to 2 ulp (Triton's ``/`` on a GPU,
    ``div.full.f32``) is faithful: moving every x / s 2 ulp toward its nearest
    rounding boundary, the worst case, still passes. At the largest shape some
    elements do flip, and the output then fails a check without the slack."""
    needs_slack = False
    for seed in range(SEED, SEED + SEEDS):
        args, _ = make_inputs("w8a8", shape, {}, seed, DEVICE)
        x, qweight_t, input_scale, weight_scale = args
        t = x.float() / input_scale
        toward = torch.sign(torch.floor(t) + 0.5 - t)
        for _ in range(2):
            t = torch.nextafter(t, t + toward)
        q = torch.clamp(torch.round(t), -128, 127)
        acc = q.double() @ qweight_t.double()
        out = (acc.float() * input_scale * weight_scale.t()).to(torch.float16)
        check = check_task_output(out, "w8a8", args)
        assert check.passed, f"seed {seed}: {check.message}"
        ref = get("w8a8").reference(*args)
        needs_slack |= not check_output(out, ref, "w8a8", tuple(ref.shape)).passed
    if shape == W8A8_DIVISION_SHAPES[-1]:
        assert needs_slack, f"seed {SEED}: no element flipped, the test proves nothing"


# ------------------------------------------------------------- GPU shapes

GPU_SEEDS = 2


@needs_gpu
@pytest.mark.parametrize("name", FAITHFUL)
def test_faithful_variant_passes_gpu(name, tmp_path):
    assert_faithful(name, run_all(name, "cuda", tmp_path, GPU_SEEDS))


@needs_gpu
@pytest.mark.parametrize("name", BUGGY)
def test_bug_variant_fails_with_its_cause_gpu(name, tmp_path):
    assert_caught(name, run_all(name, "cuda", tmp_path, GPU_SEEDS))


@needs_gpu
@pytest.mark.parametrize("task", sorted(TASKS))
def test_reference_solution_gets_no_cause_gpu(task, tmp_path):
    assert_solution_gets_no_cause(task, "cuda", tmp_path)
