"""The rubric: tasks, tests, points and thresholds, loaded from a TOML file.

Which tasks exist, their kernel files, case options and valid shapes come
from the task registry (grader/tasks/); the rubric says which of them are
graded, with which tests, points and thresholds.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib



def _registry():
    """The task registry (grader/tasks/), imported on first use: it needs torch, and
    reading the settings must not (grader/gradescope.py reads them under a memory limit)."""
    from . import tasks
    return tasks

DEFAULT_RUBRIC = Path(__file__).with_name("rubric.toml")
KINDS = ("correctness", "performance")
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")


class RubricError(ValueError):
    """The rubric file is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class RubricTask:
    """A ``[tasks.<name>]`` table: how this rubric grades a task of the registry
    (``registered``, a grader.tasks.Task: file, entry, inputs, reference, ...)."""
    name: str
    title: str
    # [M, N, K] of the one call whose data movement the CPU run counts (feedback
    # only, never scored); None: not counted.
    movement_shape: tuple[int, int, int] | None = None
    # Correctness points of this task's hidden tests that this copy of the
    # rubric does not hold (the student bundle's; make dist writes it): shown
    # in the report's arithmetic so that a student's total adds up to the handout's.
    hidden_points: float = 0.0

    @property
    def registered(self):
        """What the registry knows about the task (a grader.tasks.Task)."""
        return _registry().get(self.name)

    @property
    def file(self) -> str:   # the kernel file a submission provides, e.g. "w8a8.py"
        return self.registered.file

    @property
    def entry(self) -> str:  # the function the grader calls, e.g. "w8a8_mm"
        return self.registered.entry


@dataclass(frozen=True)
class TestSpec:
    """One graded test. ``options`` holds the case options (density, ties, ...)."""
    name: str
    task: str
    kind: str
    points: float
    shape: tuple[int, int, int]
    cpu_shape: tuple[int, int, int] | None = None
    visibility: str = "visible"
    hidden: bool = False
    bonus: bool = False
    full_ratio: float | None = None
    zero_ratio: float | None = None
    options: dict = field(default_factory=dict)

    @property
    def registered_task(self):
        """The registry's task of this test (a grader.tasks.Task: inputs, reference, tolerance, ...)."""
        return _registry().get(self.task)

    def shape_on(self, device: str) -> tuple[int, int, int] | None:
        """The [M, N, K] this test uses on ``device`` ("cuda" or "cpu"), or None if it does not run there."""
        if device == "cuda":
            return self.shape
        return self.cpu_shape if self.kind == "correctness" else None


@dataclass(frozen=True)
class Settings:
    """The ``[settings]`` of a rubric. What each one means, and its default, is in
    grader/rubric.toml, their one home: a rubric that leaves a setting out gets
    the value written there (``default_settings``); SETTINGS_SCHEMA gives each
    one's type and range."""
    cap_at_max: bool
    points_step: float
    task_timeout_s: float
    cpu_task_timeout_s: float
    timed_batch_ms: float
    timing_rounds: int
    static_checks: bool
    extra_allowed_imports: tuple
    gradescope_performance: str
    gradescope_budget_s: float
    memory_floor_trust: float
    borderline_margin: float
    borderline_rounds: int
    calibrated_on: tuple
    toolchain: dict   # {"torch", "triton"[, "numpy"]: version} the thresholds were calibrated with


@dataclass(frozen=True)
class Rubric:
    schema_version: int
    settings: Settings
    tasks: dict[str, RubricTask]
    tests: tuple[TestSpec, ...]
    source: str
    hash: str = ""   # rubric_hash of the file it was loaded from ("" when built in memory)

    def tests_for(self, task: str, kind: str | None = None) -> list[TestSpec]:
        return [t for t in self.tests if t.task == task and (kind is None or t.kind == kind)]


# ----------------------------------------------------------------------------- validation
#
# Every key of the rubric is checked for its type and range, and every table
# for unknown keys: a quoted number or a misspelt key must stop the grader
# with one line naming the place, not turn a class into grader errors.

