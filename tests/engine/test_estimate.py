"""The CPU run predicts the GPU grade: what the wrapper launches at the GPU shapes is
compiled and labelled with its tests, each performance test gets a predicted
time and ratio (grader/estimate.py), and the prediction agrees with what the
grader measured on an H100 and an H200 for kernels the model was not tuned on
the code of (results/*.json). A GPU check of more kernels is
tools/validate_estimate.py."""

import json
import math
import shutil
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import triton
import triton.language as tl

from grader.estimate import launch_time, load_targets, occupancy, output_copy_ms, shape_key
from grader.rubric import load_rubric
from tests.helpers import HAS_CUDA, validate_gradescope
from tools.gpu_session import CLOCK, kernel_only_ms

# slow: grades and interpreter runs of whole kernel sets
pytestmark = [pytest.mark.slow, pytest.mark.skipif(HAS_CUDA, reason="the estimate is made by CPU runs")]
ROOT = Path(__file__).resolve().parents[2]
H100 = next(t for t in load_targets() if "H100" in t.name)


# ----------------------------------------------------------------------------- the model's parts

def test_occupancy_follows_the_tightest_limit():
    assert occupancy({"num_warps": 4, "registers": 32, "shared_bytes": 0}, H100) == (16, "warps")
    assert occupancy({"num_warps": 4, "registers": 128, "shared_bytes": 16384}, H100) == (4, "registers")
    assert occupancy({"num_warps": 4, "registers": 64, "shared_bytes": 98304}, H100) == (2, "shared memory")
    assert occupancy({"num_warps": 8, "registers": 255, "shared_bytes": 0}, H100)[0] == 1
    assert occupancy({"num_warps": 4, "registers": 40, "shared_bytes": 240000}, H100) == (0, "shared memory")


def _stream(nbytes: int, programs: int, **row) -> float:
    """A launch that reads ``nbytes`` once, split over ``programs`` programs of one trip."""
    launch = {"kernel": "k", "programs": programs, "steps": 1,
              "counts": {"a": {"sectors_read": nbytes / programs, "rows_read": 4, "sectors_written": 0}},
              "tensors": {"a": {"name": "x", "bytes": nbytes}}}
    return launch_time(launch, {"num_warps": 4, "registers": 32, "shared_bytes": 0, **row}, H100, set())


def test_a_streaming_launch_is_bound_by_dram_at_the_measured_bandwidth():
    t = _stream(1 << 30, 8192)
    floor = (1 << 30) / (H100.copy_gbs * 1e9) * 1e6
    assert t["bound"] == "DRAM" and floor < t["us"] < 1.5 * floor and t["dram_bytes"] == 1 << 30


def test_a_launch_that_does_not_fit_is_said_so():
    t = _stream(1 << 20, 64, shared_bytes=300_000)
    assert t["us"] == math.inf and t["launchable"] is False and "shared memory" in t["bound"]


def test_rereads_come_from_l2_only_when_the_sharer_runs_close_enough():
    def launch(shared_at):
        size = 512 << 20
        return {"kernel": "k", "programs": 4096, "steps": 1,
                "counts": {"a": {"sectors_read": 8 * size / 4096, "rows_read": 64, "shared_at": shared_at}},
                "tensors": {"a": {"name": "x", "bytes": size}}}
    row = {"num_warps": 4, "registers": 32, "shared_bytes": 0}
    near, far = (launch_time(launch(d), row, H100, set()) for d in (1, 100_000))
    assert near["dram_bytes"] == 512 << 20 and far["dram_bytes"] == 8 * (512 << 20)


@pytest.mark.parametrize("width", [32, 64])
def test_dram_moves_the_sectors_a_kernel_touches(width):
    """A copy in strips of 32 or 64 fp16 columns (64 or 128 bytes of each row a program):
    either way every sector of x is read once and every sector of y written once, as the
    GPU moves them (32-byte sectors: a 64-byte run is two, not a whole line)."""
    from tests.worker.test_capture import _captured, aligned, strips

    R, C = 512, 1024
    _, rep = _captured(lambda x: strips(x, width), aligned((R, C)), names=("x",))
    (launch,) = rep["launches"]
    t = launch_time(launch, {"num_warps": 4, "registers": 32, "shared_bytes": 0}, H100, set())
    assert t["dram_bytes"] == t["l2_bytes"] == 2 * (R * C * 2)


