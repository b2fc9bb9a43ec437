"""make dist: the student bundle holds no solution code, no helper of the
reference kernels, no link and no hidden test; `make grade` works inside it,
grading the stubs to 0, and `make help` lists only what works there."""

import json
import os
import re
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.rubric import load_rubric, parse_rubric, tomllib
from tools.dist import build, public_rubric

ROOT = Path(__file__).resolve().parents[2]
SOLUTION_FILES = sorted((ROOT / "solutions").glob("*.py"))
# Helpers that only the reference kernels define (solutions/w8a8.py, w4a16.py).
REFERENCE_HELPERS = ["split_k_reduce", "split_k_workspace", "split_k_range", "_COUNTERS",
                     "release_next_kernel", "wait_for_previous_kernel", "dependent_launch", "tma_ready",
                     "grouped_tile", "hopper_or_newer"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The folder that `make dist` writes: student-bundle/ and student-bundle.zip."""
    out = tmp_path_factory.mktemp("dist")
    build(out)
    return out


@pytest.fixture(scope="module")
def bundle(built, tmp_path_factory):
    unpacked = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(built / "student-bundle.zip") as zf:
        zf.extractall(unpacked)
    return unpacked / "student-bundle"


def _files(root: Path):
    return [p for p in root.rglob("*") if p.is_file()]


def test_no_solution_file_by_name_or_content(bundle):
    assert not (bundle / "solutions").exists()
    solution_texts = {p.name: p.read_bytes() for p in SOLUTION_FILES}
    # Names that exist only in the reference kernels.
    markers = [b"_quantize_rows_kernel", b"_w8a8_gemm_kernel", b"BLOCKS_PER_STEP", b"0x88888888 as an int32"]
    for m in markers:  # each marker really is in the solutions, so its absence means something
        assert any(m in p.read_bytes() for p in SOLUTION_FILES), m
    for f in _files(bundle):
        data = f.read_bytes()
        assert data not in solution_texts.values(), f"{f} is a copy of a solution file"
        for m in markers:
            assert m not in data, f"{f} contains solution code ({m.decode()})"


def test_no_links_in_the_bundle_or_its_zip(built):
    folder = built / "student-bundle"
    assert (folder / "assignment" / "utils.py").is_file()
    assert not [p for p in folder.rglob("*") if p.is_symlink()]
    with zipfile.ZipFile(built / "student-bundle.zip") as zf:  # extractall would turn a link into a file
        assert not [i.filename for i in zf.infolist() if stat.S_ISLNK(i.external_attr >> 16)]


def test_no_reference_helper_in_the_bundle(bundle):
    for name in REFERENCE_HELPERS:  # each one really is in the solutions
        assert any(name.encode() in p.read_bytes() for p in SOLUTION_FILES), name
    for f in _files(bundle):
        data = f.read_bytes()
        for name in REFERENCE_HELPERS:
            assert name.encode() not in data, f"{f.relative_to(bundle)} names the reference helper {name}"
    # TensorDescriptor is Triton's (the handout and the static check's allowlist name it);
    # the student package itself neither defines nor re-exports it.
    for f in _files(bundle / "assignment"):
        assert b"TensorDescriptor" not in f.read_bytes(), f


def test_no_hidden_tests_or_project_files(bundle):
    full = load_rubric()
    hidden = {t.name for t in full.tests if t.hidden}
    assert hidden, "the default rubric should have hidden tests"
    public = load_rubric(bundle / "grader" / "rubric.toml")
    assert not hidden & {t.name for t in public.tests}
    assert {t.name for t in public.tests} == {t.name for t in full.tests} - hidden
    text = "\n".join(f.read_text(errors="replace") for f in _files(bundle))
    for name in hidden:
        assert name not in text, f"hidden test {name} leaks into the bundle"
    for path in ("tests", "bench", ".ci", "MAINTAINING.md", "docs"):
        assert not (bundle / path).exists(), f"{path} must not ship to students"
    for needed in ("handout.md", "troubleshooting.md", "performance-guide.md", "Makefile", "requirements.txt",
                   "Dockerfile", "README.md", "assignment/layers.py", "assignment/w8a8.py",
                   "assignment/course_compat.py", "assignment/check_mine.py", "grader/tests/test_kernels.py"):
        assert (bundle / needed).is_file(), f"{needed} missing from the bundle"


def test_public_rubric_filter_keeps_comments_and_totals():
    text = (ROOT / "grader" / "rubric.toml").read_text()
    filtered = public_rubric(text)
    head = text.split("\n[[tests]]\n")[0]
    assert filtered.startswith(head.split("[settings]\n")[0])   # the comments a TA wrote
    assert "hidden = true" not in filtered
    public, full = parse_rubric(tomllib.loads(filtered)), parse_rubric(tomllib.loads(text))
    hidden = sum(t.points for t in full.tests if t.hidden and t.kind == "correctness" and not t.bonus)
    assert hidden > 0 and sum(t.hidden_points for t in public.tasks.values()) == hidden
    for name, task in public.tasks.items():   # each task carries its own, so a --tasks run adds up too
        assert task.hidden_points == sum(t.points for t in full.tests_for(name, "correctness")
                                         if t.hidden and not t.bonus)
    assert {t.name for t in public.tests} == {t.name for t in full.tests if not t.hidden}


@pytest.mark.slow
def test_make_grade_in_the_bundle_gives_zero(bundle):
    env = dict(os.environ, NO_VENV="1", PYTHON=sys.executable)
    proc = subprocess.run(["make", "grade", "GRADE_FLAGS=--tasks dds --device cpu"], cwd=bundle, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((bundle / "grade-report" / "report.json").read_text())
    assert report["score"] == 0
    assert "not implemented" in report["tasks"][0]["summary"]


def test_make_submit_ships_with_the_bundle_and_says_what_it_does(bundle, tmp_path):
    """make submit is in the bundle, standard library on top of the engine, and documented where a
    student reads: the bundle's README and the handout name it and say the hidden tests are not run."""
    assert (bundle / "tools" / "submit.py").is_file()
    assert not (bundle / "requirements-serve.txt").exists()
    for doc in ("README.md", "handout.md"):
        text = " ".join((bundle / doc).read_text().split())
        assert "make submit SERVER=" in text and "hidden tests are never run" in text, doc
    env = dict(os.environ, NO_VENV="1", PYTHON=sys.executable)
    usage = subprocess.run(["make", "-s", "submit"], cwd=bundle, env=env, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: make submit SERVER=" in usage.stdout
    import socket
    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = subprocess.run(["make", "-s", "submit", f"SERVER=http://127.0.0.1:{port}", "TOKEN=abc123"], cwd=bundle,
                          env=env, capture_output=True, text=True, timeout=300)
    assert down.returncode != 0
    assert down.stderr.strip().splitlines()[0] == (f"cannot reach the runner at http://127.0.0.1:{port}: "
                                                  "[Errno 111] Connection refused"), down.stderr
    assert "abc123" not in down.stdout + down.stderr       # make does not echo the token


def test_gradescope_zip(tmp_path):
    from tools.gradescope_zip import build as build_gradescope
    out = build_gradescope(tmp_path / "gs.zip")
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
        for needed in ("setup.sh", "run_autograder", "grader/__main__.py", "assignment/utils.py",
                       "requirements.txt"):
            assert needed in names
        assert not any(n.startswith(("solutions/", "tests/")) for n in names)
        assert (zf.getinfo("run_autograder").external_attr >> 16) & 0o111
        run = zf.read("run_autograder").decode()
        assert "${AUTOGRADER_ROOT:-/autograder}" in run and "python3 -m grader.gradescope" in run


# Names only the classroom defines: each must be in classroom/ (checked), and none may ship.
CLASSROOM_MARKERS = ["run_batch", "write_class_files", "CSV_FIELDS_HEAD", "read_gradescope_scores",
                     "from classroom", "import classroom"]


def _no_classroom_code(names_and_texts) -> None:
    classroom = "\n".join(p.read_text() for p in (ROOT / "classroom").rglob("*.py"))
    for m in CLASSROOM_MARKERS[:4]:
        assert m in classroom, m
    for name, text in names_and_texts:
        assert not name.startswith("classroom/"), f"{name}: the classroom ships with the engine"
        for m in CLASSROOM_MARKERS:
            assert m not in text, f"{name} carries classroom code ({m})"


def test_the_bundle_holds_the_engine_alone(bundle):
    assert not (bundle / "classroom").exists()
    _no_classroom_code((f.relative_to(bundle).as_posix(), f.read_text(errors="replace")) for f in _files(bundle))
    # the bundle's Dockerfile builds (no COPY of a folder that is not there) and runs the engine
    dockerfile = (bundle / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (\S+)/ ", dockerfile, re.M)
    assert copied and all((bundle / c).is_dir() for c in copied), copied
    assert 'CMD ["grader", "--help"]' in dockerfile


def test_the_gradescope_zip_holds_the_engine_alone(tmp_path):
    from tools.gradescope_zip import build as build_gradescope
    with zipfile.ZipFile(build_gradescope(tmp_path / "gs.zip")) as zf:
        _no_classroom_code((i.filename, zf.read(i).decode(errors="replace")) for i in zf.infolist()
                           if not i.is_dir())


def _help_targets(cwd: Path) -> list[str]:
    out = subprocess.run(["make", "-s", "help"], cwd=cwd, capture_output=True, text=True).stdout
    return re.findall(r"^make ([\w-]+)", out, re.M)


def test_make_help_in_the_bundle_lists_only_what_works_there(bundle):
    # `make grade` is the one target that works there (test_make_grade_in_the_bundle_gives_zero);
    # the others need the project's tests, tools, benchmark or a class of submissions.
    ta_only = {"test", "test-fast", "fuzz", "lint", "batch", "regrade", "gradebook", "merge", "serve", "dist", "gradescope",
               "bench", "calibrate", "docs"}
    assert set(_help_targets(ROOT)) == {"grade", "hint", "submit"} | ta_only  # the project lists them all
    assert _help_targets(bundle) == ["grade", "hint", "submit"]
    for missing in ("tests", "tools/dist.py", "tools/gradescope_zip.py", "bench"):
        assert not (bundle / missing).exists(), missing


def _hint_lines(path: Path) -> list[str]:
    """The lines of a hint that say something (not its title, fences or short lines)."""
    return [line.strip() for line in path.read_text().splitlines()[1:]
            if len(line.strip()) > 25 and not line.startswith("```")]


def test_a_fresh_bundle_shows_no_hint_unless_asked(bundle):
    """Reading the handout (or anything else) in a terminal shows no hint: they live in
    hints/, one file per task and level, and `make hint` prints exactly one."""
    hints = sorted((bundle / "hints").glob("*.md"))
    assert [h.name for h in hints] == [f"{t}-{n}.md" for t in ("dds", "w4a16", "w8a8") for n in (1, 2, 3)]
    texts = {f: f.read_text(errors="replace") for f in _files(bundle)
             if f.suffix in (".md", ".py", ".toml", ".txt") and "hints" not in f.parts}
    for hint in hints:
        for line in _hint_lines(hint):
            for f, text in texts.items():
                assert line not in text, f"{f.relative_to(bundle)} shows hint text of {hint.name}: {line}"
    for f, text in texts.items():
        assert "<details>" not in text, f   # a fold only a Markdown renderer folds
    handout = (bundle / "handout.md").read_text()
    assert handout.count("make hint TASK=") >= 3
    env = dict(os.environ, NO_VENV="1", PYTHON=sys.executable)
    shown = subprocess.run(["make", "-s", "hint", "TASK=w4a16", "LEVEL=2"], cwd=bundle, env=env,
                           capture_output=True, text=True)
    assert shown.returncode == 0 and shown.stdout == (bundle / "hints" / "w4a16-2.md").read_text()
    for bad in (["TASK=w4a16"], ["TASK=w4a16", "LEVEL=4"], ["TASK=../Makefile", "LEVEL=1"], []):
        refused = subprocess.run(["make", "-s", "hint", *bad], cwd=bundle, env=env, capture_output=True, text=True)
        assert refused.returncode != 0 and "usage: make hint" in refused.stdout, bad
        assert not any(line in refused.stdout for h in hints for line in _hint_lines(h))


def test_hint_three_points_at_the_idea_not_the_finished_line(bundle):
    """The last hint of each task leads to the step without writing it: the solving
    expressions of each task are not in it."""
    finished = {"w8a8": ["12582912", "1.5 * 2**23", "(v + C) - C"],
                "w4a16": ["28 - 4 * (k % 8)", "<< (28 -"],
                "dds": ["offs_b[None, :] * BLOCK + offs_b[:, None]", "offs_b[:, None] + offs_b[None, :] * BLOCK"]}
    for task, lines in finished.items():
        text = (bundle / "hints" / f"{task}-3.md").read_text()
        for line in lines:
            assert line not in text, (task, line)


def test_nothing_a_student_reads_points_outside_the_bundle(bundle):
    """The handout, README, hints, rubric and stubs name only files and folders the
    bundle has (the rubric once pointed at docs/grading.md)."""
    import re

    student = [bundle / "handout.md", bundle / "troubleshooting.md", bundle / "performance-guide.md",
               bundle / "README.md", bundle / "grader" / "rubric.toml",
               *sorted((bundle / "hints").glob("*.md")), *sorted((bundle / "assignment").glob("*.py"))]
    names = {p.name for p in _files(bundle)}
    written = {"report.md", "report.json", "results.json"}   # what the grader writes
    # Last year's course scripts (the handout's "Last year's course scripts"): the student's own copies,
    # wherever they keep them.
    brought = {"benchmark_w8a8.py", "benchmark_w4a16.py", "benchmark_sparse.py"}
    for f in student:
        text = re.sub(r"https?://\S+", "", f.read_text())
        paths = re.findall(r"(?<![\w./-])((?:[a-z_][\w-]*/)+"
                           r"(?:[A-Za-z_][\w.-]*\.(?:md|py|toml|json|txt|sh)\b|(?![\w<])))", text)
        files = re.findall(r"(?<![\w./-])([A-Za-z_][\w-]*\.(?:md|py|toml|json|txt|sh))\b", text)
        for path in paths:
            if path.startswith(("grade-report/", "gpu-report/")) or path.rsplit("/", 1)[-1] in brought:
                continue   # the report folders make grade and make submit write; a course script
            assert (bundle / path).exists(), f"{f.relative_to(bundle)} names {path}"
        for name in files:
            assert name in names or name in written | brought, f"{f.relative_to(bundle)} names {name}"
