"""The CPU boundary graded end to end (docs/integrity.md, "On the CPU the host never holds the
values"): honest idioms pass with full correctness and no flag, every autotune config is
checked, and the attacks that need the values on the host, or host code beside them, get
nothing. Each grade uses the small rubric of tests/fakes.py (two cases per task).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes import by_name, correctness, grade_files

pytestmark = pytest.mark.slow   # every test grades in the interpreter

ROOT = Path(__file__).resolve().parents[2]
IDIOMS = ROOT / "tests" / "idioms"
SUBMISSIONS = ROOT / "tests" / "fixtures" / "submissions"
CORPUS = sorted(p.stem for p in IDIOMS.glob("*_*.py") if p.stem.split("_")[0] in ("w8a8", "w4a16", "dds"))


def _grade_one(tmp_path, task: str, path: Path, **kw):
    tmp_path.mkdir(parents=True, exist_ok=True)
    return grade_files(tmp_path, {task: path.read_text()}, [task], **kw)


def _flags(result, task: str) -> list:
    (t,) = [t for t in result.tasks if t.task == task]
    return list(t.flags)


HONEST_CONSTRUCTS = sorted((ROOT / "tests" / "fixtures" / "honest_constructs").glob("*_*.py"))


@pytest.mark.parametrize("path", HONEST_CONSTRUCTS, ids=lambda p: p.stem)
def test_honest_constructs_pass(tmp_path, path):
    """Kernels the boundary once failed (tests/fixtures/honest_constructs/README.md): full correctness."""
    task = path.stem.split("_")[0]
    result = _grade_one(tmp_path, task, path)
    assert correctness(result, task) == 4, [t.message for t in result.tests if t.task == task]
    assert not _flags(result, task)


@pytest.mark.parametrize("name", CORPUS)
def test_the_idiom_corpus_passes_through_the_grader(tmp_path, name):
    """Block pointers, tensor descriptors, autotune (both forms, every config), heuristics, helpers,
    split-K atomics, persistent kernels: full correctness, no flag, no static finding."""
    task = name.split("_")[0]
    result = _grade_one(tmp_path, task, IDIOMS / f"{name}.py")
    assert correctness(result, task) == 4, [t.message for t in result.tests if t.task == task]
    assert not _flags(result, task)
    if "autotune" in name:   # the report says every config was checked
        assert all("every autotune config checked" in t.message for t in result.tests
                   if t.task == task and t.kind == "correctness"), [t.message for t in result.tests]


def test_every_autotune_config_is_checked_on_the_cpu(tmp_path):
    """A quantize launch whose grid is right for one config only: the CPU runs every config, each
    in memory of its own, so the broken one fails and the message names it."""
    fresh = _grade_one(tmp_path / "fresh", "w8a8", SUBMISSIONS / "w8a8_autotune_fresh_workspace.py")
    stale = _grade_one(tmp_path / "stale", "w8a8", SUBMISSIONS / "w8a8_autotune_stale_workspace.py")
    for result in (fresh, stale):
        failed = [t for t in result.tests if t.task == "w8a8" and t.kind == "correctness" and t.status != "passed"]
        assert failed, "the config whose grid misses rows passed"
        assert any("with autotune config" in t.message and "BLOCK_M=16" in t.message for t in failed), \
            [t.message for t in failed]


@pytest.mark.parametrize("attack", [
    "w8a8_host_numpy_product",             # issue 40 item 5: the product in numpy, rebuilt with tl.where
    "w8a8_values_from_error_text",         # issue 40 item 6: values read from an interpreter error's text
    "w8a8_interpret_env_branch_numpy",     # a constexpr global read from TRITON_INTERPRET chooses the branch
    "w8a8_hasattr_branch_numpy",           # hasattr(x.handle, "data"): True in the interpreter only
    "w8a8_ctypes_runs_python_in_executor",  # numpy's ctypes from an interpreter-only branch runs any Python
    "w8a8_patches_executor",               # module code patching the executor (static check off)
    # Red team, round 2: the interpreter re-read the kernel's text from a `def` inside a string; the
    # same with imports beside the inputs; `tl.constexpr(B) is B`, True compiled, False interpreted.
    "redteam2_interpreter_reparses_source",
    "redteam2_interpreter_source_imports_in_executor",
    "redteam2_constexpr_is_branch_python_product",
    # Red team, round 3: a branch the compiler decided at compile time, taken the other way in the
    # interpreter (an argument equal to 1, a constexpr annotation spelled so that only the compiler
    # reads it, `x or 2`, `tl.constexpr(None) is None`), its side a product in Python integers.
    "redteam3_one_specialized_branch",
    "redteam3_annotation_constexpr_branch",
    "redteam3_or_constexpr_shortcircuit_branch",
    "redteam3_constexpr_none_global_branch",
    # Red team, round 4: parts of a statement the compiler never reads (a comprehension's `if`, an
    # assertion's message, an f-string's format) evaluated by the interpreter; a second helper of the
    # same name, one function to the compiler and two to the interpreter.
    "redteam4_comprehension_ifs",
    "redteam4_static_assert_message",
    "redteam4_fstring_format_spec",
    "redteam4_same_name_helper",
    # Red team, round 5: a combine function of tl.reduce / tl.associative_scan, which the interpreter
    # called uninstrumented; names the compiler and Python bind differently (a comprehension's
    # variable, a name first set in a loop, a list changed in place through another name); code after
    # a compile-time return, visited by the compiler but dead on the GPU.
    "redteam5_reduce_combine_python",
    "redteam5_scan_combine_python",
    "redteam5_comprehension_target_leak",
    "redteam5_comprehension_target_leak_dot",
    "redteam5_loop_scope_global_fallback",
    "redteam5_alias_list_augassign",
    "redteam5_dead_code_after_static_return",
    # Red team, round 6: compile-time values the two compute differently (a comprehension's `if`,
    # `is None` on a constexpr, an f-string of a constexpr, a list comprehension against a tuple),
    # used as a loop's trip count or a store's mask rather than at an `if`.
    "redteam6_compif_const_trip",
    "redteam6_isnone_trip",
    "redteam6_fstring_constexpr_repr",
    "redteam6_fstring_mask_dataflow",
    "redteam6_listcomp_vs_tuple_mask",
    # Red team, round 7: `is None` on a constexpr hidden behind another context's record (a static_range
    # iteration, a second specialization of a helper); a negative run-time loop step (no trip on the GPU);
    # tl.minimum on a NaN (minNum on the GPU, numpy's NaN-propagating minimum in the interpreter).
    "redteam7_static_range_isnone_union",
    "redteam7_helper_two_specializations_isnone",
    "redteam7_runtime_negative_step",
    "redteam7_minnum_nan_fingerprint",
    # Red team, round 8: a Python number where the compiler had an i32 tensor (a loop index under `%`,
    # names bound by unpacking under `//`); a loop's variable read after the loop (undefined on the
    # GPU); NaN made an int (numpy's INT_MIN, the GPU's 0); split-K without atomics in a 20 MiB
    # buffer and through a view of wider elements, past the race record's first limits.
    "redteam8_loop_index_python_modulo",
    "redteam8_unpacked_python_floordiv",
    "redteam8_loop_variable_after_the_loop",
    "redteam8_nan_to_int",
    "redteam8_race_in_a_big_buffer",
    "redteam8_race_through_a_wider_view",
    # Red team, round 9: split-K without atomics hidden behind a masked-off lane of 1e30 (the race
    # record's float tolerance was a share of the tile's largest value), behind an atomic that never
    # runs, and through the call's input x (a channel the record did not watch).
    "redteam9_race_hidden_by_masked_lane_scale",
    "redteam9_race_behind_dead_atomic",
    "redteam9_race_through_input_memory",
])
def test_host_code_beside_the_values_gets_nothing(tmp_path, attack):
    """Each computed the product in numpy or torch inside the executor and got full marks against
    the first version of the shape-only design; the executor now builds the file's kernels alone and
    never runs its host code, and the static check refuses the in-kernel tricks."""
    # With the static check off: the boundary alone must hold (the static check can only refuse more).
    result = _grade_one(tmp_path, "w8a8", SUBMISSIONS / f"{attack}.py", static=False)
    assert correctness(result, "w8a8") == 0, [t.message for t in result.tests]


def test_programs_that_read_each_others_stores_without_atomics_get_nothing(tmp_path):
    """The interpreter runs a launch's programs one after another, so a split-K that adds its
    partial tiles with a plain load and store is right there and races on a GPU. The race
    record (worker/races.py) fails it, and the message names the kernel and the programs."""
    result = _grade_one(tmp_path, "w8a8", SUBMISSIONS / "redteam7_sequential_programs_split_k.py", static=False)
    assert correctness(result, "w8a8") == 0, [t.message for t in result.tests]
    message = by_name(result)["w8a8/c0"].message
    assert "the output is right in the interpreter" in message and "with no atomic" in message, message


def test_an_honest_print_at_import_costs_nothing(tmp_path):
    """The gate answers on a pipe of its own and never imports the file: a print at import is
    harmless (it made the first version of the gate refuse every launch)."""
    result = _grade_one(tmp_path, "w8a8", SUBMISSIONS / "w8a8_honest_print_at_import.py")
    assert correctness(result, "w8a8") == 4, [t.message for t in result.tests]
    assert by_name(result)["w8a8/c0"].status == "passed"


def test_a_kernel_held_back_from_the_cpu_run_is_named_with_its_line(tmp_path):
    """A kernel that kernels_only refuses (here `BLOCK_M is 1`, which the compiler and the
    interpreter answer differently) fails its task with the reason and the line, not with the
    executor's death."""
    from tests.fakes import SOLUTION
    lines = SOLUTION["w8a8"].splitlines()
    at = next(i for i, line in enumerate(lines) if "tl.program_id" in line)
    indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
    lines[at:at] = [f"{indent}if BLOCK_M is 1:", f"{indent}    pass"]
    result = grade_files(tmp_path, {"w8a8": "\n".join(lines) + "\n"}, ["w8a8"])
    for test in [t for t in result.tests if t.kind == "correctness"]:
        assert test.score == 0 and "could not be loaded to run on the CPU" in test.message, test.message
        assert f"(line {at + 1}) uses `is`" in test.message, test.message
