"""Strict rubric validation: every mistake a TA can make in rubric.toml is one
RubricError line naming the file, the line and the key; the rubric hash."""

import subprocess
import sys

import pytest

from grader.rubric import (
    DEFAULT_RUBRIC,
    SETTINGS_SCHEMA,
    RubricError,
    Settings,
    load_rubric,
    parse_rubric,
    rubric_hash,
    tomllib,
)
from tests.fakes import ROOT, rubric_toml

GOOD = rubric_toml(tasks=("w8a8",)).replace("[settings]", "[settings]\npoints_step = 0.25\nextra_allowed_imports = []")


def _edit(old: str, new: str, text: str = GOOD) -> str:
    assert old in text, f"anchor not in the test rubric: {old!r}"
    return text.replace(old, new, 1)


def _error(tmp_path, text: str) -> str:
    path = tmp_path / "rubric.toml"
    path.write_text(text)
    with pytest.raises(RubricError) as e:
        load_rubric(path)
    message = str(e.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_the_test_rubric_and_the_default_rubric_load():
    assert load_rubric(DEFAULT_RUBRIC).tests
    assert SETTINGS_SCHEMA.keys() == Settings.__dataclass_fields__.keys()


MISTAKES = [  # (old, new, words the error must hold, text on the line it must name)
    ("points_step = 0.25", 'points_step = "0.25"', "points_step must be a number >= 0, got \"0.25\" "
     "(text: write it without quotes)", "points_step"),
    ("static_checks = true", "static_checks = 1", "static_checks must be true or false", "static_checks"),
    ("timing_rounds = 2", "timing_rounds = 0", "timing_rounds must be an integer >= 1", "timing_rounds"),
    ("timing_rounds = 2", "timing_rounds = 2.5", "timing_rounds must be an integer", "timing_rounds"),
    ("task_timeout_s = 120", "task_timeout_s = -1", "task_timeout_s must be a number > 0", "task_timeout_s ="),
    ("[settings]", "[settings]\npoint_step = 0.5", "[settings]: unknown key 'point_step'; allowed:", "point_step"),
    ("extra_allowed_imports = []", 'extra_allowed_imports = "numpy"', "extra_allowed_imports must be a list",
     "extra_allowed_imports"),
    ('title = "w8a8"', "title = 3", "title must be non-empty text", "title = 3"),
    ('entry = "w8a8_mm"', 'entry = "w8a8-mm"', "entry of task w8a8 is 'w8a8_mm' (set in grader/tasks/w8a8.py",
     "entry ="),
    ('file = "w8a8.py"', 'file = "../w8a8.py"', "file of task w8a8 is 'w8a8.py'", "file ="),
    ("[tasks.w8a8]", "[tasks.w8a8]\nmovement_shape = [4, 4]", "movement_shape must be [M, N, K]", "movement_shape"),
    ("[tasks.w8a8]", "[tasks.w8a8]\nfunction = \"x\"", "unknown key 'function'", "function ="),
    ("[tasks.w8a8]", "[tasks.w9a9]\ntitle = \"x\"\n[tasks.w8a8]", "unknown task 'w9a9'; the task registry "
     "(grader/tasks/) has w8a8, w4a16, dds", "[tasks.w9a9]"),
    ('name = "w8a8/c1"', 'name = "w8a8/c1"\nhidden = "false"',
     'tests[1] (w8a8/c1): hidden must be true or false, got "false" (text: write it without quotes)', "hidden"),
    ('name = "w8a8/c1"', 'name = "w8a8/c1"\nbonus = "yes"', "bonus must be true or false", "bonus"),
    ('name = "w8a8/c1"', 'name = "w8a8/c1"\nvisibility = "after_due"', "visibility must be one of", "visibility"),
    ('name = "w8a8/c1"', 'name = "w8a8/c1"\nzero_rows = true', "zero_rows must be an integer >= 0", "zero_rows"),
    ('name = "w8a8/c1"', 'name = "w8a8/c1"\ndensity = 0.5', "unknown key 'density'; allowed:", "density"),
    ('name = "w8a8/c1"', 'name = "w8a8/c1"\nfull_ratio = 0.5', "full_ratio applies to performance tests only",
     "full_ratio"),
    ("zero_ratio = 0.5\n", "", "tests[2] (w8a8/perf): performance tests need 0 <= zero_ratio < full_ratio",
     "full_ratio"),
    ("points = 3", "points = true", "tests[2] (w8a8/perf): points must be a number >= 0, got true", "points = true"),
    ("shape = [17, 32, 64]", "shape = [17, 32]", "shape must be [M, N, K] with positive integers", "shape = [17, 32]"),
    ('kind = "performance"', 'kind = "speed"', "kind must be one of \"correctness\", \"performance\"", '"speed"'),
    ("zero_ratio = 0.5", "zero_ratio = 1.5", "zero_ratio < full_ratio", "full_ratio = 1.0"),
    ('name = "w8a8/c1"', 'name = "w8a8/c0" # again', "tests[1] (w8a8/c0): duplicate test name", "# again"),
    ("schema_version = 1", "schema_version = 1\ntitle = \"x\"", "unknown key 'title'", 'title = "x"'),
    ("schema_version = 1", 'schema_version = "1"', 'schema_version must be 1, got "1"', "schema_version"),
    ("[settings]", '[settings]\ncalibrated_on = ["NVIDIA H200"]',
     'calibrated_on must be a list of "GPU name, YYYY-MM-DD" texts, got ["NVIDIA H200"]', "calibrated_on"),
    ("[settings]", '[settings]\ntoolchain = { triton = "3.6.0" }',
     'toolchain must be a table { torch = "X", triton = "Y" } with numpy = "Z" optional', "toolchain"),
    ("[settings]", '[settings]\ntoolchain = { torch = "2.11.0", triton = 3.6 }', "toolchain must be a table",
     "toolchain"),
    ("[settings]", '[settings]\ntoolchain = { torch = "2.11.0", triton = "3.6.0", cuda = "13.0" }',
     "toolchain must be a table", "toolchain"),
]


@pytest.mark.parametrize("old, new, words, line_text", MISTAKES, ids=[m[1][:30] for m in MISTAKES])
def test_each_mistake_is_one_line_with_its_line_number(tmp_path, old, new, words, line_text):
    text = _edit(old, new)
    message = _error(tmp_path, text)
    assert words in message, message
    if line_text:
        assert message.startswith(f"{tmp_path / 'rubric.toml'}:{_line(text, line_text)}: "), message


SHAPE_MISTAKES = [  # (task, old, new, words): shapes the task's registry entry refuses
    ("dds", "shape = [9, 64, 96]", "shape = [9, 64, 100]", "shape: N and K must be multiples of the 32x32 block"),
    ("dds", "cpu_shape = [4, 96, 64]", "cpu_shape = [4, 90, 64]", "cpu_shape: N and K must be multiples"),
    ("w4a16", "shape = [3, 64, 128]", "shape = [3, 64, 132]", "shape: K must be a multiple of 8"),
    ("w4a16", "shape = [3, 64, 128]", "shape = [3, 64, 128]\ngroup_size = 48", "K (128) must be a multiple of "
     "group_size (48)"),
    ("dds", "[tasks.dds]", "[tasks.dds]\nmovement_shape = [8, 40, 64]", "movement_shape: N and K must be"),
]


@pytest.mark.parametrize("task, old, new, words", SHAPE_MISTAKES, ids=[m[2][:30] for m in SHAPE_MISTAKES])
def test_shapes_a_task_cannot_take_are_refused(tmp_path, task, old, new, words):
    text = _edit(old, new, rubric_toml(tasks=(task,)))
    assert words in _error(tmp_path, text)


def test_file_and_entry_come_from_the_registry():
    rubric = load_rubric(DEFAULT_RUBRIC)
    assert {t: (r.file, r.entry) for t, r in rubric.tasks.items()} == {
        "w8a8": ("w8a8.py", "w8a8_mm"), "w4a16": ("w4a16.py", "w4a16_mm"), "dds": ("dds.py", "dds_mm")}
    text = _edit('title = "w8a8"\n', "")            # the title too may be left to the registry
    assert "QuantizedLinear_w8a8" in parse_rubric(tomllib.loads(text)).tasks["w8a8"].title


def test_the_command_line_exits_2_with_one_line(tmp_path):
    path = tmp_path / "rubric.toml"
    path.write_text(_edit("points_step = 0.25", 'points_step = "0.25"'))
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(ROOT / "assignment"), "--rubric", str(path),
                           "--report-dir", str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "points_step must be a number" in proc.stderr, proc.stderr
    assert not (tmp_path / "r").exists()


def test_rubric_hash_is_the_files_bytes(tmp_path):
    path = tmp_path / "rubric.toml"
    path.write_text(GOOD)
    h = rubric_hash(path)
    assert len(h) == 12 and h == rubric_hash(str(path)) == rubric_hash(GOOD) == rubric_hash(GOOD.encode())
    assert load_rubric(path).hash == h
    path.write_text(GOOD + "# a comment\n")
    assert rubric_hash(path) != h and load_rubric(path).hash == rubric_hash(path)


def test_every_setting_has_its_default_in_the_shipped_rubric_only(tmp_path):
    """grader/rubric.toml is the one home of the settings' defaults: a rubric that leaves one
    out gets the shipped file's value, and the shipped file must set each one."""
    import dataclasses

    from grader.rubric import default_settings, default_settings_raw
    shipped = tomllib.loads(DEFAULT_RUBRIC.read_text())["settings"]
    assert shipped.keys() == SETTINGS_SCHEMA.keys()
    fields = dataclasses.fields(Settings)
    assert all(f.default is dataclasses.MISSING for f in fields), "a default in Python would be a second home"
    bare = parse_rubric({"schema_version": 1, "settings": {"timing_rounds": 7}, "tasks": {}, "tests": []})
    want = {k: tuple(v) if isinstance(v, list) else v for k, v in shipped.items()}
    assert dataclasses.asdict(bare.settings) == {**want, "timing_rounds": 7}
    assert dataclasses.asdict(default_settings()) == want
    # the shipped file without one of them is an error that names the file and the key
    broken = tmp_path / "rubric.toml"
    broken.write_text(DEFAULT_RUBRIC.read_text().replace("\ntiming_rounds = ", "\n# timing_rounds = "))
    with pytest.raises(RubricError, match=r"rubric.toml:\d+: \[settings\]: missing timing_rounds"):
        default_settings_raw(broken)
