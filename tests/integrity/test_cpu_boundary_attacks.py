"""Every red team's attack on the CPU boundary graded end to end: each gets no correctness points
(docs/integrity.md). Split from test_cpu_boundary.py so that the suite's workers share the grades.
"""

from __future__ import annotations

import pytest

from tests.fakes import correctness
from tests.integrity.test_cpu_boundary import SUBMISSIONS, _grade_one

pytestmark = pytest.mark.slow   # every test grades in the interpreter

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
    # ... and an int8 made of a float out of its range, which the GPU reads as 16 bits (it now has no
    # fixed value in the interpreter).
    "redteam9_int8_cast_keeps_16_bits",
])
def test_host_code_beside_the_values_gets_nothing(tmp_path, attack):
    """Each computed the product in numpy or torch inside the executor and got full marks against
    the first version of the shape-only design; the executor now builds the file's kernels alone and
    never runs its host code, and the static check refuses the in-kernel tricks."""
    # With the static check off: the boundary alone must hold (the static check can only refuse more).
    result = _grade_one(tmp_path, "w8a8", SUBMISSIONS / f"{attack}.py", static=False)
    assert correctness(result, "w8a8") == 0, [t.message for t in result.tests]


def test_a_loop_index_is_the_compilers_type(tmp_path):
    """Red team round 9: a DDS kernel used a block only where `i + 2**31 < 0` for its loop index,
    true where the interpreter made the index int32 and wrapped, never on the GPU, whose index is
    int64 like the CSR's int64 bounds (y = 0 there). The index now has the compiler's type."""
    result = _grade_one(tmp_path, "dds", SUBMISSIONS / "redteam9_int64_loop_index_as_int32.py", static=False)
    assert correctness(result, "dds") == 0, [t.message for t in result.tests]
