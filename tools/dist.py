"""Build the student bundle: python -m tools.dist OUT_DIR [--rubric R]  (make dist [RUBRIC=...]).

OUT_DIR/student-bundle/ and OUT_DIR/student-bundle.zip hold the stubs, the
grader with the public tests only (hidden rubric entries removed), the handout,
Makefile, requirements, the grading toolchain's pins (toolchain.txt), Dockerfile,
a student README and its hints (one file each, printed by ``make hint``, never inline). Never solutions/, the project's
tests, the benchmark, TA docs or the TA's classroom/ (the bundle's Dockerfile
builds an image of the engine alone).

The rubric is validated as ``make grade`` validates it, before anything is
built, and so is the bundle's own copy after: a bad rubric or an incomplete
bundle stops the build with one line and exit status 2 (check_rubric,
check_files; tools/gradescope_zip.py uses the same checks).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = ["assignment", "grader", "handout.md", "hints", "Makefile", "requirements.txt", "toolchain.txt",
           "Dockerfile", ".dockerignore", "tools/__init__.py", "tools/setup_env.sh"]
RENAME = {"docs/README-student.md": "README.md"}
SKIP_PARTS = {"__pycache__", ".pytest_cache"}


class BundleError(ValueError):
    """The rubric or the bundle would not grade: one line saying why."""


def check_rubric(text: str, source: str):
    """The rubric parsed and validated as the grader does (grader.rubric); BundleError if it is not valid."""
    from grader.rubric import RubricError, parse_rubric, rubric_hash, tomllib

    try:
        return parse_rubric(tomllib.loads(text), source, text, rubric_hash(text))
    except tomllib.TOMLDecodeError as e:
        raise BundleError(f"rubric error: {source}: not valid TOML: {e}") from None
    except RubricError as e:
        raise BundleError(f"rubric error: {e}") from None


def check_files(names, rubric, what: str) -> None:
    """Every file a grade of ``rubric`` needs is among ``names`` (paths relative to the bundle's root)."""
    need = ["grader/__main__.py", "grader/rubric.toml", "grader/tests/test_kernels.py", "assignment/utils.py"]
    for task in rubric.tasks.values():
        need += [f"grader/tasks/{task.name}.py", f"assignment/{task.file}"]
    missing = [n for n in need if n not in set(names)]
    if missing:
        raise BundleError(f"{what} lacks {', '.join(missing[:5])}: it could not grade")


def read_rubric(path: Path | None) -> tuple[str, str]:
    """(text, name) of the rubric to ship: ``path`` or grader/rubric.toml."""
    path = path or ROOT / "grader" / "rubric.toml"
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except (OSError, UnicodeDecodeError) as e:
        raise BundleError(f"rubric error: {path}: cannot read it ({e})") from None


def public_rubric(text: str) -> str:
    """The rubric without its hidden [[tests]] blocks (comments kept), and with
    each task's hidden correctness points as its ``hidden_points``, so that the
    student's report adds up."""
    from grader.rubric import parse_rubric, set_values, tomllib

    rubric = parse_rubric(tomllib.loads(text))
    head, *blocks = text.split("\n[[tests]]\n")
    kept = [b for b, t in zip(blocks, rubric.tests) if not t.hidden]
    points = {}
    for t in rubric.tests:
        if t.hidden and t.kind == "correctness" and not t.bonus:
            points[("tasks", t.task), "hidden_points"] = points.get((("tasks", t.task), "hidden_points"), 0) \
                + t.points
    head = set_values(head, {key: float(v) for key, v in points.items()})
    return "\n[[tests]]\n".join([head, *kept]).rstrip("\n") + "\n"


def engine_dockerfile(text: str) -> str:
    """The Dockerfile without its lines that name the classroom: the image of the engine alone."""
    return "".join(line for line in text.splitlines(keepends=True) if "classroom" not in line)


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        for p in sorted(src.rglob("*")):
            if p.is_file() and not SKIP_PARTS & set(p.parts):
                _copy(p, dst / p.relative_to(src))
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)  # follows symlinks: the bundle holds plain files
    shutil.copymode(src, dst)


def build(out_dir: Path, rubric_path: Path | None = None) -> Path:
    """Build the bundle; BundleError (nothing half-built left) if the rubric or the bundle would not grade."""
    text, source = read_rubric(rubric_path)
    check_rubric(text, source)
    public = public_rubric(text)
    check_rubric(public, "the student bundle's grader/rubric.toml")
    bundle = out_dir / "student-bundle"
    if bundle.exists():
        shutil.rmtree(bundle)
    for name in INCLUDE:
        _copy(ROOT / name, bundle / name)
    for src, dst in RENAME.items():
        _copy(ROOT / src, bundle / dst)
    rubric = bundle / "grader" / "rubric.toml"
    rubric.write_text(public)
    check_files([p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()],
                check_rubric(public, str(rubric)), "the student bundle")
    dockerfile = bundle / "Dockerfile"
    dockerfile.write_text(engine_dockerfile(dockerfile.read_text()))
    shutil.make_archive(str(out_dir / "student-bundle"), "zip", out_dir, "student-bundle")
    return bundle


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.dist", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", default="dist")
    p.add_argument("--rubric", type=Path, default=None, help="the rubric to ship (default: grader/rubric.toml)")
    args = p.parse_args(argv)
    try:
        bundle = build(Path(args.out), args.rubric)
    except BundleError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"student bundle: {bundle}/ and {Path(args.out) / 'student-bundle.zip'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
