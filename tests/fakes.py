"""Fake submissions and small rubrics for the grader's tests.

- ``submission(name, **values)``: a fixture from tests/fixtures/submissions/,
  each a complete student kernel file whose docstring says what it does and
  what the grader must make of it (faults and attacks, KernelBench-style);
  ``SOLUTION``: the reference kernel files as they are.
- ``rubric_dict`` / ``rubric`` / ``rubric_toml``: two or three small
  correctness tests per task and one performance test each.
- ``grade_files``, ``by_name``, ``correctness``: grade a folder of sources, read the result.
"""

from __future__ import annotations

import re
from pathlib import Path

from grader.grade import grade
from grader.rubric import parse_rubric

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = {name: (ROOT / "solutions" / f"{name}.py").read_text() for name in ("w8a8", "w4a16", "dds")}
SUBMISSIONS = ROOT / "tests" / "fixtures" / "submissions"


def submission(name: str, **values) -> str:
    """The source of tests/fixtures/submissions/<name>.py. A fixture that needs
    what only the test knows (a path, a port, which variant) holds @KEY@ where
    it goes: each keyword fills one (``report_dir=...`` fills @REPORT_DIR@)."""
    src = (SUBMISSIONS / f"{name}.py").read_text()
    for key, value in values.items():
        token = f"@{key.upper()}@"
        assert token in src, f"{name}.py has no {token}"
        src = src.replace(token, str(value))
    left = re.findall(r"@[A-Z_]+@", src)
    assert not left, f"{name}.py: no value given for {sorted(set(left))}"
    return src


def rubric_dict(timeout_s: float = 120, static: bool = True, same_shape_twice: bool = False,
                tasks=("w8a8", "w4a16", "dds")) -> dict:
    """Two or three small correctness tests per task and one performance test each."""
    tests = []
    for task, shapes, opts in (("w8a8", [[5, 64, 96], [17, 32, 64]], {}),
                               ("w4a16", [[3, 64, 128], [9, 32, 64]], {}),
                               ("dds", [[9, 64, 96], [4, 96, 64]], {"density": 0.5})):
        if task not in tasks:
            continue
        if same_shape_twice:
            shapes = [shapes[0], shapes[0], shapes[1]]
        for i, s in enumerate(shapes):
            tests.append(dict(name=f"{task}/c{i}", task=task, kind="correctness", points=2,
                              shape=s, cpu_shape=s, **opts))
        tests.append(dict(name=f"{task}/perf", task=task, kind="performance", points=3,
                          shape=[64, 256, 256], full_ratio=1.0, zero_ratio=0.5, **opts))
    task_table = {t: dict(title=t, file=f"{t}.py", entry=f"{t}_mm") for t in tasks}
    settings = dict(cpu_task_timeout_s=timeout_s, task_timeout_s=timeout_s, static_checks=static,
                    timed_batch_ms=2.0, timing_rounds=2)
    return {"schema_version": 1, "settings": settings, "tasks": task_table, "tests": tests}


def rubric(**kw):
    return parse_rubric(rubric_dict(**kw))


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def rubric_toml(**kw) -> str:
    """The small rubric as TOML text, for tests that run the grader's command line."""
    d = rubric_dict(**kw)
    out = ["schema_version = 1", "[settings]"] + [f"{k} = {_toml_value(v)}" for k, v in d["settings"].items()]
    for name, t in d["tasks"].items():
        out += [f"[tasks.{name}]"] + [f"{k} = {_toml_value(v)}" for k, v in t.items()]
    for t in d["tests"]:
        out += ["[[tests]]"] + [f"{k} = {_toml_value(v)}" for k, v in t.items()]
    return "\n".join(out) + "\n"


def grade_files(tmp_path: Path, files: dict[str, str], tasks: list[str], **rubric_kw):
    """Write ``files`` ({"w8a8": source, ...}) as a submission folder and grade ``tasks``."""
    sub = tmp_path / "submission"
    sub.mkdir(parents=True, exist_ok=True)
    for task, src in files.items():
        (sub / f"{task}.py").write_text(src)
    return grade(sub, rubric(**rubric_kw), seed=1234, tasks=tasks, log=lambda *_: None)


def by_name(result) -> dict:
    return {t.name: t for t in result.tests}


def correctness(result, task: str | None = None) -> float:
    """Correctness points only: performance points exist only on a GPU."""
    return sum(t.score for t in result.tests if t.kind == "correctness" and task in (None, t.task))


def install_fake_grade(tmp_path: Path, monkeypatch, source: str, folder: str) -> Path:
    """Make the batch run ``source`` (a script, ROOT defined for it) as its grade
    command: argv = submission, report folder, and a folder of its own, returned."""
    import sys

    from classroom import batch

    script = tmp_path / "fake_grade.py"
    script.write_text(f"ROOT = {str(ROOT)!r}\n" + source)
    own = tmp_path / folder
    own.mkdir()
    monkeypatch.setattr(batch, "grade_command",
                        lambda path, reports, rubric: [sys.executable, str(script), str(path), str(reports), str(own)])
    return own

