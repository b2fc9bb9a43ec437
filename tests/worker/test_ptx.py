"""What the PTX reader (grader/worker/ptx.py) finds in the code Triton emits for sm_90:
the widths of global loads, asynchronous copies, register-staged shared stores, the
passes a warp's memory instructions cost the load/store unit (from the lanes' own
addresses), natural loops however the blocks are laid out, and serial instructions
named for what they are. Kernels are compiled with the installed Triton (the pinned
grading compiler) for sm_90, in a child process as the compile check does; no GPU
is needed."""

import importlib
import shutil
from pathlib import Path

import pytest

from grader.worker import ptx, ptx_lanes, ptx_parse
from tests.helpers import HAS_CUDA, compile_ptx, problem

ROOT = Path(__file__).resolve().parents[2]
ROWS_SIG = {"x_ptr": "*fp16", "y_ptr": "*fp32", "N": "i32", "stride": "i32", "BLOCK_M": "constexpr",
            "BLOCK_N": "constexpr"}


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """rows_kernel with a 16-divisible row stride, and with one the compiler cannot prove aligned."""
    out = tmp_path_factory.mktemp("ptx")
    tiles = {"BLOCK_M": 64, "BLOCK_N": 64}
    return (compile_ptx(out / "aligned.ptx", "ptx_kernels", "rows_kernel", ROWS_SIG, tiles, (0, 1, 3), num_warps=4),
            compile_ptx(out / "unaligned.ptx", "ptx_kernels", "rows_kernel", ROWS_SIG, tiles, (0, 1), num_warps=4))


def test_a_contiguous_tile_is_read_in_16_byte_vectors_four_lines_a_warp(rows):
    loop = ptx.read(rows[0])
    assert loop["loads"] > 0 and loop["load_widths"] == {"16": loop["loads"]}
    assert loop["lanes_known"] == 1.0 and loop["async_loads"] == 0 and loop["staged"] == 0
    # 32 lanes x 16 bytes, 8 lanes to a 128-byte row: 4 lines a load instruction.
    assert loop["wavefronts"] == 4 * loop["loads"]


def test_a_tile_the_compiler_cannot_vectorize_is_read_element_by_element(rows):
    """A row stride not known to be 16-divisible: the compiler cannot prove a row's start
    aligned and loads each 2-byte element alone. The same bytes a thread, 8 times the
    loads; the lanes still sit side by side along a row (16 to a row, 4 elements each),
    so each load touches only the 2 rows' lines of its warp: 4 times a vector's passes
    in all, not 32."""
    vector, scalar = ptx.read(rows[0]), ptx.read(rows[1])
    assert scalar["load_bytes"] == vector["load_bytes"]
    assert set(scalar["load_widths"]) == {"2"} and scalar["loads"] == 8 * vector["loads"]
    assert scalar["wavefronts"] == 2 * scalar["loads"] == 4 * vector["wavefronts"]
    assert scalar["instructions"] > vector["instructions"]


def test_narrow_loads_are_named_by_the_source_line_they_were_compiled_from(rows):
    """The report names the tl.load a slow load came from: the PTX's .loc lines give each
    2-byte load the kernel's line (ptx_kernels.py line 14, the loop's tl.load); 16-byte
    vector loads are not listed."""
    vector, scalar = ptx.read(rows[0]), ptx.read(rows[1])
    assert scalar["narrow_loads"] == {"ptx_kernels.py:14": scalar["loads"]}
    assert vector["narrow_loads"] == {}
    src = (ROOT / "tests" / "fixtures" / "compile" / "ptx_kernels.py").read_text().splitlines()
    assert "tl.load(" in src[14 - 1]


