"""The compile check (grader/worker/compile.py and the compile_*.py beside it): what a CPU run launched in the
interpreter is compiled for sm_90 by Triton's own compiler and ptxas, so a
kernel that only the interpreter accepts fails on the CPU as it would on a GPU."""

import importlib
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

from grader.compare import check_output
from grader.worker import compile as cc
from grader.worker.evidence import LaunchRecorder
from tests.helpers import HAS_CUDA, problem, w8a8_reference

# slow: Triton's compiler for sm_90 on every config, and grades
pytestmark = [pytest.mark.slow, pytest.mark.skipif(HAS_CUDA, reason="checks what the CPU interpreter launched")]
FIXTURES = Path(__file__).parents[1] / "fixtures" / "compile"
# These tests assert what compiles and what does not, never how fast: the check's
# wall-clock budget is out of their way on any machine (one test sets a tiny one on purpose).
NO_BUDGET = 24 * 3600
UTILS = Path(__file__).parents[2] / "assignment" / "utils.py"


@pytest.fixture(scope="module")
def launches():
    """A LaunchRecorder installed as the worker installs it; Triton's classes restored after."""
    import triton.runtime.interpreter as interpreter
    import triton.runtime.jit as jit

    saved = {cls: cls.run for cls in (jit.JITFunction, interpreter.InterpretedFunction)}
    rec = LaunchRecorder(own_prefix="")
    rec.install()
    yield rec
    for cls, run in saved.items():
        cls.run = run


def _stage(root: Path, package: str, files: dict) -> Path:
    """A package laid out as the grader stages a submission: kernel files + utils.py."""
    pkg = root / package
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copyfile(UTILS, pkg / "utils.py")
    for name, fixture in files.items():
        shutil.copyfile(FIXTURES / fixture, pkg / name)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return pkg


@pytest.fixture(scope="module")
def fixture_rows(tmp_path_factory, launches):
    """Each fixture run once in the interpreter, then one check of all their launches."""
    root = tmp_path_factory.mktemp("staged")
    _stage(root, "student_cc", {"w8a8.py": "w8a8_global.py", "w8a8_fine.py": "w8a8_fine.py",
                                "break_in_loop.py": "break_in_loop.py", "big_tiles.py": "big_tiles.py",
                                "autotuned.py": "autotuned.py"})
    check = cc.CompileCheck()
    launches.on_launch = check.record
    try:
        shape = (33, 64, 96)
        args, _ = problem("w8a8", shape, 7)
        for module in ("w8a8", "w8a8_fine"):  # both right in the interpreter
            out = importlib.import_module(f"student_cc.{module}").w8a8_mm(*args)
            assert check_output(out, w8a8_reference(*args), "w8a8", shape[:2]).passed
        x = torch.randn(3, 100)
        y = importlib.import_module("student_cc.break_in_loop").row_sum(x)
        assert torch.allclose(y, x.sum(dim=1), atol=1e-4)
        a, b = torch.randn(16, 16, dtype=torch.float16), torch.randn(16, 16, dtype=torch.float16)
        c = importlib.import_module("student_cc.big_tiles").matmul(a, b)
        assert torch.allclose(c.float(), a.float() @ b.float(), atol=0.05)
        scale = importlib.import_module("student_cc.autotuned").scale
        for n in (1000, 256):  # the heuristic's EVEN is False, then True
            x = torch.randn(n)
            assert torch.equal(scale(x, 2.0), 2 * x)
    finally:
        launches.on_launch = None
    rows = check.check(budget_s=NO_BUDGET)
    by_file = {}
    for row in rows:
        by_file.setdefault(row["file"], []).append(row)
    return {f: rs[0] if len(rs) == 1 else rs for f, rs in by_file.items()}


def _line_of(fixture: str, text: str) -> int:
    lines = (FIXTURES / fixture).read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if text in line)


def test_non_constexpr_global_fails_with_file_line_and_name(fixture_rows):
    row = fixture_rows["w8a8.py"]
    assert row["kernel"] == "w8a8_kernel" and row["checked"]
    assert not row["ok"] and row["status"] == "error" and row["launchable"] is False
    where = _line_of("w8a8_global.py", "(v + ROUND_MAGIC) - ROUND_MAGIC")
    assert row["error"].startswith(f'File "w8a8.py", line {where}, in w8a8_kernel'), row["error"]
    assert "(v + ROUND_MAGIC) - ROUND_MAGIC" in row["error"]
    assert "Cannot access global variable ROUND_MAGIC" in row["error"]
    assert len(row["error"].splitlines()) <= 18


def test_fine_kernel_compiles_with_resources(fixture_rows):
    row = fixture_rows["w8a8_fine.py"]
    assert row["ok"] and row["status"] == "ok" and row["launchable"], row
    assert isinstance(row["registers"], int) and 0 < row["registers"] <= 255
    assert row["spills"] == 0 and isinstance(row["shared_bytes"], int)
    assert row["line"] == _line_of("w8a8_fine.py", "def w8a8_kernel")
    assert row["variant"] == "BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=3"


