"""Docs that are generated stay in step with their data."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_threshold_table_matches_the_results_files_and_the_rubric():
    proc = subprocess.run([sys.executable, "-m", "tools.render_results", "--check"], cwd=ROOT)
    assert proc.returncode == 0, "docs/grading.md is out of date: run python -m tools.render_results"