SETTINGS_SCHEMA = {  # [settings] key -> (kind, lowest, lowest excluded) | ("choice", None, choices)
    "cap_at_max": ("bool", None, False),
    "points_step": ("number", 0, False),
    "task_timeout_s": ("number", 0, True),
    "cpu_task_timeout_s": ("number", 0, True),
    "timed_batch_ms": ("number", 0, True),
    "timing_rounds": ("int", 1, False),
    "static_checks": ("bool", None, False),
    "extra_allowed_imports": ("texts", None, False),
    "gradescope_performance": ("choice", None, ("omit", "informational")),
    "gradescope_budget_s": ("number", 0, True),
    "memory_floor_trust": ("number", 0, False),
    "borderline_margin": ("number", 0, False),
    "borderline_rounds": ("int", 0, False),
    "calibrated_on": ("calibration", None, False),
    "toolchain": ("toolchain", None, False),
}
CALIBRATION = re.compile(r"(?P<gpu>\S.*?), (?P<date>\d{4}-\d{2}-\d{2})")  # one calibrated_on entry
TOOLCHAIN_KEYS = ("torch", "triton", "numpy")   # [settings] toolchain: torch and triton required
VERSION = re.compile(r"\d+(\.\d+)*[0-9A-Za-z.+!-]*")   # a package version as pip reports it
# [tasks.<name>] keys. ``file`` and ``entry`` belong to the registry; a rubric
# may repeat them (older rubrics did) but not change them.
TASK_KEYS = ("title", "movement_shape", "hidden_points", "file", "entry")
TEST_KEYS = {"name", "task", "kind", "points", "shape", "cpu_shape", "visibility", "hidden", "bonus",
             "full_ratio", "zero_ratio"}
TOP_KEYS = ("schema_version", "settings", "tasks", "tests")


def _shown(value) -> str:
    """A value as the rubric writes it, shortened: "0.25" (quoted) is text, 0.25 a number."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_word(value) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "table"
    return type(value).__name__


def _problem(value, kind: str, low=None, low_open=False, high=None) -> str | None:
    """Why ``value`` is not a valid ``kind`` (bool, int, number, text, texts,
    choice with ``high`` the choices), or None when it is."""
    if kind == "bool":
        ok, want = isinstance(value, bool), "true or false"
    elif kind in ("int", "number"):
        types = int if kind == "int" else (int, float)
        ok = isinstance(value, types) and not isinstance(value, bool) and math.isfinite(value)
        want = "an integer" if kind == "int" else "a number"
        if ok and low is not None and (value <= low if low_open else value < low):
            ok = False
        if ok and high is not None and value > high:
            ok = False
        if low is not None:
            want += f" {'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
    elif kind == "text":
        ok, want = isinstance(value, str) and value.strip() != "", "non-empty text in quotes"
    elif kind == "texts":
        ok, want = isinstance(value, list) and all(isinstance(v, str) for v in value), "a list of texts"
    elif kind == "choice":
        ok, want = value in high, "one of " + ", ".join(f'"{c}"' for c in high)
    elif kind == "calibration":
        ok = isinstance(value, list) and all(isinstance(v, str) and CALIBRATION.fullmatch(v) for v in value)
        want = 'a list of "GPU name, YYYY-MM-DD" texts'
    elif kind == "toolchain":
        ok = (isinstance(value, dict) and {"torch", "triton"} <= set(value) <= set(TOOLCHAIN_KEYS)
              and all(isinstance(v, str) and VERSION.fullmatch(v) for v in value.values()))
        want = 'a table { torch = "X", triton = "Y" } with numpy = "Z" optional (versions as pip reports them)'
    else:  # pragma: no cover
        raise AssertionError(kind)
    if ok:
        return None
    hint = ""
    if isinstance(value, str) and kind in ("bool", "int", "number"):
        try:
            unquoted = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            unquoted = None
        if unquoted is not None and _problem(unquoted, kind, low, low_open, high) is None:
            hint = ": write it without quotes"
    return f"must be {want}, got {_shown(value)} ({_type_word(value)}{hint})"


_ASSIGN = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*=""")   # a key = value line's head


def _line_index(text: str) -> dict:
    """Where each key is written: {(table, key): line}, ``table`` being () for
    the top level, ("settings",), ("tasks", name) or ("tests", i), and key None
    for the table's header. tomllib gives no positions, so the text is
    scanned; a key it cannot place (a dotted key, an inline table) has no line."""
    index, table, n_tests = {}, (), 0
    header = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    for number, line in enumerate(text.splitlines(), 1):
        m = header.match(line)
        if m:
            parts = tuple(p.strip().strip("\"'") for p in m.group(2).split("."))
            if m.group(1) == "[[" and parts == ("tests",):
                table, n_tests = ("tests", n_tests), n_tests + 1
            else:
                table = parts
            index.setdefault((table, None), number)
            continue
        m = _ASSIGN.match(line)
        if m:
            index.setdefault((table, m.group(1).strip("\"'")), number)
    return index


