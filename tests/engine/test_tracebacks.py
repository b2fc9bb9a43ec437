"""Failures point at the student's own file and line, whatever wrapped the error."""

from pathlib import Path

import pytest

from grader.tracebacks import KNOWN_ERRORS, explain_error, final_exception, known_error
from tests.fakes import by_name, grade_files

FIXTURES = Path(__file__).parents[1] / "fixtures" / "student"

CHAINED = '''Traceback (most recent call last):
  File "/venv/triton/runtime/interpreter.py", line 1511, in __call__
    self.fn(**args)
  File "/tmp/grade-1/stage/submission/w8a8.py", line 11, in _k
    y = tl.extra.cuda.libdevice.rint(x)
        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/triton/language/core.py", line 42, in wrapper
    raise ValueError("Did you forget to add @triton.jit ?")
ValueError: Did you forget to add @triton.jit ?

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/tmp/grade-1/stage/_grader_worker/main.py", line 81, in call
    y = self.fn(*args)
  File "/tmp/grade-1/stage/submission/w8a8.py", line 18, in w8a8_mm
    _k[(1,)](x, y, M * N, BLOCK=64)
  File "/venv/triton/runtime/interpreter.py", line 1515, in __call__
    raise InterpreterError(repr(e)) from e
triton.runtime.errors.InterpreterError: ValueError('Did you forget to add @triton.jit ?')
'''

SYNTAX = '''Traceback (most recent call last):
  File "/tmp/grade-1/stage/_grader_worker/main.py", line 160, in main
    fn = getattr(importlib.import_module(f"{package}.{module_name}"), entry)
  File "<frozen importlib._bootstrap>", line 1204, in _gcd_import
  File "/tmp/grade-1/stage/submission/w4a16.py", line 7
    def w4a16_mm(x:
                ^
SyntaxError: '(' was never closed
'''


def test_root_cause_in_the_kernel_wins_over_the_launch_site():
    text = explain_error(CHAINED)
    assert text.splitlines()[0] == "w8a8.py, line 11, in _k:"
    assert "libdevice.rint(x)" in text and text.endswith("ValueError: Did you forget to add @triton.jit ?")
    assert "interpreter.py" not in text


def test_syntax_error_keeps_line_and_caret():
    text = explain_error(SYNTAX)
    assert text.splitlines()[0] == "w4a16.py, line 7:"
    assert "def w4a16_mm(x:" in text and "^" in text and text.endswith("SyntaxError: '(' was never closed")


def test_no_frame_of_the_submission_falls_back_to_the_last_lines():
    assert explain_error("Traceback (most recent call last):\nRuntimeError: boom") .endswith("RuntimeError: boom")
    assert explain_error("") == "(no error text)"


@pytest.mark.slow
def test_interpreter_error_reaches_the_report_as_the_students_line(tmp_path):
    src = (FIXTURES / "w8a8_libdevice_error.py").read_text()
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    msg = by_name(result)["w8a8/c0"].message
    assert "w8a8.py, line 11, in _k:" in msg and "libdevice.rint" in msg
    # The GPU's compiler refuses rint on float16 (libdevice has no such function), before anything runs.
    assert msg.startswith("does not compile for the GPU: KeyError"), msg
    # On float32 it compiles, and then the interpreter cannot run it; Triton's own words there
    # ("Did you forget to add @triton.jit ?") point the wrong way.
    fp32 = src.replace("rint(x)", "rint(x.to(tl.float32))")
    msg = by_name(grade_files(tmp_path / "fp32", {"w8a8": fp32}, ["w8a8"]))["w8a8/c0"].message
    assert "w8a8.py, line 11, in _k:" in msg and "libdevice.rint" in msg
    assert "libdevice (tl.extra.cuda.libdevice) does not run in Triton's CPU interpreter" in msg


