"""Build the student bundle: python -m tools.dist OUT_DIR  (make dist).

OUT_DIR/student-bundle/ and OUT_DIR/student-bundle.zip hold the stubs, the
grader with the public tests only (hidden rubric entries removed), the handout,
its hints (one file each, printed by ``make hint``, never inline), Makefile,
requirements, Dockerfile and a student README. Never solutions/, the
project's tests, the benchmark, TA docs or the TA's classroom/ (the bundle's
Dockerfile builds an image of the engine alone).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = ["assignment", "grader", "handout.md", "hints", "Makefile", "requirements.txt", "Dockerfile",
           ".dockerignore", "tools/__init__.py", "tools/setup_env.sh"]
RENAME = {"docs/README-student.md": "README.md"}
SKIP_PARTS = {"__pycache__", ".pytest_cache"}


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


def build(out_dir: Path) -> Path:
    bundle = out_dir / "student-bundle"
    if bundle.exists():
        shutil.rmtree(bundle)
    for name in INCLUDE:
        _copy(ROOT / name, bundle / name)
    for src, dst in RENAME.items():
        _copy(ROOT / src, bundle / dst)
    rubric = bundle / "grader" / "rubric.toml"
    rubric.write_text(public_rubric(rubric.read_text()))
    dockerfile = bundle / "Dockerfile"
    dockerfile.write_text(engine_dockerfile(dockerfile.read_text()))
    shutil.make_archive(str(out_dir / "student-bundle"), "zip", out_dir, "student-bundle")
    return bundle


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "dist")
    bundle = build(out)
    print(f"student bundle: {bundle}/ and {out / 'student-bundle.zip'}")