class _Checker:
    """Raises RubricError as ``source:line: place: message`` (the line where it can be found)."""

    def __init__(self, source: str, text: str | None):
        self.source, self.lines = source, _line_index(text) if text else {}

    def fail(self, table: tuple, key: str | None, place: str, message: str):
        line = self.lines.get((table, key)) or self.lines.get((table, None))
        where = f"{self.source}:{line}" if line else self.source
        raise RubricError(f"{where}: {place}{': ' if place else ''}{message}")

    def check(self, table, key, place, value, kind, low=None, low_open=False, high=None):
        problem = _problem(value, kind, low, low_open, high)
        if problem:
            self.fail(table, key, place, f"{key} {problem}")

    def unknown(self, table, place, entry: dict, allowed) -> None:
        for key in entry:
            if key not in allowed:
                self.fail(table, key, place, f"unknown key {key!r}; allowed: {', '.join(sorted(allowed))}")

    def table(self, table, key, place, value, kind="table") -> None:
        ok = isinstance(value, dict) if kind == "table" else (
            isinstance(value, list) and all(isinstance(v, dict) for v in value))
        if not ok:
            want = "a table ([name])" if kind == "table" else "a list of [[tests]] tables"
            self.fail(table, key, place, f"{key} must be {want}, got {_type_word(value)}")


def _shape(c: _Checker, table, key, place, value) -> tuple[int, int, int]:
    if (not isinstance(value, list) or len(value) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)):
        c.fail(table, key, place, f"{key} must be [M, N, K] with positive integers, got {_shown(value)}")
    return tuple(value)


def _check_settings(c: _Checker, raw: dict) -> None:
    table = ("settings",)
    c.unknown(table, "[settings]", raw, SETTINGS_SCHEMA)
    for key, value in raw.items():
        kind, low, extra = SETTINGS_SCHEMA[key]
        if kind == "choice":
            c.check(table, key, "[settings]", value, kind, high=extra)
        else:
            c.check(table, key, "[settings]", value, kind, low, extra)


_DEFAULTS: dict = {}


def default_settings_raw(path: Path = DEFAULT_RUBRIC) -> dict:
    """The ``[settings]`` written in the shipped rubric (grader/rubric.toml), every one of them
    checked: the defaults of every rubric. Reading them imports neither torch nor the registry."""
    key = str(path)
    if key not in _DEFAULTS:
        try:
            text = path.read_text(encoding="utf-8")
            raw = tomllib.loads(text).get("settings", {})
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise RubricError(f"{path}: cannot read the default settings: {e}") from e
        c = _Checker(str(path), text)
        if not isinstance(raw, dict):
            c.table((), "settings", "", raw)
        _check_settings(c, raw)
        missing = [k for k in SETTINGS_SCHEMA if k not in raw]
        if missing:
            c.fail(("settings",), None, "[settings]", f"missing {', '.join(missing)}: this file holds every "
                   "setting's default, so it must set each one")
        _DEFAULTS[key] = raw
    return dict(_DEFAULTS[key])


def _settings(c: _Checker, raw: dict) -> Settings:
    _check_settings(c, raw)
    merged = {**default_settings_raw(), **raw}
    for key in ("extra_allowed_imports", "calibrated_on"):
        merged[key] = tuple(merged[key])
    merged["toolchain"] = dict(merged["toolchain"])
    return Settings(**merged)


def default_settings() -> Settings:
    """The settings of a rubric that sets none: those of grader/rubric.toml."""
    return _settings(_Checker(str(DEFAULT_RUBRIC), None), {})


