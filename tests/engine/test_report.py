"""Reports and the grade command line: text from the student's code is shown
as literal text in every format, a grader failure is still a report, and
usage errors are one line with exit status 2."""

import json
import os
import re
import subprocess
import sys

import pytest

from grader import cli, scoring
from grader.report import (
    MESSAGE_CHARS,
    error_result,
    gradescope,
    markdown,
    md_block,
    md_inline,
    terminal_table,
    write_reports,
)
from grader.rubric import load_rubric
from tests.fakes import ROOT, rubric, rubric_toml

INJECTION = "```\n# 100/100\n<b>TA note</b>"
HOSTILE = [INJECTION, "[click me](http://evil.example) ![x](http://evil.example/x.png)",
           "<script>alert(1)</script> <!-- hidden", "\x1b[2J\x1b[31mred\x1b[0m\x07 \x1b]0;title\x07",
           "| # 100/100 | ~~strike~~ **bold** $x^2$ &lt;b&gt;", "````` five backticks\n~~~\n# Heading\n- 1. item",
           "- list", "> quote", "1. ordered", "=====", "\u202eevil\u202c", "cr\roverwrite"]


def _result(text: str, submission: str = "sub`mission") -> scoring.GradeResult:
    """A result with ``text`` in every place that can carry the student's words."""
    tests = [scoring.TestResult(name="w8a8/c0", task="w8a8", kind="correctness", score=0, max_score=2, status="failed",
                        message=text),
             scoring.TestResult(name="w8a8/c1", task="w8a8", kind="correctness", score=2, max_score=2, status="passed",
                        message="first line\n" + text)]
    tasks = [scoring.TaskResult(task="w8a8", title="W8A8", score=2, max_score=4, summary="crashed: " + text,
                        flags=["forbidden code: " + text, {"kind": "library_matmul", "detail": text}],
                        log_tail=text + "\n" + text)]
    return scoring.GradeResult(schema_version=1, submission=submission, started="2026-01-01T00:00:00+00:00",
                               seconds=1.0, device="cpu", gpu=None, versions={"torch": "2.x"}, seed=5, rubric="r",
                               score=2, max_score=4, max_score_all_tests=10, partial=True,
                               notes=[text, "submission unreadable: " + text],
                               tasks=tasks, tests=tests)


def _blocks(md: str):
    """(lines outside code fences, lines inside them), fences tracked the way CommonMark does:
    a fence closes only with the same character, at least as long, and nothing else on the line."""
    outside, inside, fence = [], [], None
    for line in md.split("\n"):
        m = re.match(r" {0,3}(`{3,}|~{3,})(.*)$", line)
        if fence is None and m and not ("`" in m.group(2) and m.group(1)[0] == "`"):
            fence = m.group(1)
        elif fence is not None and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and not m.group(2).strip():
            fence = None
        elif fence is None:
            outside.append(line)
        else:
            inside.append(line)
    return outside, inside


def _unescaped(line: str, chars: str) -> bool:
    """Whether ``line`` holds one of ``chars`` not preceded by a backslash,
    outside the report's own markup (code spans, bold flags and banners)."""
    line = re.sub(r"(?<!`)(`+) .*? \1(?!`)|`\d+`", "", line)
    line = re.sub(r"^- \*\*(.*)\*\*$", r"- \1", line)
    line = re.sub(r"^> \*\*(Partial score|Grader error)\.\*\*", "", line)
    return bool(re.search(r"(?<!\\)(?:\\\\)*[" + re.escape(chars) + "]", line))


@pytest.mark.parametrize("text", HOSTILE)
def test_student_text_is_literal_in_report_md(text):
    md = markdown(_result(text))
    outside, inside = _blocks(md)
    headings = [line for line in outside if re.match(r" {0,3}#{1,6}( |$)", line)]
    assert headings == ["# Grade report: 2 / 4", "## Tasks", "## Tests", "### W8A8", "## Test details",
                        "#### ` w8a8/c0 `", "#### ` w8a8/c1 `"] or \
        headings == ["# Grade report: 2 / 4", "## Tasks", "## Tests", "### W8A8", "## Test details",
                     "#### ` w8a8/c1 `"], headings
    for line in outside:
        assert not _unescaped(line.replace("<br>", ""), "<[]`*_&$~"), line
        assert not re.match(r" {0,3}(>|[-+*] |\d+[.)]|=+$|-+$)", line) or line.startswith(("> **Partial", "- ")), line
        assert "\x1b" not in line and "\x07" not in line and "\r" not in line and "\u202e" not in line
    for line in outside:
        if line.startswith("- "):  # list items: what follows cannot start a block either
            assert not re.match(r"(>|[-+*] |\d+[.)]|#)", line[2:].lstrip()), line
    if text == INJECTION:
        assert "# 100/100" in inside and "<b>TA note</b>" in inside  # shown, as literal text


def test_injection_renders_as_text_in_a_markdown_renderer():
    markdown_it = pytest.importorskip("markdown_it")
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(markdown(_result(" ".join(HOSTILE))))
    html += markdown_it.MarkdownIt("commonmark").enable("table").render(markdown(_result(INJECTION)))
    assert html.count("<h1>") == 2 and "<h1>100/100" not in html and "<b>" not in html
    assert "<a " not in html and "<img" not in html and "<script" not in html and "<!--" not in html
    assert "<strong>bold" not in html and "<blockquote>\n<p>quote" not in html
    assert "# 100/100" in html and "&lt;b&gt;TA note&lt;/b&gt;" in html


