"""Build a Gradescope autograder zip: python -m tools.gradescope_zip OUT.zip [--rubric R]  (make gradescope).

Gradescope unpacks it in /autograder/source, runs setup.sh once when the image
is built and run_autograder for every submission; run_autograder grades
/autograder/submission with the same grader and writes
/autograder/results/results.json through grader/gradescope.py, which keeps the
run within the rubric's gradescope_budget_s and writes a results.json whatever
happens. Gradescope's machines have no GPU by default, so the score there is
the correctness part; performance tests are left out or informational
(the rubric's gradescope_performance). The rubric and the zip are checked as
``make dist`` checks them (tools/dist.py): a rubric that would not grade
stops the build with one line and exit status 2. README's "Gradescope" says
which assignment settings to choose.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

from tools.dist import ROOT, BundleError, check_files, check_rubric, read_rubric

# Gradescope runs everything as root. The `student` user made here runs the
# submission: grader/harness/sandbox.py drops to it (setpriv) by itself, and the
# grader's own files are made unreadable to it.
SETUP = """#!/usr/bin/env bash
set -euo pipefail
apt-get update && apt-get install -y python3 python3-pip python3-venv make util-linux
cd /autograder/source
# The grading toolchain (toolchain.txt): the CPU build of the pinned PyTorch, then the rest.
python3 -m pip install --index-url https://download.pytorch.org/whl/cpu -c toolchain.txt torch
python3 -m pip install -r requirements.txt -c toolchain.txt
python3 -m grader.toolchain --check
id -u student >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin student
chmod -R go= /autograder/source
"""
RUN = """#!/usr/bin/env bash
# AUTOGRADER_ROOT: Gradescope's /autograder (another folder when the bundle is tested).
ROOT="${AUTOGRADER_ROOT:-/autograder}"
chmod -R go= "$ROOT/source" "$ROOT/results" 2>/dev/null
cd "$ROOT/source" || exit 1
exec python3 -m grader.gradescope --root "$ROOT"
"""
FILES = ["assignment", "grader", "requirements.txt", "toolchain.txt", "Makefile", "tools/__init__.py",
         "tools/setup_env.sh"]


def build(out: Path, rubric_path: Path | None = None) -> Path:
    """Write the zip (with ``rubric_path`` as its grader/rubric.toml); BundleError, and no zip, if the
    rubric or the zip would not grade."""
    text, source = read_rubric(rubric_path)
    rubric = check_rubric(text, source)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for name in FILES:
                src = ROOT / name
                paths = [p for p in sorted(src.rglob("*")) if p.is_file()] if src.is_dir() else [src]
                for p in paths:
                    arc = p.relative_to(ROOT).as_posix()
                    if "__pycache__" not in p.parts and arc != "grader/rubric.toml":
                        zf.write(p, arc)
            zf.writestr("grader/rubric.toml", text)
            for name, script in (("setup.sh", SETUP), ("run_autograder", RUN)):
                info = zipfile.ZipInfo(name)
                info.external_attr = 0o755 << 16
                zf.writestr(info, script)
        with zipfile.ZipFile(tmp) as zf:
            check_rubric(zf.read("grader/rubric.toml").decode("utf-8"), "the zip's grader/rubric.toml")
            check_files(zf.namelist(), rubric, "the Gradescope zip")
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.gradescope_zip", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", default="dist/gradescope.zip")
    p.add_argument("--rubric", type=Path, default=None, help="the rubric to ship (default: grader/rubric.toml)")
    args = p.parse_args(argv)
    try:
        print(f"Gradescope autograder: {build(Path(args.out), args.rubric)}")
    except BundleError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
