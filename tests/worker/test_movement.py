"""Data movement counted in the Triton interpreter: exact on kernels whose counts
are known by hand, telling on the reference against calibration/naive, and only
feedback in the grader (a forged count cannot crash the report or change a score)."""

from __future__ import annotations

import importlib
import json
import math
import shutil
import sys

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.errors import InterpreterError

from grader.harness.arena import Plan
from grader.harness.movement import summarize
from grader.harness.session import WorkerGone, _validate
from grader.report import markdown, write_reports
from grader.rubric import RubricError, load_rubric, parse_rubric
from grader.scoring import TaskResult
from grader.submission import ROOT, TRUSTED_FILES
from grader.worker.movement import Movement, tensor_range
from tests.fakes import SOLUTION, rubric_dict, submission
from tests.helpers import HAS_CUDA, make_inputs

pytestmark = pytest.mark.skipif(HAS_CUDA, reason="counts are taken in the CPU interpreter")


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=ok), mask=ok)


@triton.jit
def _tile_dot(a, b, c, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, K)
    x = tl.load(a + rm[:, None] * K + rk[None, :])
    y = tl.load(b + rk[:, None] * (BN * tl.num_programs(1)) + rn[None, :])
    tl.store(c + rm[:, None] * (BN * tl.num_programs(1)) + rn[None, :], tl.dot(x, y))


@triton.jit
def _count_up(counter, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(counter + offs * 0, 1, mask=offs < n)


def _time_once(kernel_call, quantiles):
    """The interpreter has no benchmarker of its own: each trial runs once, all tie."""
    kernel_call()
    return [1.0, 1.0, 1.0]


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 256})], key=["n"],
                 do_bench=_time_once)
@triton.jit
def _tuned_copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=ok), mask=ok)


def _named(**tensors):
    return [(key, *tensor_range(t)) for key, t in tensors.items()]


def test_a_copy_with_a_masked_tail_counts_only_the_live_lanes():
    src, dst = torch.randn(1000), torch.empty(1000)
    with Movement(_named(src=src)) as m:
        _copy[(triton.cdiv(1000, 256),)](src, dst, 1000, BLOCK=256)
    r = m.report(output=dst)
    assert torch.equal(src, dst)
    assert r["tensors"] == {"src": [4000, 0], "out": [0, 4000]}   # 1000 lanes x 4 bytes, not 1024
    assert r["programs"] == 4 and r["launch_count"] == 1 and r["flops"] == 0
    assert r["launches"] == [{"kernel": "_copy", "grid": [4, 1, 1], "programs": 4, "loaded": 4000,
                              "stored": 4000, "flops": 0}]


def test_an_autotuners_trial_launches_are_not_counted():
    src, dst = torch.randn(1000), torch.empty(1000)
    with Movement(_named(src=src)) as m:
        _tuned_copy[lambda meta: (triton.cdiv(1000, meta["BLOCK"]),)](src, dst, 1000)
    r = m.report(output=dst)
    assert torch.equal(src, dst)   # two trial launches, then the call: only the call counts
    assert r["launch_count"] == 1 and r["tensors"] == {"src": [4000, 0], "out": [0, 4000]}


def test_a_dot_counts_2mnk_per_program_and_its_tiles_bytes():
    BM, BN, K, gm, gn = 16, 32, 64, 2, 3
    a = torch.randn(gm * BM, K, dtype=torch.float16)
    b = torch.randn(K, gn * BN, dtype=torch.float16)
    c = torch.empty(gm * BM, gn * BN, dtype=torch.float32)
    with Movement(_named(a=a, b=b)) as m:
        _tile_dot[(gm, gn)](a, b, c, K=K, BM=BM, BN=BN)
    r = m.report(output=c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)
    assert r["flops"] == gm * gn * 2 * BM * BN * K
    # Every program reads its [BM, K] and [K, BN] tiles: a is read gn times, b gm times.
    assert r["tensors"] == {"a": [gn * a.numel() * 2, 0], "b": [gm * b.numel() * 2, 0], "out": [0, c.numel() * 4]}
    assert r["launches"][0]["grid"] == [gm, gn, 1] and r["launches"][0]["programs"] == gm * gn