def test_the_gathered_dds_fixture_loads_every_element_alone(tmp_path):
    """tests/fixtures/slow/gathered: Triton 3.6 emits 80 scalar 2-byte global loads a thread
    and loop trip, no asynchronous copy, stages them in shared memory through registers,
    and its 64 loads of x put each lane in its own row: 32 passes each."""
    pkg = tmp_path / "gathered_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copyfile(ROOT / "assignment" / "utils.py", pkg / "utils.py")
    shutil.copyfile(ROOT / "tests" / "fixtures" / "slow" / "gathered" / "dds.py", pkg / "dds.py")
    sig = {"x_ptr": "*fp16", "values_ptr": "*fp16", "crow_ptr": "*i64", "col_ptr": "*i64", "y_ptr": "*fp16",
           "M": "i32", "stride_xm": "i32", "stride_xk": "constexpr", "stride_ym": "i32", "stride_yn": "constexpr",
           "BLOCK_M": "constexpr", "BLOCK": "constexpr", "GROUP": "constexpr"}
    text = compile_ptx(tmp_path / "gathered.ptx", "gathered_pkg.dds", "_dds_kernel", sig,
                    {"stride_xk": 1, "stride_yn": 1, "BLOCK_M": 128, "BLOCK": 32, "GROUP": 2},
                    (0, 1, 2, 3, 4, 6, 8), path=tmp_path, num_warps=4, num_stages=3)
    loop = ptx.read(text)
    assert loop["load_widths"].get("2") == 80 and loop["async_loads"] == 0 and loop["tma"] == 0
    assert loop["staged"] == 80 and loop["wgmma"] > 0
    assert loop["wavefronts"] >= 64 * 32 and loop["lanes_known"] == 1.0


