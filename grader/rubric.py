"""The rubric: tasks, tests, points and thresholds, loaded from a TOML file."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_RUBRIC = Path(__file__).with_name("rubric.toml")
TASKS = ("w8a8", "w4a16", "dds")
KINDS = ("correctness", "performance")
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
CASE_OPTIONS = {
    "w8a8": {"zero_rows", "ties"},
    "w4a16": {"zero_rows", "group_size"},
    "dds": {"zero_rows", "density", "empty_rows", "index_dtype"},
}


class RubricError(ValueError):
    """The rubric file is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class Task:
    name: str
    title: str
    file: str   # the kernel file a submission provides, e.g. "w8a8.py"
    entry: str  # the function the grader calls, e.g. "w8a8_mm"


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

    def shape_on(self, device: str) -> tuple[int, int, int] | None:
        """The [M, N, K] this test uses on ``device`` ("cuda" or "cpu"), or None if it does not run there."""
        if device == "cuda":
            return self.shape
        return self.cpu_shape if self.kind == "correctness" else None


@dataclass(frozen=True)
class Settings:
    cap_at_max: bool = True
    points_step: float = 0.25
    task_timeout_s: float = 240
    cpu_task_timeout_s: float = 600
    timed_batch_ms: float = 5.0
    timing_rounds: int = 3
    static_checks: bool = True
    extra_allowed_imports: tuple = ()
    # Correctness points of hidden tests that this copy of the rubric does not
    # hold (the student bundle's; make dist writes it): shown in the report's
    # arithmetic so that a student's total adds up to the handout's.
    hidden_points: float = 0.0


@dataclass(frozen=True)
class Rubric:
    schema_version: int
    settings: Settings
    tasks: dict[str, Task]
    tests: tuple[TestSpec, ...]
    source: str

    def tests_for(self, task: str, kind: str | None = None) -> list[TestSpec]:
        return [t for t in self.tests if t.task == task and (kind is None or t.kind == kind)]


def _shape(value, where: str) -> tuple[int, int, int]:
    if (not isinstance(value, list) or len(value) != 3
            or not all(isinstance(v, int) and v >= 1 for v in value)):
        raise RubricError(f"{where}: expected [M, N, K] with positive integers, got {value!r}")
    return tuple(value)


def _test(entry: dict, index: int, tasks: dict) -> TestSpec:
    where = f"tests[{index}] ({entry.get('name', '?')})"
    known = {"name", "task", "kind", "points", "shape", "cpu_shape", "visibility", "hidden",
             "bonus", "full_ratio", "zero_ratio"}
    for key in ("name", "task", "kind", "points", "shape"):
        if key not in entry:
            raise RubricError(f"{where}: missing '{key}'")
    task, kind = entry["task"], entry["kind"]
    if task not in tasks:
        raise RubricError(f"{where}: task must be one of {sorted(tasks)}, got {task!r}")
    if kind not in KINDS:
        raise RubricError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    options = {k: v for k, v in entry.items() if k not in known}
    unknown = set(options) - CASE_OPTIONS[task]
    if unknown:
        raise RubricError(f"{where}: unknown option(s) {sorted(unknown)} for task {task}; "
                          f"allowed: {sorted(CASE_OPTIONS[task])}")
    points = entry["points"]
    if not isinstance(points, (int, float)) or points < 0:
        raise RubricError(f"{where}: points must be a number >= 0, got {points!r}")
    visibility = entry.get("visibility", "visible")
    if visibility not in VISIBILITIES:
        raise RubricError(f"{where}: visibility must be one of {VISIBILITIES}, got {visibility!r}")
    full, zero = entry.get("full_ratio"), entry.get("zero_ratio")
    if kind == "performance":
        if not (isinstance(full, (int, float)) and isinstance(zero, (int, float)) and 0 <= zero < full):
            raise RubricError(f"{where}: performance tests need 0 <= zero_ratio < full_ratio, "
                              f"got zero_ratio={zero!r}, full_ratio={full!r}")
    cpu_shape = _shape(entry["cpu_shape"], where + ".cpu_shape") if "cpu_shape" in entry else None
    return TestSpec(
        name=entry["name"], task=task, kind=kind, points=float(points),
        shape=_shape(entry["shape"], where + ".shape"), cpu_shape=cpu_shape,
        visibility=visibility, hidden=bool(entry.get("hidden", False)),
        bonus=bool(entry.get("bonus", False)), full_ratio=full, zero_ratio=zero, options=options)


def parse_rubric(data: dict, source: str = "<memory>") -> Rubric:
    if data.get("schema_version") != 1:
        raise RubricError(f"{source}: schema_version must be 1, got {data.get('schema_version')!r}")
    raw = dict(data.get("settings", {}))
    raw["extra_allowed_imports"] = tuple(raw.get("extra_allowed_imports", ()))
    settings = Settings(**raw)
    tasks = {}
    for name, t in data.get("tasks", {}).items():
        if name not in TASKS:
            raise RubricError(f"{source}: unknown task {name!r}; expected one of {TASKS}")
        tasks[name] = Task(name=name, title=t["title"], file=t["file"], entry=t["entry"])
    tests = tuple(_test(e, i, tasks) for i, e in enumerate(data.get("tests", [])))
    names = [t.name for t in tests]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise RubricError(f"{source}: duplicate test names {sorted(dupes)}")
    return Rubric(schema_version=1, settings=settings, tasks=tasks, tests=tests, source=source)


def load_rubric(path: str | Path = DEFAULT_RUBRIC) -> Rubric:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise RubricError(f"{path}: cannot read rubric: {e}") from e
    try:
        return parse_rubric(data, str(path))
    except TypeError as e:  # unknown key in [settings]
        raise RubricError(f"{path}: {e}") from e