def test_atomics_scratch_and_unknown_addresses():
    counter = torch.zeros(1, dtype=torch.int32)      # not named: a scratch tensor of the launch
    with Movement([]) as m:
        _count_up[(1,)](counter, 5, BLOCK=8)
    assert counter.item() == 5
    assert m.report()["tensors"] == {"scratch": [20, 20]}  # 5 live lanes, each a 4-byte read and write
    buf = torch.randn(200)
    with Movement(_named(half=buf[:100])) as m:   # the rest of buf's storage belongs to no named tensor
        _copy[(1,)](buf, torch.empty(200), 200, BLOCK=256)
    assert m.report()["tensors"]["half"] == [400, 0]
    assert m.report()["tensors"]["other"][0] == 400


def test_the_interpreter_is_restored_even_when_the_kernel_raises():
    import triton.runtime.interpreter as interp

    before = (interp.InterpreterBuilder.create_masked_load, interp.InterpreterBuilder.create_dot,
              interp.GridExecutor.__call__)
    with pytest.raises(InterpreterError):
        with Movement([]):
            _copy[(1,)](torch.randn(4), torch.empty(4), "not a number", BLOCK=4)
    after = (interp.InterpreterBuilder.create_masked_load, interp.InterpreterBuilder.create_dot,
             interp.GridExecutor.__call__)
    assert before == after


# ---- The reference against calibration/naive, at the rubric's shapes, as the grader names them.

def _kernel(folder, task: str, tmp_path):
    """``folder``/<task>.py imported as the grader stages it (with the trusted helpers)."""
    pkg = tmp_path / f"mv_{folder.name}_{task}"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, src in TRUSTED_FILES.items():
        shutil.copyfile(src, pkg / name)
    shutil.copyfile(folder / f"{task}.py", pkg / f"{task}.py")
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(f"{pkg.name}.{task}")
    finally:
        sys.path.remove(str(tmp_path))
    return getattr(module, f"{task}_mm")


def _counted(fn, task: str, shape) -> dict:
    args, _ = make_inputs(task, shape, {}, 7)
    plan = Plan()
    specs = [plan.arg(a) for a in args]
    named = []
    for i, a in enumerate(args):
        if a.layout == torch.strided:
            named.append((str(i), *tensor_range(a)))
        else:
            named += [(f"{i}.{k}", *tensor_range(p)) for k, p in
                      (("crow", a.crow_indices()), ("col", a.col_indices()), ("values", a.values()))]
    with Movement(named) as m:
        y = fn(*args)
    return {r["name"]: r for r in summarize(task, shape, {}, specs, _validate(
        {"ok": True, "movement": m.report(output=y)})["movement"])["tensors"]} | {"_flops": m.flops}


WEIGHT = {"w8a8": "qweight_t", "w4a16": "qweight", "dds": "weight_bsr.values"}


@pytest.mark.slow
@pytest.mark.parametrize("task", ["w8a8", "w4a16", "dds"])
def test_the_naive_kernels_reread_the_weight_more_than_the_reference(task, tmp_path):
    shape = load_rubric().tasks[task].movement_shape
    ref = _counted(_kernel(ROOT / "solutions", task, tmp_path), task, shape)
    naive = _counted(_kernel(ROOT / "calibration" / "naive", task, tmp_path), task, shape)
    w = WEIGHT[task]
    ref_times, naive_times = (r[w]["read"] / r[w]["minimum"] for r in (ref, naive))
    for r in (ref, naive):
        assert r["output"]["written"] == r["output"]["minimum"]   # the output written once
        assert all(row["written"] == 0 for name, row in r.items() if name not in ("output", "scratch", "_flops"))
    if task == "w4a16":   # decode: the reference reads every packed word once
        assert ref_times == 1.0 and naive_times >= 8.0
    else:                 # prefill-sized M: re-reads = row tiles, 128 rows (reference) vs 64 (naive)
        M = shape[0]
        assert ref_times <= math.ceil(M / 128) < math.ceil(M / 64) == naive_times
    assert naive_times >= 2 * ref_times