def test_unsupported_construct_names_its_line(fixture_rows):
    row = fixture_rows["break_in_loop.py"]
    assert not row["ok"] and row["status"] == "error"
    where = _line_of("break_in_loop.py", "            break")
    assert row["error"].startswith(f'File "break_in_loop.py", line {where}, in row_sum_kernel'), row["error"]
    assert "Break" in row["error"]


def test_too_much_shared_memory_is_not_launchable(fixture_rows):
    row = fixture_rows["big_tiles.py"]
    assert row["ok"] and row["launchable"] is False, row
    assert row["shared_bytes"] > 232448
    assert re.search(r"needs \d+ KiB .* of shared memory; the target allows 227 KiB", row["why_not"])


def test_autotune_and_heuristics_compile_what_launched(fixture_rows):
    rows = fixture_rows["autotuned.py"]
    assert [r["variant"] for r in rows] == ["BLOCK=128, EVEN=False, num_warps=2, num_stages=3",
                                           "BLOCK=128, EVEN=True, num_warps=2, num_stages=3"]
    assert all(r["ok"] and r["launchable"] and r["registers"] for r in rows), rows


def test_reference_solutions_compile(launches, tmp_path):
    """A handful of the reference's launches on CPU test shapes: all compile and launch."""
    import solutions

    check = cc.CompileCheck()
    launches.on_launch = check.record
    try:
        solutions.w8a8_mm(*problem("w8a8", (1, 96, 128), 1)[0])
        solutions.w4a16_mm(*problem("w4a16", (33, 64, 128), 1)[0])
        solutions.dds_mm(*problem("dds", (17, 128, 128), 1, density=0.5)[0])
    finally:
        launches.on_launch = None
    rows = check.check(budget_s=NO_BUDGET, cache_dir=str(tmp_path))
    assert {r["kernel"] for r in rows} >= {"_quantize_rows_kernel", "_w8a8_gemm_kernel", "_w4a16_kernel"}
    for row in rows:
        assert row["ok"] and row["checked"] and row["launchable"], row
        assert isinstance(row["registers"], int) and row["file"] in ("w8a8.py", "w4a16.py", "dds.py")
    again = check.check(budget_s=NO_BUDGET, cache_dir=str(tmp_path))  # a later run of the same sources
    assert [r["registers"] for r in again] == [r["registers"] for r in rows]
    assert all("from the compile cache" in r["note"] for r in again)


@pytest.mark.parametrize("task,shape,options", [
    ("w8a8", (5, 96, 128), {}),
    ("w4a16", (5, 96, 128), {}),                     # one scale per channel
    ("w4a16", (5, 96, 128), {"group_size": 32}),     # group-wise
    ("dds", (5, 128, 128), {"density": 0.5}),
])
def test_every_declared_config_compiles_for_sm90(task, shape, options, launches, tmp_path, monkeypatch):
    """Every config the reference declares (CONFIGS in solutions/<task>.py), forced
    on a small shape in the interpreter, compiles for sm_90 and fits its limits
    (a register spill is a warning, as on the GPU). A config that asks for PDL
    launches without it in the interpreter: its kernels are compiled as the GPU
    launches them too (PDL=True, launch_pdl). The configs are checked a batch at
    a time: one check compiles at most cc.MAX_VARIANTS variants (a grading
    reply's size), and a tuning space may declare more."""
    module = importlib.import_module(f"solutions.{task}")
    names = list(module.CONFIGS)
    batch = cc.MAX_VARIANTS // 2 - 2  # each config launches at most two kernels
    for start in range(0, len(names), batch):
        configs = [module.CONFIGS[n] for n in names[start:start + batch]]
        check = cc.CompileCheck()
        wants_pdl = False

        def record(fn, args, kwargs, result=None):
            check.record(fn, args, kwargs, result)
            if wants_pdl and "PDL" in kwargs:
                check.record(fn, args, {**kwargs, "PDL": True, "launch_pdl": True}, result)

        launches.on_launch = record
        try:
            for cfg in configs:
                monkeypatch.setattr(module, "FORCE_CONFIG", cfg)
                wants_pdl = cfg.kwargs.get("PDL", False)
                getattr(module, f"{task}_mm")(*problem(task, shape, 1, **options)[0])
        finally:
            launches.on_launch = None
        rows = check.check(budget_s=NO_BUDGET, cache_dir=str(tmp_path))
        assert not check.record_errors and len(rows) < cc.MAX_VARIANTS
        described = " | ".join(r["variant"] for r in rows)
        for cfg in configs:
            consts = [f"{k}={v!r}" for k, v in cfg.kwargs.items()]
            assert any(all(c in r["variant"] for c in consts) for r in rows), (consts, described)
        if any(cfg.kwargs.get("PDL") for cfg in configs):
            assert "PDL=True" in described
        for row in rows:
            assert row["ok"] and row["checked"] and row["launchable"], row