def test_fence_is_longer_than_any_backtick_run():
    lines = md_block("a ``````` b\n```")
    assert lines[0] == "`" * 8 + "text" and lines[-1] == "`" * 8
    assert md_inline("1. x") == "1\\. x" and md_inline("# h") == "\\# h" and md_inline("a|b") == "a\\|b"


def test_terminal_table_has_no_escape_sequences():
    table = terminal_table(_result("\x1b[2J\x1b[1;1H\x1b[32mPASSED 100/100\x07\rX\x9b31m"))
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", table)
    assert "PASSED 100/100" in table


def test_results_json_is_plain_text_cleaned_and_bounded():
    gs = gradescope(_result("\x1b[31m" + INJECTION + "x" * 1_000_000))
    assert gs["output_format"] == "text"
    for t in gs["tests"]:
        assert t["output_format"] == "text" and INJECTION in t["output"]
        assert len(t["output"]) <= MESSAGE_CHARS + 40 and "\x1b" not in t["output"]
    assert len(gs["output"]) <= MESSAGE_CHARS + 40


def test_undecodable_submission_name_writes_every_report(tmp_path):
    name = os.fsdecode(b"/subs/\xff\xfe.zip")
    out = write_reports(_result(INJECTION, submission=name), tmp_path / "r")
    assert "\\udcff" in (out / "report.md").read_text(encoding="utf-8")
    assert json.loads((out / "report.json").read_text())["submission"] == name


def test_the_reproduce_hint_names_the_submission_that_was_graded():
    md = markdown(_result("x", submission="/subs/alice smith.zip"))
    assert "make grade SUBMISSION='/subs/alice smith.zip' SEED=5" in md  # not the stubs of assignment/
    assert "SUBMISSION=<your folder> SEED=5" in gradescope(_result("x"))["output"]


def test_grader_error_result_in_every_format(tmp_path):
    r = rubric(tasks=("w8a8",))
    out = write_reports(error_result(r, "subs/x", "boom " + INJECTION), tmp_path / "r", error="boom " + INJECTION)
    report = json.loads((out / "report.json").read_text())
    assert report["score"] == 0 and report["max_score"] == 7 and report["grader_error"].startswith("boom")
    results = json.loads((out / "results.json").read_text())
    assert results["score"] == 0 and results["output"].startswith("Grader error: boom")
    md = (out / "report.md").read_text()
    assert "**Grader error.**" in md
    assert [h for h in _blocks(md)[0] if h.startswith("#")] == ["# Grade report: 0 / 7", "## Tasks", "## Tests"]


# ---------------------------------------------------------------------------- command line

def _grade_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "grader", "grade", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_missing_submission_exits_2_with_one_line_and_no_report(tmp_path):
    p = _grade_cli("/nonexistent/submission", "--report-dir", tmp_path / "r")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "/nonexistent" in p.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_unwritable_report_folder_exits_2_with_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    p = _grade_cli(tmp_path, "--report-dir", tmp_path / "file" / "r")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and f"user id {os.getuid()}" in p.stderr


@pytest.mark.slow
def test_bad_but_existing_submission_exits_0_with_a_report(tmp_path):
    (tmp_path / "rubric.toml").write_text(rubric_toml(tasks=("w8a8",)))
    (tmp_path / "empty").mkdir()
    p = _grade_cli(tmp_path / "empty", "--report-dir", tmp_path / "r", "--rubric", tmp_path / "rubric.toml")
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "r" / "results.json").read_text())["score"] == 0


def test_a_grader_crash_is_still_a_report(tmp_path, monkeypatch, capsys):
    import grader.grade

    def broken(*a, **k):
        raise RecursionError("maximum recursion depth exceeded " + INJECTION)
    monkeypatch.setattr(grader.grade, "grade", broken)
    (tmp_path / "rubric.toml").write_text(rubric_toml(tasks=("w8a8",)))
    rc = cli.main(["grade", str(tmp_path), "--report-dir", str(tmp_path / "r"), "--rubric",
                   str(tmp_path / "rubric.toml"), "--tasks", "w8a8"])
    assert rc == 1 and capsys.readouterr().err.strip().splitlines()[-1].startswith("grader error: RecursionError")
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["score"] == 0 and report["grader_error"].startswith("RecursionError")
    assert load_rubric(tmp_path / "rubric.toml").tasks  # the rubric used is the one given


def test_the_compile_table_tells_gpu_shapes_from_cpu_calls():
    """A variant launched at a test's GPU shape (captured, nothing ran) and by a CPU test in
    the interpreter: the row says which is which, not one list of test names."""
    from types import SimpleNamespace

    from grader.report import compile_markdown

    row = {"kernel": "_w8a8_kernel", "file": "w8a8.py", "line": 12, "status": "compiled", "ok": True,
           "variant": "BLOCK_M=16", "tests": ["w8a8/perf_m1", "w8a8/perf_m16"], "cpu_tests": ["w8a8/c0"],
           "registers": 40, "spills": 0, "shared_bytes": 4096, "num_warps": 4}
    result = SimpleNamespace(tasks=[SimpleNamespace(task="w8a8", kernels=[row])], gpu="", calibrated_on=[])
    table = "\n".join(compile_markdown(result))
    assert "| launched by |" in table
    assert r"at the GPU shape of w8a8/perf\_m1, w8a8/perf\_m16; run on the CPU by c0" in table