def test_the_floor_formula_matches_the_tensors_at_the_rubric_shapes():
    for name, task in load_rubric().tasks.items():
        args, _ = make_inputs(name, task.movement_shape, {}, 3)
        tensors = []
        for a in args:
            tensors += [a] if a.layout == torch.strided else [a.crow_indices(), a.col_indices(), a.values()]
        floors = task.registered.floor_parts(task.movement_shape, task.registered.defaults({}))
        M, N, _ = task.movement_shape
        assert sum(floors.values()) == sum(t.numel() * t.element_size() for t in tensors) + 2 * M * N


# ---- The rubric field.

def _with_movement(shape, task="dds", static=True):
    d = rubric_dict(tasks=(task,), static=static)
    d["tasks"][task]["movement_shape"] = shape
    return d


def test_movement_shape_is_validated():
    assert parse_rubric(_with_movement([64, 64, 64])).tasks["dds"].movement_shape == (64, 64, 64)
    for bad, words in (([64, 64], "[M, N, K]"), ([64, 64, "64"], "[M, N, K]"),
                       ([64, 64, 48], "multiples of the 32x32 block"), ([64, 40, 64], "multiples of the 32x32 block")):
        with pytest.raises(RubricError, match=r"tasks\.dds.*movement_shape") as e:
            parse_rubric(_with_movement(bad))
        assert words in str(e.value)
    with pytest.raises(RubricError, match="multiple of 8"):
        parse_rubric(_with_movement([4, 64, 12], "w4a16"))


# ---- Feedback only: what the worker claims is checked, capped, and changes no score.

@pytest.mark.parametrize("bad", [
    {"flops": float("nan")}, {"flops": -1}, {"flops": 10 ** 30}, {"programs": True},
    {"tensors": {"0": [1, 2, 3]}}, {"tensors": {"0": ["1", 2]}}, {"tensors": []},
    {"launches": [{"grid": [1, 2]}]}, {"launches": [{"loaded": -5}]}, {"launches": ["x"]},
])
def test_malformed_counts_are_a_broken_reply(bad):
    with pytest.raises(WorkerGone, match="data movement"):
        _validate({"ok": True, "movement": bad})


def test_valid_counts_are_capped_and_extra_fields_dropped():
    rows = [{"kernel": "k" * 500, "grid": [1, 1, 1], "programs": 1, "loaded": 2, "stored": 3, "flops": 4,
             "extra": "dropped"}] * 50
    m = _validate({"ok": True, "movement": {"launches": rows, "launch_count": 50, "junk": 1}})["movement"]
    assert len(m["launches"]) == 20 and len(m["launches"][0]["kernel"]) == 100
    assert "extra" not in m["launches"][0] and "junk" not in m


def test_the_report_survives_a_forged_record():
    forged = {"shape": ["<b>", -1, None], "tensors": [{"name": "x | `</table>` # h", "minimum": 0, "read": -3,
                                                       "written": float("nan")}, "not a row"],
              "moved": 10 ** 40, "minimum": 0, "flops": float("inf"), "launches": [{"kernel": "[link](x)",
                                                                                      "grid": "no"}, 5],
              "launch_count": "many"}
    task = TaskResult(task="w8a8", title="W8A8", score=1, max_score=1, summary="ok", movement=forged)
    md = markdown(_report_with(task))
    section = md[md.index("## Data movement"):]
    assert "<b>" not in section and "None" not in section and "` [link](x) `" in section
    assert "\\| `</table>` # h" in section and "GiB" not in section     # a code span; no absurd size
    task.movement = {"shape": [1, 2, 3], "error": "<script> | # h"}
    assert "\\<script\\> \\| \\# h" in markdown(_report_with(task))


def _report_with(task):
    from grader.scoring import GradeResult
    return GradeResult(schema_version=1, submission="s", started="t", seconds=0.0, device="cpu", gpu=None,
                       versions={}, seed=1, rubric="r", score=1, max_score=1, max_score_all_tests=1,
                       partial=False, notes=[], tasks=[task], tests=[])