def test_the_l2_holds_whole_lines_of_what_a_program_touches():
    """Programs that read one sector of each line hold four in L2: with the lines they hold
    counted, fewer run within reach of the L2, and a sharer 500 programs back misses it."""
    size, P = 64 << 20, 4096
    sectors = {"sectors_read": 32 << 10, "rows_read": 64, "shared_at": 500}
    row = {"num_warps": 4, "registers": 32, "shared_bytes": 200_000}   # one program a multiprocessor

    def dram(counts):
        launch = {"kernel": "k", "programs": P, "steps": 1, "counts": {"a": counts},
                  "tensors": {"a": {"name": "x", "bytes": size}}}
        return launch_time(launch, row, H100, set())["dram_bytes"]
    assert dram(sectors) == size   # the sectors alone: 960 programs' reads fit in L2
    assert dram({**sectors, "lines_read": 128 << 10}) == P * (32 << 10)   # their lines: 240 do


def test_int8_dots_run_at_twice_the_fp16_rate_as_in_nvidias_figures():
    """The tensor cores' rate per type is the measured fp16 peak scaled by NVIDIA's dense
    figures (recorded in grader/targets.toml with their source): int8 twice fp16 on Hopper,
    not the library's int8 product (torch._int_mm), which reaches far less."""
    for target in load_targets():
        figures = target.tensor_tflops   # H100 SXM (H200 the same): 989.4 TFLOPS fp16, 1978.9 TOPS int8, dense
        assert (figures["fp16"], figures["int8"]) == (989.4, 1978.9)
        assert "NVIDIA" in target.tensor_source and "datasheet" in target.tensor_source
        assert target.tensor_peak("fp16") == target.tflops["fp16"]
        assert target.tensor_peak("int8") == pytest.approx(2 * target.tflops["fp16"], rel=1e-4)

    def tensor_cores(kind):
        launch = {"kernel": "k", "programs": 1024, "steps": 32, "dot_flops": {kind: 2 * 128 * 128 * 4096}}
        return launch_time(launch, {"num_warps": 8, "registers": 128, "shared_bytes": 65536}, H100,
                           set())["parts"]["tensor cores"]
    flops = 1024 * 2 * 128 * 128 * 4096
    assert tensor_cores("fp16") == pytest.approx(flops / (H100.tflops["fp16"] * 1e6))
    assert tensor_cores("int8") == pytest.approx(tensor_cores("fp16") / 2, rel=1e-4)


def _one_launch(test: str, programs: int, counts: dict, tensors: dict) -> tuple[dict, list]:
    """A capture of ``test`` with one launch of ``programs`` programs, and its compile rows."""
    launch = {"kernel": "k", "programs": programs, "steps": 1, "sampled": 6, "counts": counts, "tensors": tensors,
              "variant": 0}
    rows = [{"ids": [0], "num_warps": 4, "num_stages": 3, "registers": 32, "shared_bytes": 0, "loop": {}}]
    return {"cases": {test: {"launches": [launch]}}}, rows


def test_no_call_is_predicted_faster_than_the_memory_floor():
    """A program that reads no input and writes only its output (the issue's 3.5x fp16):
    the kernel alone models near its launch cost, but the judge's memory floor (every
    input read once, the output written once, at the copy bandwidth) bounds the
    prediction and the fast end of its range."""
    from grader.estimate import estimate
    from grader.facts import TaskRun

    rubric = load_rubric()
    spec = next(t for t in rubric.tests if t.name == "dds/perf_m65536_d5")
    out, programs = 2 * 65536 * 1024, 16384
    capture, rows = _one_launch(spec.name, programs, {"o": {"sectors_written": out / programs, "rows_written": 4}},
                                {"o": {"name": "output", "bytes": out}})
    est = estimate(TaskRun(task="dds", capture=capture, kernels=rows), rubric)
    assert est["graded_on"] == [t.name for t in load_targets()]   # the rubric's calibrated_on: both GPUs
    for gpu in est["tests"][spec.name]["gpus"]:
        target = next(t for t in load_targets() if t.name == gpu["gpu"])
        floor_us = spec.registered_task.minimum_bytes(spec.shape, spec.options) / (target.copy_gbs * 1e3)
        assert gpu["launches"][0]["us"] < floor_us    # the kernel alone: faster than any correct call
        assert gpu["at_floor"] and gpu["us"] == pytest.approx(floor_us) == gpu["floor_us"]
        assert gpu["us_range"][0] == pytest.approx(floor_us)
        assert gpu["ratio_range"][1] == pytest.approx(gpu["baseline_us"] / floor_us)