def _task(c: _Checker, name: str, entry) -> RubricTask:
    table, place = ("tasks", name), f"[tasks.{name}]"
    registry = _registry()
    if name not in registry.TASKS:
        c.fail(table, None, "", f"unknown task {name!r}; the task registry (grader/tasks/) has "
               f"{', '.join(registry.TASKS)}")
    registered = registry.get(name)
    c.table(("tasks",), name, "", entry)
    c.unknown(table, place, entry, TASK_KEYS)
    if "title" in entry:
        c.check(table, "title", place, entry["title"], "text")
    if "hidden_points" in entry:
        c.check(table, "hidden_points", place, entry["hidden_points"], "number", 0)
    for key in ("file", "entry"):   # the registry's: repeating them is fine, changing them is not
        if key in entry and entry[key] != getattr(registered, key):
            c.fail(table, key, place, f"{key} of task {name} is {getattr(registered, key)!r} (set in grader/tasks/"
                   f"{name}.py, the contract with the stubs), got {_shown(entry[key])}; leave {key} out")
    movement = None
    if "movement_shape" in entry:
        movement = _shape(c, table, "movement_shape", place, entry["movement_shape"])
        problem = registered.shape_problem(movement, registered.defaults({}))
        if problem:
            c.fail(table, "movement_shape", place, f"movement_shape: {problem}")
    return RubricTask(name=name, title=entry.get("title", registered.title), movement_shape=movement,
                      hidden_points=float(entry.get("hidden_points", 0)))


def _test(c: _Checker, entry: dict, index: int, tasks: dict) -> TestSpec:
    table = ("tests", index)
    name = entry.get("name")
    where = f"tests[{index}] ({name if isinstance(name, str) else '?'})"
    for key in ("name", "task", "kind", "points", "shape"):
        if key not in entry:
            c.fail(table, None, where, f"missing '{key}'")
    c.check(table, "name", where, name, "text")
    task, kind = entry["task"], entry["kind"]
    if not isinstance(task, str) or task not in tasks:
        c.fail(table, "task", where, f"task must be one of {sorted(tasks)} (the [tasks.*] tables), got {_shown(task)}")
    c.check(table, "kind", where, kind, "choice", high=KINDS)
    registered = _registry().get(task)
    c.unknown(table, where, entry, TEST_KEYS | set(registered.options))
    c.check(table, "points", where, entry["points"], "number", 0)
    for key in ("hidden", "bonus"):
        if key in entry:
            c.check(table, key, where, entry[key], "bool")
    visibility = entry.get("visibility", "visible")
    c.check(table, "visibility", where, visibility, "choice", high=VISIBILITIES)
    shape = _shape(c, table, "shape", where, entry["shape"])
    cpu_shape = _shape(c, table, "cpu_shape", where, entry["cpu_shape"]) if "cpu_shape" in entry else None
    options = {k: v for k, v in entry.items() if k not in TEST_KEYS}
    for key, value in options.items():
        option = registered.options[key]
        c.check(table, key, where, value, option.kind, option.low, False, option.high)
    for key, value in (("shape", shape), ("cpu_shape", cpu_shape)):
        problem = value and registered.shape_problem(value, registered.defaults(options))
        if problem:
            c.fail(table, key, where, f"{key}: {problem}")
    full, zero = entry.get("full_ratio"), entry.get("zero_ratio")
    for key in ("full_ratio", "zero_ratio"):
        if key in entry:
            if kind != "performance":
                c.fail(table, key, where, f"{key} applies to performance tests only")
            c.check(table, key, where, entry[key], "number", 0)
    if kind == "performance" and not (full is not None and zero is not None and zero < full):
        c.fail(table, "full_ratio" if "full_ratio" in entry else None, where,
               f"performance tests need 0 <= zero_ratio < full_ratio, got zero_ratio={zero!r}, full_ratio={full!r}")
    return TestSpec(
        name=name, task=task, kind=kind, points=float(entry["points"]), shape=shape, cpu_shape=cpu_shape,
        visibility=visibility, hidden=entry.get("hidden", False), bonus=entry.get("bonus", False),
        full_ratio=full, zero_ratio=zero, options=options)