@pytest.mark.slow
@pytest.mark.parametrize("forgery", ["out-of-range", "plausible-lie"])
def test_forged_counts_change_no_score_and_never_reach_the_table(tmp_path, forgery):
    """The file patches the worker's movement counter at import. On the CPU the table is counted
    by the executor, which never runs the file's host code: the forgery changes nothing."""
    src = submission("w8a8_forges_movement", forgery=forgery)
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "w8a8.py").write_text(src)
    from grader.grade import grade
    # The static check is off: it would void the task for importing the worker's module.
    result = grade(sub, parse_rubric(_with_movement([32, 64, 64], "w8a8", static=False)), seed=5,
                   tasks=["w8a8"], log=lambda *_: None)
    task = result.tasks[0]
    assert task.score == task.max_score > 0, [t.message for t in result.tests]
    assert not task.movement.get("error") and task.movement["flops"] < 10 ** 18, task.movement
    assert task.movement["flops"] >= 2 * 32 * 64 * 64   # at least the product's dots, as counted
    assert {r["name"]: r["read"] for r in task.movement["tensors"]}["qweight_t"] >= 64 * 64
    out = write_reports(result, tmp_path / "report")
    assert "## Data movement" in (out / "report.md").read_text()
    assert json.loads((out / "report.json").read_text())["score"] == result.score


@pytest.mark.slow
def test_the_reference_reports_its_table(tmp_path):
    from grader.grade import grade
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "w4a16.py").write_text(SOLUTION["w4a16"])
    result = grade(sub, parse_rubric(_with_movement([16, 128, 256], "w4a16")), seed=5, tasks=["w4a16"],
                   log=lambda *_: None)
    m = result.tasks[0].movement
    rows = {r["name"]: r for r in m["tensors"]}
    assert not m["error"] and not m["output_wrong"] and m["launch_count"] >= 1 and m["programs"] >= 1
    assert rows["qweight"]["read"] == rows["qweight"]["minimum"] == 128 * 256 // 2
    assert rows["output"]["written"] == 2 * 16 * 128 and m["flops"] >= 2 * 16 * 128 * 256
    md = markdown(result)
    assert "not a predicted score" in md and "never change a score" in md and "qweight" in md


class _FakeSession:
    """A worker that answers the counted call with ``reply`` (or raises WorkerGone)."""

    def __init__(self, tmp_path, reply):
        self.device, self.scratch, self.reply = "cpu", tmp_path, reply
        self.executor = self   # the worker writes the program down, the executor counts it: one fake

    def map(self, name, arena):
        return {"ok": True}

    def request(self, msg):
        if isinstance(self.reply, Exception):
            raise self.reply
        if msg["op"] == "call" and self.reply.get("ok"):
            return {"ok": True, "program": {"steps": []}}
        return _validate(self.reply)


@pytest.mark.parametrize("reply, words", [
    ({"ok": False, "error": ""}, "the call failed: ?"),
    ({"ok": False, "error": "Traceback ...\nValueError: no\n"}, "the call failed: ValueError: no"),
    ({"ok": False, "returned": "returned int, expected a torch.Tensor"}, "returned int"),
    ({"ok": True}, "sent no counts"),
    ({"ok": False, "error": "the interpreter could not be instrumented: AttributeError: x"},
     "not counted: the interpreter could not be instrumented"),
    (WorkerGone("time limit exceeded after 61 s; the worker was killed"), "time limit exceeded"),
])
def test_a_call_that_cannot_be_counted_says_why(tmp_path, reply, words):
    from grader.harness.movement import measure
    m = measure(_FakeSession(tmp_path, reply), "mv", "w8a8", (4, 32, 32), {}, 1)
    assert m["shape"] == [4, 32, 32] and words in m["error"] and "tensors" not in m
    task = TaskResult(task="w8a8", title="W8A8", score=1, max_score=1, summary="ok", movement=m)
    assert words.replace("?", "") in markdown(_report_with(task))