def test_check_never_raises(tmp_path, launches):
    """A compiler process that dies, a kernel that cannot be found, a budget that
    runs out and a broken launch become rows, not exceptions."""
    pkg = _stage(tmp_path, "student_crash", {"w8a8.py": "w8a8_fine.py"})
    text = (pkg / "w8a8.py").read_text()
    # Killed while it imports for compiling (TRITON_INTERPRET unset), fine in the interpreter.
    (pkg / "w8a8.py").write_text("import os, signal\nif os.environ.get('TRITON_INTERPRET') != '1':\n"
                                 "    os.kill(os.getpid(), signal.SIGKILL)\n" + text)
    check = cc.CompileCheck()
    launches.on_launch = check.record
    try:
        importlib.import_module("student_crash.w8a8").w8a8_mm(*problem("w8a8", (5, 32, 40), 3)[0])
    finally:
        launches.on_launch = None
    check.record(object(), (), {})  # not a kernel: ignored
    [row] = check.check(budget_s=NO_BUDGET)
    assert not row["ok"] and row["status"] == "internal"
    assert row["error"].startswith("compile check failed: the compiler process ended (signal SIGKILL)")

    check.variants[next(iter(check.variants))].module = "no_such_module_anywhere"
    [row] = check.check(budget_s=NO_BUDGET)
    assert row["status"] == "internal" and "ModuleNotFoundError" in row["error"]

    [row] = check.check(budget_s=0.01)
    assert row["ok"] and not row["checked"] and "time budget" in row["note"]


def test_unknown_launch_keyword_fails_as_on_the_gpu(tmp_path, launches):
    """The interpreter ignores a launch keyword it does not know; the GPU's launcher raises."""
    _stage(tmp_path, "student_kw", {"w8a8.py": "w8a8_fine.py"})
    kernel = importlib.import_module("student_kw.w8a8").w8a8_kernel
    x, w, sx, sw = problem("w8a8", (5, 32, 40), 3)[0]
    y = torch.empty((5, 32), dtype=torch.float16)
    check = cc.CompileCheck()
    launches.on_launch = check.record
    try:
        kernel[(1, 1)](x, w, sx, sw, y, 5, 32, 40, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                       y.stride(0), y.stride(1), BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, num_warp=4)
    finally:
        launches.on_launch = None
    [row] = check.check(budget_s=NO_BUDGET)
    assert not row["ok"] and row["status"] == "error" and row["launchable"] is False
    assert "Keyword argument num_warp was specified but unrecognised" in row["error"]


def test_gpu_launch_rows():
    """On a GPU the rows come from the real launches (a stand-in kernel here)."""
    class Kernel:
        n_regs, n_spills = 96, 0

        class metadata:
            shared, num_warps, num_stages = 65536, 4, 3

    def fn():
        pass

    check = cc.CompileCheck()
    kernel = Kernel()
    check.record(fn, (), {"grid": (1,), "warmup": False}, kernel)
    check.record(fn, (), {"grid": (1,), "warmup": False}, kernel)
    [row] = check.check()
    assert row["registers"] == 96 and row["shared_bytes"] == 65536 and row["launches"] == 2 and row["ok"]


def test_rows_fit_in_one_reply():
    """Thirty failing variants with long messages still make a small reply."""
    import json

    from grader.worker import compile_rows

    rows = [compile_rows._row(kernel="k", file="w8a8.py", line=i, error="File x\n" + "e" * 5000, note="n" * 5000)
            for i in range(compile_rows.MAX_VARIANTS + 2)]
    rows = compile_rows._fit(rows)
    assert len(json.dumps(rows)) <= compile_rows.MAX_JSON_BYTES
    assert all(r["error"].startswith("File x") for r in rows)


def test_grading_on_the_cpu_fails_a_kernel_the_gpu_compiler_rejects(tmp_path):
    """End to end: the interpreter accepts the module-global constant, the CPU
    grade still fails W8A8, naming the file, the line and the global."""
    from tests.fakes import grade_files

    src = (Path(__file__).parents[1] / "fixtures" / "compile" / "w8a8_global.py").read_text()
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    tests = [t for t in result.tests if t.kind == "correctness"]
    assert tests and all(t.score == 0 for t in tests)
    msg = tests[0].message
    # The CPU grade runs a kernel only once the GPU's compiler accepted it (grader/worker/gate.py).
    assert msg.startswith("does not compile for the GPU"), msg
    assert "w8a8.py" in msg and "line" in msg and "ROUND_MAGIC" in msg
    fine = src.replace("ROUND_MAGIC: tl.constexpr = 12582912.0", "ROUND_MAGIC = tl.constexpr(12582912.0)")
    assert fine != src
    (tmp_path / "fine").mkdir()
    ok = grade_files(tmp_path / "fine", {"w8a8": fine}, ["w8a8"])
    assert all(t.status == "passed" for t in ok.tests if t.kind == "correctness")