def parse_rubric(data: dict, source: str = "<memory>", text: str | None = None, digest: str = "") -> Rubric:
    """Check and build a rubric from parsed TOML. ``text``, the file's text,
    lets errors name the line; ``digest`` is its rubric_hash."""
    c = _Checker(source, text)
    c.unknown((), "", data, TOP_KEYS)
    if data.get("schema_version") != 1 or isinstance(data.get("schema_version"), bool):
        c.fail((), "schema_version", "", f"schema_version must be 1, got {_shown(data.get('schema_version'))}")
    for key, kind in (("settings", "table"), ("tasks", "table"), ("tests", "list")):
        if key in data:
            c.table((), key, "", data[key], kind)
    settings = _settings(c, data.get("settings", {}))
    tasks = {name: _task(c, name, t) for name, t in data.get("tasks", {}).items()}
    tests, seen = [], set()
    for i, entry in enumerate(data.get("tests", [])):
        spec = _test(c, entry, i, tasks)
        if spec.name in seen:
            c.fail(("tests", i), "name", f"tests[{i}] ({spec.name})", "duplicate test name")
        seen.add(spec.name)
        tests.append(spec)
    return Rubric(schema_version=1, settings=settings, tasks=tasks, tests=tuple(tests), source=source,
                  hash=digest)


def rubric_hash(path_or_text: str | bytes | Path) -> str:
    """The first 12 hex digits of the sha256 of a rubric file's bytes: which
    rubric a report was made under. A Path, or a one-line str naming an
    existing file, is read; other text (or bytes) is hashed as given."""
    if isinstance(path_or_text, Path) or (isinstance(path_or_text, str) and "\n" not in path_or_text
                                          and Path(path_or_text).is_file()):
        data = Path(path_or_text).read_bytes()
    elif isinstance(path_or_text, str):
        data = path_or_text.encode("utf-8")
    else:
        data = bytes(path_or_text)
    return hashlib.sha256(data).hexdigest()[:12]


def load_rubric(path: str | Path = DEFAULT_RUBRIC) -> Rubric:
    path = Path(path)
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise RubricError(f"{path}: cannot read rubric: {e}") from e
    return parse_rubric(data, str(path), text, rubric_hash(raw))


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:.12g}"
    if isinstance(value, str):
        return json.dumps(value)   # ASCII with \uXXXX escapes: a TOML basic string too
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):   # an inline table; its keys are bare words
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _value_end(line: str, start: int) -> int:
    """Where the value that starts at ``start`` ends: at a comment outside quotes, or the line's end."""
    quote = None
    i = start
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            break
        i += 1
    return i


def set_values(text: str, values: dict) -> str:
    """``text`` with each ``(table, key): value`` of ``values`` written in, every
    other byte kept (comments, order, blank lines; a trailing comment keeps its
    column where it can). ``table`` is as in ``_line_index``: ("settings",),
    ("tests", i), ... A key the table does not have yet goes after its last key.
    Only one-line values are replaced; anything else raises ValueError."""
    lines = text.splitlines(keepends=True)
    index = _line_index(text)
    added: dict[int, list[str]] = {}
    for (table, key), value in values.items():
        new = _toml_value(value)
        number = index.get((table, key))
        if number is None:
            keys = [n for (t, k), n in index.items() if t == table]
            if not keys:
                raise ValueError(f"the rubric has no table {table!r} to put {key} in")
            added.setdefault(max(keys), []).append(f"{key} = {new}\n")
            continue
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        start = _ASSIGN.match(body).end()
        start += len(body[start:]) - len(body[start:].lstrip())
        end = _value_end(body, start)
        old = body[start:end].rstrip()
        try:
            tomllib.loads(f"v = {old}")
        except tomllib.TOMLDecodeError:
            raise ValueError(f"line {number}: {key} is not a one-line value; edit it by hand") from None
        gap = body[start + len(old):end]
        if end < len(body):   # a comment follows: keep its column if the new value fits
            gap = " " * max(1, len(old) + len(gap) - len(new))
        lines[number - 1] = body[:start] + new + gap + body[end:] + line[len(body):]
    for number in sorted(added, reverse=True):
        lines[number:number] = added[number]
    result = "".join(lines)
    data = tomllib.loads(result)
    for (table, key), value in values.items():
        node = data
        for part in table:
            node = node[part]
        got, want = node.get(key), list(value) if isinstance(value, tuple) else value
        if not (got == want or (isinstance(want, float) and isinstance(got, (int, float))
                                and math.isclose(got, want, rel_tol=1e-9))):
            raise ValueError(f"{key} of {table!r} reads back as {got!r}, not {want!r}; edit it by hand")
    return result


assert set(SETTINGS_SCHEMA) == {f.name for f in fields(Settings)}, "SETTINGS_SCHEMA must list every setting"
