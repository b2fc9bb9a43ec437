"""Build a Gradescope autograder zip: python -m tools.gradescope_zip OUT.zip  (make gradescope).

Gradescope unpacks it in /autograder/source, runs setup.sh once when the image
is built and run_autograder for every submission; run_autograder grades
/autograder/submission with the same grader and writes
/autograder/results/results.json through grader/gradescope.py, which keeps the
run within the rubric's gradescope_budget_s and writes a results.json whatever
happens. Gradescope's machines have no GPU by default, so the score there is
the correctness part; performance tests are left out or informational
(the rubric's gradescope_performance).
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from tools.dist import ROOT

# Gradescope runs everything as root. The `student` user made here runs the
# submission: grader/harness/sandbox.py drops to it (setpriv) by itself, and the
# grader's own files are made unreadable to it.
SETUP = """#!/usr/bin/env bash
set -euo pipefail
apt-get update && apt-get install -y python3 python3-pip python3-venv make util-linux
cd /autograder/source
python3 -m pip install --index-url https://download.pytorch.org/whl/cpu torch
python3 -m pip install -r requirements.txt
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
FILES = ["assignment", "grader", "requirements.txt", "Makefile", "tools/__init__.py", "tools/setup_env.sh"]


def build(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in FILES:
            src = ROOT / name
            paths = [p for p in sorted(src.rglob("*")) if p.is_file()] if src.is_dir() else [src]
            for p in paths:
                if "__pycache__" not in p.parts:
                    zf.write(p, p.relative_to(ROOT).as_posix())
        for name, text in (("setup.sh", SETUP), ("run_autograder", RUN)):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16
            zf.writestr(info, text)
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "dist/gradescope.zip")
    print(f"Gradescope autograder: {build(target)}")