def test_the_load_store_unit_bounds_a_launch_whose_lanes_are_far_apart():
    """The same launch, its loop's memory instructions priced by ptx.py: 2146 passes a warp
    a trip (80 scalar loads, 64 of them a row per lane) against 16 (vectors)."""
    tensors = {"x": {"name": "x", "bytes": 8 << 20}}
    counts = {"x": {"sectors_read": 64 << 10, "rows_read": 128}}
    row = {"num_warps": 4, "registers": 128, "shared_bytes": 20480}
    far = launch_time({"kernel": "k", "programs": 1024, "steps": 4, "counts": counts, "tensors": tensors},
                      {**row, "loop": {"wavefronts": 2146, "kernel_wavefronts": 2212, "instructions": 263}}, H100,
                      set())
    near = launch_time({"kernel": "k", "programs": 1024, "steps": 4, "counts": counts, "tensors": tensors},
                       {**row, "loop": {"wavefronts": 16, "kernel_wavefronts": 60, "instructions": 263}}, H100, set())
    # the busiest SM runs 8 programs of 4 warps, each 4 trips of 2146 passes and 66 more, a line a cycle
    assert far["parts"]["load/store unit"] == pytest.approx(8 * 4 * (4 * 2146 + 66) / (H100.clock_ghz * 1e3))
    assert far["bound"] == "load/store unit" and near["bound"] != "load/store unit"
    assert far["us"] > 5 * near["us"]


@triton.jit
def tiles(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK: tl.constexpr):
    """y[m-tile, n-tile] = x[m-tile, :] @ w[:, n-tile], square tiles: the smaller they are, the
    more often every row of x and column of w is read."""
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    offs_k = tl.arange(0, 32)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k0 in range(0, K, 32):
        a = tl.load(x_ptr + offs_m[:, None] * K + (k0 + offs_k)[None, :])
        b = tl.load(w_ptr + (k0 + offs_k)[:, None] * N + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))


# The first config is the one the CPU's autotuner keeps (every config ties there).
three_configs = triton.autotune([triton.Config({"BLOCK": b}) for b in (16, 64, 32)], key=["M", "N", "K"])(tiles)
one_config = triton.autotune([triton.Config({"BLOCK": 32})], key=["M", "N", "K"])(tiles)
TUNED_TEST = "w8a8/perf_m4096"