@pytest.mark.skipif(HAS_CUDA, reason="records what the CPU interpreter launched")
def test_the_compile_check_rows_carry_what_the_ptx_says(tmp_path, monkeypatch):
    """Through the compile check itself (its child compiles, ptx.py reads): the reference
    DDS copies its tiles asynchronously in 16-byte pieces, and its rows say so."""
    import triton.runtime.interpreter as interpreter
    import triton.runtime.jit as jit

    from grader.worker import compile as cc
    from grader.worker.evidence import LaunchRecorder

    pkg = tmp_path / "ref_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copyfile(ROOT / "assignment" / "utils.py", pkg / "utils.py")
    shutil.copyfile(ROOT / "solutions" / "dds.py", pkg / "dds.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = {cls: cls.run for cls in (jit.JITFunction, interpreter.InterpretedFunction)}
    rec = LaunchRecorder(own_prefix="")
    rec.install()
    check = cc.CompileCheck()
    rec.on_launch = check.record
    try:
        args, _ = problem("dds", (64, 128, 256), 3)
        importlib.import_module("ref_pkg.dds").dds_mm(*args)
    finally:
        for cls, run in saved.items():
            cls.run = run
    rows = [r for r in check.check(budget_s=24 * 3600, root=str(pkg)) if r["ok"]]
    assert rows
    for row in rows:
        loop = row["loop"]
        assert loop["async_loads"] > 0 and set(loop["async_widths"]) == {"16"}, row["variant"]
        assert not any(int(w) < 8 for w in loop["load_widths"]) and loop["staged"] == 0   # indices only


def test_integer_division_by_a_run_time_value_is_named_as_such(tmp_path):
    grouped = ptx.read(compile_ptx(tmp_path / "grouped.ptx", "ptx_kernels", "grouped_kernel",
                                {"x_ptr": "*fp32", "s_ptr": "*fp32", "y_ptr": "*fp32", "K": "i32", "group": "i32",
                                 "BLOCK": "constexpr"}, {"BLOCK": 128}, (0, 1, 2)))
    assert grouped["serial"] >= 1 and set(grouped["serial_kinds"]) == {"integer division"}
    assert grouped["top"][0][0] == "integer divisions"   # 20 issue slots each: the trip's heaviest kind
    ratio = ptx.read(compile_ptx(tmp_path / "ratio.ptx", "ptx_kernels", "ratio_kernel",
                              {"x_ptr": "*fp32", "y_ptr": "*fp32", "K": "i32", "BLOCK": "constexpr"},
                              {"BLOCK": 128}, (0, 1)))
    assert set(ratio["serial_kinds"]) == {"correctly rounded float division"}


# ----------------------------------------------------------------------------- hand-written PTX

def _kernel(body: str) -> str:
    return (".version 8.7\n.target sm_90a\n.visible .entry k(\n\t.param .u64 .ptr .global .align 1 k_param_0\n)\n"
            f"{{\n{body}\n}}\n")


def test_a_loop_whose_latch_is_laid_out_before_its_header_is_found():
    """A natural loop, not a backward branch: here the latch sits above the header, and
    the branch from the latch to the header goes forward in the text."""
    loop = ptx.read(_kernel("""
\tld.param.b64 \t%rd1, [k_param_0];
\tmov.u32 \t%r1, %tid.x;
\tmov.b32 \t%r2, 0;
\tbra.uni \t$L__BB0_2;
$L__BB0_1:
\tadd.s32 \t%r2, %r2, 1;
\tsetp.lt.s32 \t%p1, %r2, 10;
\t@%p1 bra \t$L__BB0_2;
\tbra.uni \t$L__BB0_3;
$L__BB0_2:
\tmul.wide.u32 \t%rd2, %r1, 4;
\tadd.s64 \t%rd3, %rd1, %rd2;
\tld.global.b32 \t{ %r3 }, [ %rd3 + 0 ];
\tbra.uni \t$L__BB0_1;
$L__BB0_3:
\tret;"""))
    assert loop["loops"] == 1 and loop["loads"] == 1 and loop["load_widths"] == {"4": 1}
    assert loop["instructions"] == 5          # mul, add, ld; add, setp
    assert loop["wavefronts"] == 1            # 32 adjacent lanes x 4 bytes: one line


def test_bank_conflicts_cost_passes_and_unknown_lanes_count_as_contiguous():
    text = _kernel("""
\tmov.u32 \t%r1, %tid.x;
\tshl.b32 \t%r2, %r1, 2;
\tst.shared.b32 \t[%r2], %r1;
\tshl.b32 \t%r3, %r1, 7;
\tst.shared.b32 \t[%r3], %r1;
\tld.param.b64 \t%rd1, [k_param_0];
\tld.global.b64 \t{ %rd2 }, [ %rd1 + 0 ];
\tadd.f32 \t%r4, %r1, %r1;
\tcvt.rzi.s32.f32 \t%r5, %r4;
\tmul.wide.s32 \t%rd3, %r5, 4096;
\tadd.s64 \t%rd4, %rd1, %rd3;
\tld.global.v4.b32 \t{ %r6, %r7, %r8, %r9 }, [ %rd4 + 0 ];""")
    lines = text.splitlines()
    code = [ptx_parse._parse(x) for x in lines]
    lanes = ptx_lanes._Lanes(code, ptx_lanes._params(lines)).run([i for i, c in enumerate(code) if c])
    assert [lanes.cost[i] for i in sorted(lanes.cost)] == [
        (1, 1),     # 32 words in 32 banks
        (32, 1),    # a 128-byte stride: every lane in bank 0, 32 passes
        (1, 1),     # one pointer for every lane: one line
        (4, 0)]     # an address computed from a float: unknown, priced as 512 contiguous bytes


def test_the_harness_keeps_what_the_reader_reports_and_drops_the_rest(rows):
    """The worker is untrusted: the harness type-checks its compile rows. Everything the
    reader reports survives that check; anything else in ``loop`` is dropped."""
    from grader.harness.session import _compile_row

    loop = ptx.read(rows[1])
    assert _compile_row({"loop": loop})["loop"] == loop
    forged = {**loop, "wavefronts": -1, "load_widths": {"2": "many", "16": 4}, "top": [["x", True], "y"],
              "extra": 5}
    kept = _compile_row({"loop": forged})["loop"]
    assert "wavefronts" not in kept and "extra" not in kept
    assert kept["load_widths"] == {"16": 4} and kept["top"] == []