def test_errors_whose_words_mislead_get_a_likely_cause():
    assert "libdevice" in known_error(CHAINED) and "Rounding" in known_error(CHAINED)
    other_extern = CHAINED.replace("libdevice.rint", "gdc_wait").replace("libdevice", "")
    assert "exists only in compiled code" in known_error(other_extern)
    compiled = 'File "/venv/triton/runtime/jit.py", line 142\nRuntimeError: Unsupported function referenced: ' \
               "<function _round at 0x7f0f3ead8540>"
    assert "needs @triton.jit on every function a kernel calls" in known_error(compiled)
    cached = ('NameError("Cannot access global variable _round from within @jit\'ed function. Triton kernels '
              'can only access global variables that are instanstiated as constexpr")')
    assert "put @triton.jit on a helper function" in known_error(cached)
    assert known_error(SYNTAX) is None and known_error("KeyError: 'no such key'") is None


FAITHFUL = (Path(__file__).parents[1] / "variants" / "w8a8_faithful_div_rn.py").read_text()


@pytest.mark.slow
def test_a_helper_without_jit_passes_the_interpreter_and_is_named_by_the_compile_check(tmp_path):
    # The interpreter runs a plain Python helper inside a kernel; the compiler refuses it.
    helper = "def _round_half_even(v):\n    return (v + _MAGIC) - _MAGIC\n\n\n@triton.jit\ndef _w8a8_kernel("
    src = FAITHFUL.replace("@triton.jit\ndef _w8a8_kernel(", helper, 1) \
                  .replace("q = ((v + _MAGIC) - _MAGIC).to(tl.int8)", "q = _round_half_even(v).to(tl.int8)")
    assert src.count("_round_half_even") == 2
    # The static check names it first, with the fix.
    task = grade_files(tmp_path, {"w8a8": src}, ["w8a8"]).tasks[0]
    assert task.score == 0 and "make _round_half_even a @triton.jit function or inline it" in task.flags[0]["detail"]
    # Without it, the CPU grade still runs only kernels that the GPU's compiler accepts: refused, not run.
    result = grade_files(tmp_path / "no_static", {"w8a8": src}, ["w8a8"], static=False)
    msg = by_name(result)["w8a8/c0"].message
    assert msg.startswith("does not compile for the GPU: NameError: _round_half_even is not defined"), msg
    assert "w8a8.py, line" in msg and "_round_half_even(v)" in msg
    assert "needs @triton.jit on every function a kernel calls" in msg


def test_final_exception_names_the_root_cause_in_one_line():
    # The report's table shows only the verdict's first line: it must name the error.
    assert final_exception(CHAINED) == "ValueError: Did you forget to add @triton.jit ?"
    assert final_exception(SYNTAX) == "SyntaxError: '(' was never closed"
    assert final_exception("") == "(no error text)"


@pytest.mark.slow
def test_the_first_line_of_an_error_verdict_names_the_exception(tmp_path):
    # The report's table shows a verdict's first line only.
    src = "import torch\n\n\ndef dds_mm(x, w_bsr):\n    return {}['no such key']\n"
    result = grade_files(tmp_path, {"dds": src}, ["dds"])
    tests = [t for t in result.tests if t.kind == "correctness"]
    assert tests and all(t.score == 0 for t in tests)
    for t in tests:
        assert t.message.splitlines()[0] == "raised KeyError: 'no such key'", t.message


def test_the_troubleshooting_table_quotes_every_known_error():
    table = (Path(__file__).parents[2] / "troubleshooting.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| likely cause:")]
    for _, hint in KNOWN_ERRORS:
        assert any(line.startswith(f"| {hint} |") for line in rows), hint


def test_the_graders_own_refusals_are_named_by_their_class_alone():
    text = ("Traceback (most recent call last):\n  File \"/w/submission/w8a8.py\", line 9, in w8a8_mm\n"
            "    y = x * 2\n_grader_worker.shapes.HostComputeRefused: torch op 'mul' computes on the host: ...")
    assert final_exception(text) == "HostComputeRefused: torch op 'mul' computes on the host: ..."
    assert explain_error(text).startswith("w8a8.py, line 9, in w8a8_mm:\n    y = x * 2\nHostComputeRefused")