def _tuned_estimate(kernel, monkeypatch) -> dict:
    """The estimate of TUNED_TEST from a capture of ``kernel`` on a 2048 x 2048 x 1024 fp16
    product (sampled programs counted, no launch run whole: only the counts matter here)."""
    import torch

    from grader.estimate import estimate
    from grader.facts import TaskRun
    from grader.worker import capture as cap

    monkeypatch.setattr(cap, "FULL_RUN_S", 0.0)
    x, w = torch.empty(2048, 1024, dtype=torch.float16), torch.empty(1024, 2048, dtype=torch.float16)
    y = torch.empty(2048, 2048, dtype=torch.float16)
    with cap.Capture(probe=True, files={__file__}) as c, warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        kernel[lambda meta: (2048 // meta["BLOCK"], 2048 // meta["BLOCK"])](x, w, y, 2048, 2048, 1024)
    capture = {"cases": {TUNED_TEST: c.report(cap.named_ranges([x, w], ["x", "w"]), y)}}
    return estimate(TaskRun(task="w8a8", capture=capture), load_rubric())


def test_an_autotuned_kernel_is_predicted_at_its_fastest_config(monkeypatch):
    """Every config the autotuner tries is predicted, and the call at the fastest, as the GPU's
    autotuner would pick: here the largest tiles, which read x and w the fewest times, not the
    first config that the CPU's ties keep (the slowest). The estimate names the pick and the
    spread, and the report says it in one line for the kernel."""
    from grader.estimate_report import _autotune_lines, _us
    from grader.report import md_code, md_inline

    est = _tuned_estimate(three_configs, monkeypatch)
    test = est["tests"][TUNED_TEST]
    for gpu in test["gpus"]:
        (launch,) = gpu["launches"]
        tune = launch["autotune"]
        assert tune["configs"] == 3 and tune["unlaunchable"] == tune["uncounted"] == 0
        assert tune["chosen"] == "BLOCK=64, num_warps=4, num_stages=3" and launch["us"] == tune["us"][0]
        assert tune["slowest"] == "BLOCK=16, num_warps=4, num_stages=3" and tune["us"][1] > 2 * tune["us"][0]
        assert launch["bound"] == "L2"   # what the tile size changes
    first = test["gpus"][0]
    fastest, slowest = first["launches"][0]["autotune"]["us"]
    assert _autotune_lines(est["tests"], md_inline, md_code) == [
        f"- ` tiles ` is autotuned: on {md_inline(first['gpu'])} its autotuner would pick the config predicted "
        f"fastest, in perf\\_m4096 ` BLOCK=64, num_warps=4, num_stages=3 ` at {_us(fastest)} "
        f"(of 3 configs, the slowest {slowest / fastest:.2f}x that)"]


def test_a_kernel_autotuned_over_one_config_reports_no_spread(monkeypatch):
    from grader.estimate_report import _autotune_lines
    from grader.report import md_code, md_inline

    est = _tuned_estimate(one_config, monkeypatch)
    for gpu in est["tests"][TUNED_TEST]["gpus"]:
        (launch,) = gpu["launches"]
        assert launch["us"] > 0 and "autotune" not in launch
    assert _autotune_lines(est["tests"], md_inline, md_code) == []


def test_no_gpu_figures_no_estimate(tmp_path):
    from grader.estimate import estimate
    from grader.facts import TaskRun

    run = TaskRun(task="dds", capture={"cases": {"dds/perf_m4096_d25": {"launches": []}}})
    assert "targets.toml" in estimate(run, load_rubric(), targets=[])["error"]


def test_targets_come_from_the_results_files():
    from tools.render_results import targets_toml

    assert (ROOT / "grader" / "targets.toml").read_text() == targets_toml()
    rubric = load_rubric()
    for target in load_targets():   # a measured fp16 baseline for every performance shape of the rubric
        for t in rubric.tests:
            if t.kind == "performance":
                assert shape_key(t.shape) in target.baseline_ms, (target.name, t.name)


# ----------------------------------------------------------------------------- against measured times

def _measured() -> dict:
    """{(gpu, kernels, test): median kernel ms} over every recorded grade, as the grader's
    clock now times a call (the kernels alone: tools.gpu_session.kernel_only_ms)."""
    from tools.gpu_session import kernel_only_ms, recorded_grades

    targets = {t.name: t for t in load_targets()}
    shapes = {t.name: t.shape for t in load_rubric().tests}
    found = {}
    for p in sorted((ROOT / "results").glob("*.json")):
        run = json.loads(p.read_text())
        for who in ("naive", "from_the_handout"):
            grades = recorded_grades(run, who) if who == "naive" else [run.get("grades", {}).get(who)]
            for g in filter(None, grades):
                for name, t in g["tests"].items():
                    if t.get("kernel_ms") and name in shapes:
                        ms = kernel_only_ms(t["kernel_ms"], shapes[name], run, targets[run["gpu"]].copy_gbs)
                        found.setdefault((run["gpu"], who, name), []).append(ms)
    return {k: statistics.median(v) for k, v in found.items()}


def _features(folder: Path, package: str) -> dict:
    """What a CPU grade's worker captures and compiles at the performance shapes, in this process."""
    import importlib

    from grader.harness import capture as hcap
    from grader.tasks import get
    from grader.worker import capture as cap
    from grader.worker import compile as cc
    from grader.worker.evidence import LaunchRecorder

    root = Path(tempfile.mkdtemp())
    pkg = root / package
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copyfile(ROOT / "assignment" / "utils.py", pkg / "utils.py")
    for f in ("w8a8.py", "w4a16.py", "dds.py"):
        shutil.copyfile(folder / f, pkg / f)
    sys.path.insert(0, str(root))
    import triton.runtime.interpreter as interpreter
    import triton.runtime.jit as jit
    saved = {cls: cls.run for cls in (jit.JITFunction, interpreter.InterpretedFunction)}
    rec = LaunchRecorder(own_prefix=package + ".")
    rec.install()
    out = {}
    try:
        rubric = load_rubric()
        for task in rubric.tasks:
            t = get(task)
            fn = getattr(importlib.import_module(f"{package}.{t.file[:-3]}"), t.entry)
            check = cc.CompileCheck()
            cases = {}
            for spec in rubric.tests_for(task, "performance"):
                args = [cap.build(d) for d in hcap.describe(task, spec.shape, spec.options, hcap.SEED)]
                c = cap.Capture(probe=True, files={str(pkg / t.file)})

                def on_launch(f, a, kw, result, c=c, check=check):
                    check.record(f, a, kw, result)
                    if c.launches and "variant" not in c.launches[-1]:
                        c.launches[-1]["variant"] = check.last_id
                rec.on_launch = on_launch
                check.label = cc.GPU_LABEL + spec.name
                with c, warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    y = fn(*args)
                cases[spec.name] = c.report(cap.named_ranges(args, list(t.arg_names)), y)
            out[task] = {"cases": cases, "kernels": check.check(budget_s=600, root=str(pkg), gpu_only=True)}
    finally:
        for cls, run in saved.items():
            cls.run = run
    return out


@pytest.fixture(scope="module")
def predicted_vs_measured():
    from grader.estimate import call_time

    targets = {t.name: t for t in load_targets()}
    rows = []
    measured = _measured()
    features = {who: _features(ROOT / folder, f"est_{who}") for who, folder in
                (("naive", "calibration/naive"), ("from_the_handout", "tests/fixtures/from_the_handout"))}
    for (gpu, who, test), ms in sorted(measured.items()):
        task = test.split("/")[0]
        found = features[who][task]
        kernels = {i: r for r in found["kernels"] for i in r.get("ids", [])}
        us = call_time(found["cases"][test]["launches"], kernels, targets[gpu])["us"]
        rows.append((gpu, who, test, us, ms * 1e3))
    return rows


def test_the_estimate_agrees_with_the_recorded_gpu_grades(predicted_vs_measured):
    """The tutorial-style kernels (H100, H200) and the kernels written from the
    handout (H200): the predicted time, hence the ratio, is within a factor 1.5 of
    the one the grader measured for at least 80 % of the performance tests."""
    rows = predicted_vs_measured
    assert len(rows) >= 27   # every recorded grade of these kernels on a GPU
    within = [r for r in rows if 1 / 1.5 <= r[3] / r[4] <= 1.5]
    assert len(within) >= 0.8 * len(rows), "\n".join(f"{r[:3]} predicted {r[3]:.1f} us, measured {r[4]:.1f} us"
                                                     for r in rows)


def test_tests_predicted_to_earn_nothing_earned_little(predicted_vs_measured):
    rubric = {t.name: t for t in load_rubric().tests}
    targets = {t.name: t for t in load_targets()}
    for gpu, who, test, us, measured_us in predicted_vs_measured:
        spec = rubric[test]
        base = targets[gpu].baseline_ms[shape_key(spec.shape)] * 1e3
        fraction = (base / measured_us - spec.zero_ratio) / (spec.full_ratio - spec.zero_ratio)
        if base / us <= spec.zero_ratio:
            assert fraction <= 0.25, (gpu, who, test)


# ----------------------------------------------------------------------------- through a CPU grade

@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A CPU grade of a W8A8 whose wrapper changes its tiles from M = 512 on, and of
    a DDS like the one a student measured at 0.05-0.38 of fp16 on an H100."""
    from grader.grade import grade
    from grader.report import terminal_table, write_reports

    folder = tmp_path_factory.mktemp("submission")
    shutil.copyfile(ROOT / "tests" / "fixtures" / "compile" / "w8a8_by_m.py", folder / "w8a8.py")
    shutil.copyfile(ROOT / "tests" / "fixtures" / "slow" / "slow_dds" / "dds.py", folder / "dds.py")
    result = grade(folder, load_rubric(), seed=11, device="cpu", tasks=["w8a8", "dds"], log=lambda *_: None)
    out = tmp_path_factory.mktemp("report")
    write_reports(result, out)
    return result, out, terminal_table(result)


def test_the_configuration_only_gpu_shapes_launch_is_compiled_and_labelled(graded):
    result, out, _ = graded
    w8a8 = next(t for t in result.tasks if t.task == "w8a8")
    big = [k for k in w8a8.kernels if "BLOCK_M=128" in k.get("variant", "")]
    small = [k for k in w8a8.kernels if "BLOCK_M=32" in k.get("variant", "")]
    assert big and small
    assert all("num_warps=8" in k["variant"] and "num_stages=4" in k["variant"] for k in big)
    labelled = {t for k in big for t in k["tests"]}
    assert labelled == {"w8a8/nonsquare", "w8a8/large_m4096", "w8a8/perf_m4096"}   # M = 1000, 4096, 4096
    assert not any(k["cpu_tests"] for k in big)   # no CPU shape reaches M = 512
    assert all(k["ok"] and k["launchable"] and isinstance(k["registers"], int) for k in big)
    assert {t for k in small for t in k["tests"]} >= {"w8a8/decode_m1", "w8a8/perf_m1", "w8a8/perf_m16"}
    report = (out / "report.md").read_text()
    rows = [line for line in report.splitlines() if "BLOCK\\_M=128" in line and "num\\_warps=8" in line]
    assert any("w8a8/large\\_m4096" in row and "w8a8/perf\\_m4096" in row for row in rows), rows
    assert any("w8a8/nonsquare" in row for row in rows)   # M = 1000: its own specialization (not 16-aligned)


def test_the_slow_dds_is_told_it_is_predicted_far_below_the_thresholds(graded):
    result, out, terminal = graded
    dds = next(t for t in result.tasks if t.task == "dds")
    assert dds.score == 20   # correct: only its speed is the problem
    tests = dds.estimate["tests"]
    rubric = {t.name: t for t in load_rubric().tests}
    for name in ("dds/perf_m4096_d25", "dds/perf_m4096_d50"):
        for gpu in tests[name]["gpus"]:
            assert gpu["ratio_range"][1] < rubric[name].zero_ratio and gpu["points_range"] == [0, 0], (name, gpu)
            assert gpu["launches"][0]["bound"] == "latency"
    report = (out / "report.md").read_text()
    assert "dds/perf_m4096_d25 ` is predicted far below the thresholds" in report
    assert "dds/perf_m4096_d50 ` is predicted far below the thresholds" in report
    assert "an estimate" in report and "not a score" in report
    line = next(x for x in terminal.splitlines() if x.startswith("dds: predicted"))
    assert "perf_m4096_d25 ratio" in line and "FAR BELOW the thresholds" in line


def test_the_report_names_the_gpus_the_rubric_grades_on(graded):
    result, out, _ = graded
    rubric = load_rubric()
    named = " and ".join(rubric.settings.calibrated_on)
    assert f"The rubric grades on {named}" in (out / "report.md").read_text()
    entries = [t for t in json.loads((out / "results.json").read_text())["tests"] if "speed predicted" in t["name"]]
    assert entries and all(f"The rubric grades on {named}" in t["output"] for t in entries)
    for task in result.tasks:
        assert task.estimate["graded_on"] == [t.name for t in load_targets()
                                              if any(t.name in c for c in rubric.settings.calibrated_on)]


@pytest.fixture(scope="module")
def dds_grades(tmp_path_factory):
    """CPU grades of DDS alone: the gathered fixture (tests/fixtures/slow/gathered) at two
    seeds, and the reference."""
    from grader.grade import grade
    from grader.report import write_reports

    out = {}
    for name, source, seed in (("gathered", "tests/fixtures/slow/gathered/dds.py", 11),
                               ("gathered_seed12", "tests/fixtures/slow/gathered/dds.py", 12),
                               ("reference", "solutions/dds.py", 11)):
        folder = tmp_path_factory.mktemp(name)
        shutil.copyfile(ROOT / source, folder / "dds.py")
        result = grade(folder, load_rubric(), seed=seed, device="cpu", tasks=["dds"], log=lambda *_: None)
        report = tmp_path_factory.mktemp(f"{name}_report")
        write_reports(result, report)
        out[name] = (next(t for t in result.tasks if t.task == "dds"), (report / "report.md").read_text())
    return out


def test_a_kernel_whose_loads_the_compiler_could_not_vectorize_is_predicted_slow(dds_grades):
    """The issue's case: Triton 3.6 compiles the gathered DDS to 80 scalar 2-byte loads a
    trip with each lane in its own row, and no cp.async; an H100 ran such a kernel at
    0.05-0.38x fp16 for 0 of 13 points, where the estimate without the load/store unit
    predicted 8.5 of them. It is predicted to earn nothing now (the centre of every
    range), no range reaching a quarter of its points, bound by the load/store unit;
    the reference stays predicted fast: every range reaches full credit, and the centre
    is more than half the points."""
    gathered, report = dds_grades["gathered"]
    assert gathered.score == 20   # correct: only its speed is the problem
    for name, test in gathered.estimate["tests"].items():
        for gpu in test["gpus"]:
            assert gpu["points"] == 0 and gpu["points_range"][1] <= test["points_max"] / 4, (name, gpu["gpu"])
            assert gpu["launches"][0]["bound"] == "load/store unit", (name, gpu["launches"][0]["parts"])
    assert "bound by **load/store unit**" in report and "single 2-byte loads, not 16-byte vectors" in report
    assert "(the loads of dds.py, line " in report   # which tl.load, from the compiled code's lines
    reference = dds_grades["reference"][0].estimate["tests"]
    for gpu in range(len(load_targets())):
        tests = [t for t in reference.values()]
        assert all(t["gpus"][gpu]["points_range"][1] == t["points_max"] for t in tests)
        assert sum(t["gpus"][gpu]["points"] for t in tests) > sum(t["points_max"] for t in tests) / 2


def test_the_estimate_is_the_same_whatever_the_seed(dds_grades):
    """The same files graded with --seed 11 and 12: identical predictions (the capture's
    inputs, a BSR pattern among them, come from one fixed seed)."""
    first, again = dds_grades["gathered"][0].estimate, dds_grades["gathered_seed12"][0].estimate
    assert first["tests"] and json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)


def test_a_trip_waiting_on_its_instructions_names_them():
    """"waiting on its instructions" says which instructions, and a run-time integer
    division is named as one (never "correctly rounded divisions")."""
    from grader.estimate_report import _launch_lines
    from grader.report import md_code, md_inline

    loop = {"instructions": 120, "serial": 2, "serial_kinds": {"integer division": 2}, "loads": 1,
            "top": [["integer divisions", 40], ["32-bit integer arithmetic", 38], ["compares and selects", 20]],
            "kernel_instructions": 200, "kernel_serial": 2}
    launch = {"kernel": "k", "programs": 64, "steps": 64, "counts": {}, "tensors": {}}
    t = launch_time(launch, {"num_warps": 4, "registers": 32, "shared_bytes": 0, "loop": loop}, H100, set())
    assert t["bound"] == "latency" and t["trip_bound"] == "its instructions"
    line = _launch_lines("w4a16/perf_m1", {"launches": [t]}, md_inline, md_code)[0]
    assert ("waiting on its instructions (120 issue slots a trip per thread, most of them 40 integer divisions, "
            "38 32-bit integer arithmetic, 20 compares and selects)") in line
    assert "2 integer divisions a trip, each a long chain" in line and "correctly rounded" not in line


@pytest.mark.parametrize("chain,said", [(1, "its loads (not pipelined: each trip waits for its own)"),
                                         (3, "a chain of 3 loads, each waiting for the one before")])
def test_a_trip_waiting_on_its_loads_says_whether_they_wait_for_each_other(chain, said):
    """A GEMV's loop of independent synchronous loads waits for its own loads, once a trip;
    "a chain" is said only where a load's address needs another load's data."""
    loop = {"instructions": 4, "serial": 0, "loads": 2, "load_chain": chain, "kernel_instructions": 10}
    launch = {"kernel": "k", "programs": 16, "steps": 512, "counts": {}, "tensors": {}}
    t = launch_time(launch, {"num_warps": 4, "registers": 32, "shared_bytes": 0, "loop": loop}, H100, set())
    assert t["bound"] == "latency" and t["trip_bound"] == said


def test_an_occupancy_limited_by_registers_or_shared_memory_says_what_lowers_it():
    from grader.report import _occupancy

    regs = {"ok": True, "registers": 255, "num_warps": 8, "shared_bytes": 0}
    assert _occupancy(regs, H100) == "1/SM (registers, 255 a thread: a smaller tile or more warps lowers it)"
    smem = {"ok": True, "registers": 64, "num_warps": 4, "shared_bytes": 150 * 1024}
    assert _occupancy(smem, H100) == "1/SM (shared memory: fewer stages or a smaller BLOCK_K lowers it)"
    assert _occupancy({"ok": True, "registers": 32, "num_warps": 4, "shared_bytes": 0}, H100) == "16/SM (warps)"


def test_the_report_draws_a_roofline_per_task_and_gradescope_embeds_it(graded):
    result, out, _ = graded
    report = (out / "report.md").read_text()
    for task in ("w8a8", "dds"):
        png = out / f"roofline-{task}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png.name})" in report
    results = json.loads((out / "results.json").read_text())
    validate_gradescope(results)
    extra = [t for t in results["tests"] if "speed predicted" in t["name"]]
    assert len(extra) == 2 and all(t["max_score"] == 0 and t["output_format"] == "html" for t in extra)
    assert any('src="data:image/png;base64,' in t["output"] for t in extra)
    assert results["score"] == result.score   # informational entries add nothing


def test_without_matplotlib_the_report_says_so(graded, tmp_path, monkeypatch):
    from grader import roofline
    from grader.report import write_reports

    monkeypatch.setattr(roofline, "available", lambda: False)
    write_reports(graded[0], tmp_path)
    assert not list(tmp_path.glob("*.png"))
    assert "no plot: matplotlib is not installed" in (tmp_path / "report.md").read_text()


def test_kernel_names_in_the_estimate_are_escaped(graded, tmp_path):
    import copy

    from grader.report import markdown, md_code, write_reports

    result = copy.deepcopy(graded[0])
    evil = "<img src=x onerror=alert(1)>|**bold**"
    for task in result.tasks:
        for test in (task.estimate.get("tests") or {}).values():
            for gpu in test.get("gpus", []):
                for launch in gpu["launches"]:
                    launch["kernel"] = evil
    text = markdown(result, {})
    shown = [line for line in text.splitlines() if "onerror" in line]
    assert shown and all(md_code(evil, 60) in line for line in shown)   # in code spans: literal text
    write_reports(result, tmp_path)
    html_out = " ".join(t["output"] for t in json.loads((tmp_path / "results.json").read_text())["tests"]
                        if t.get("output_format") == "html")
    assert "<img src=x" not in html_out


# ----------------------------------------------------------------------------- the GPU check's second half

def test_predictions_for_a_gpu_run_that_only_measured_are_made_here(tmp_path, capsys):
    """Some GPU machines cannot run Triton's interpreter (Triton 3.6 under numpy 2.5):
    there tools/validate_estimate.py records its measurements only, and --predict
    makes the predictions on a CPU machine, as a student's CPU grade would, then
    compares them. Measured times here are made up: the prediction is what is checked."""
    from tools import validate_estimate as ve

    rubric = load_rubric()
    specs = rubric.tests_for("w8a8", "performance")
    measured = {s.name: H100.baseline_ms[shape_key(s.shape)] / ratio for s, ratio in zip(specs, (1.0, 0.9, 1.1))}
    rows = [ve.compare("reference", s, {"error": "not predicted yet"},
                       {"kernel_ms": measured[s.name], "baseline_ms": H100.baseline_ms[shape_key(s.shape)]})
            for s in specs]
    rows.append({"kernels": "reference", "test": "w8a8/gone_from_the_rubric", "measurement": {}})
    record = {"gpu": H100.name, "device": {}, "bench_quick": {}, "clock": CLOCK,
              "estimate": {"rows": rows, "summary": {"pending": "no predictions on this machine"}}}
    (tmp_path / "results.json").write_text(json.dumps(record))
    assert all("predicted_ratio" not in r for r in rows)

    ve.main([str(tmp_path), "--predict"])
    est = json.loads((tmp_path / "results.json").read_text())["estimate"]
    assert [r["test"] for r in est["rows"]] == [s.name for s in specs]
    for row, spec in zip(est["rows"], specs):
        assert row["predicted_us"] > 0 and row["bound"] and not row.get("error"), row
        assert row["measured_us"] == pytest.approx(measured[spec.name] * 1e3, abs=0.01)
        assert row["predicted_ratio"] == pytest.approx(row["baseline_us"] / row["predicted_us"], rel=1e-3)
        assert "copy_us_taken_off" not in row
    s = est["summary"]
    assert s["tests"] == 3 and 0 <= s["within"] <= 3 and "pending" not in s
    assert est["predicted_on"]["triton"] and est["predicted_on"]["interpreter"] == "TRITON_INTERPRET=1"
    assert "within a factor 1.5" in capsys.readouterr().out


def test_times_recorded_with_the_earlier_clock_lose_its_output_copy(tmp_path, monkeypatch):
    """Results files recorded while each timed call also copied its output into the
    harness's arena (no ``clock``): targets.toml, the fit above and validate_estimate's
    comparison take the modelled copy off; a file of the current clock is taken as it is,
    and where a GPU has one, its older files no longer count for targets.toml."""
    from tools import render_results
    from tools import validate_estimate as ve

    shape = (65536, 1024, 1024)
    copy = output_copy_ms(shape, H100.copy_gbs)
    assert copy == pytest.approx(0.0025 + 4 * 65536 * 1024 / (H100.copy_gbs * 1e9) * 1e3)
    assert kernel_only_ms(0.27, shape, {}, H100.copy_gbs) == pytest.approx(0.27 - copy)
    assert kernel_only_ms(0.27, shape, {"clock": CLOCK}, H100.copy_gbs) == 0.27

    spec = next(t for t in load_rubric().tests if t.name == "dds/perf_m65536_d5")
    row = ve.compare("x", spec, {"gpus": [{"us": 100.0, "launches": []}]}, {"kernel_ms": 0.3, "baseline_ms": 0.27},
                     copy)
    assert row["measured_ratio"] == pytest.approx((0.27 - copy) / (0.3 - copy))
    assert row["predicted_ratio"] == pytest.approx((0.27 - copy) * 1e3 / 100.0)

    def results(*clocks):
        runs = []
        for i, clock in enumerate(clocks):
            grade = {"tests": {spec.name: {"kind": "performance", "baseline_ms": 0.27 + i, "kernel_ms": 0.2}}}
            run = {"gpu": H100.name, "device": {"sms": 132}, "bench": [{"copy_gbs": H100.copy_gbs, "peaks": {}}],
                   "grades": {"reference": grade}} | ({"clock": clock} if clock else {})
            runs.append((ROOT / "results" / f"{i}.json", run))
        monkeypatch.setattr(render_results, "_runs", lambda: runs)
        line = next(x for x in render_results.targets_toml().splitlines() if x.startswith("baseline_ms"))
        return float(line.split(f'"{shape_key(shape)}" = ')[1].split(",")[0].rstrip("}"))

    assert results(None) == pytest.approx(0.27 - copy, abs=1e-5)
    assert results(None, CLOCK) == pytest.approx(1.27, abs=1e-5)   # the current clock's file alone


def test_predict_refuses_a_file_without_measurements(tmp_path, capsys):
    from tools import validate_estimate as ve

    assert ve.main([str(tmp_path), "--predict"]) == 2
    (tmp_path / "results.json").write_text('{"gpu": "NVIDIA H100 80GB HBM3"}')
    assert ve.main([str(tmp_path), "--predict"]) == 2
    assert "holds no measured estimate rows" in capsys.readouterr().err
