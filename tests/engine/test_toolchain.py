"""One toolchain (grader/toolchain.py, toolchain.txt): the pins are the grading GPU's, every
installer uses them, a CPU grade in an environment whose own Triton is newer compiles with the
grading Triton, and where it cannot, every report's first lines say so."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader import toolchain
from grader.report import md_inline, write_reports
from grader.rubric import DEFAULT_RUBRIC, load_rubric
from grader.worker import fence
from tests.fakes import ROOT, rubric, rubric_toml

PINS = toolchain.pins()


def _newest_results() -> dict:
    """The newest GPU results file (results/<date>-<gpu>.json): its date, GPU and versions."""
    files = [json.loads(p.read_text()) for p in (ROOT / "results").glob("*.json")]
    files = [f for f in files if isinstance(f, dict) and f.get("gpu") and isinstance(f.get("versions"), dict)]
    return max(files, key=lambda f: f["date"])


# ----------------------------------------------------------------------------- the pins


def test_the_pins_are_the_newest_gpu_results_toolchain():
    versions = _newest_results()["versions"]
    assert PINS["triton"] == versions["triton"]
    assert PINS["torch"] == toolchain.public(versions["torch"])
    if "numpy" in versions:
        assert PINS["numpy"] == versions["numpy"]


def test_the_rubric_was_calibrated_with_the_pinned_toolchain_and_fence_was_tested_on_it():
    calibrated = load_rubric(DEFAULT_RUBRIC).settings.toolchain
    assert {k: toolchain.public(v) for k, v in calibrated.items()} == {k: PINS[k] for k in calibrated}
    assert fence.TESTED_ON == {"cuda": (PINS["triton"],), "cpu": (PINS["triton"],)}


def test_this_environment_is_the_pinned_toolchain():
    """make test (and CI) install with -c toolchain.txt: the suite runs on the grading toolchain."""
    assert toolchain.check() == []
    assert subprocess.run([sys.executable, "-m", "grader.toolchain", "--check"], cwd=ROOT).returncode == 0


@pytest.mark.parametrize("text, words", [
    ("torch==2.11.0\ntriton==3.6.0\n", "pins no numpy"),
    ("torch==2.11.0\ntriton>=3.6\nnumpy==2.3.5\n", ":3: expected one 'name==version'"),
    ("torch==2.11.0\ntriton==3.6.0\ntriton==3.9.0\nnumpy==2.3.5\n", ":4: expected"),
    ("torch==2.11.0\ntriton==3.6.0\nnumpy==2.3.5\nscipy==1.0\n", ":5: expected"),
])
def test_a_malformed_pin_file_is_named(tmp_path, text, words):
    path = tmp_path / "toolchain.txt"
    path.write_text("# comment\n" + text)
    with pytest.raises(toolchain.ToolchainError, match=re.escape(words)):
        toolchain.pins(path)


def test_a_local_label_satisfies_the_pin_as_for_pip():
    assert toolchain.same("2.11.0+cpu", "2.11.0") and toolchain.same("2.11.0", "2.11.0")
    assert not toolchain.same("2.11.1", "2.11.0") and not toolchain.same(None, "2.11.0")


def test_every_installer_installs_from_the_pin_file(tmp_path):
    """make setup and make test (CI: .ci/run is make test), the Dockerfile, the Gradescope zip's
    setup.sh and the student bundle all install with -c toolchain.txt, and ship it."""
    setup = re.sub(r"\\\n\s*", " ", (ROOT / "tools" / "setup_env.sh").read_text())   # continued lines joined
    installs = [line for line in setup.splitlines() if not line.lstrip().startswith(("#", "PIP=(", "echo"))
                and ("pip install" in line or '"${PIP[@]}"' in line)]
    # each with the pin file as constraints, or with the exact pinned version read from it
    assert len(installs) == 5 and all('-c "$CONSTRAINTS"' in line or re.search(r"==\$(TORCH|TRITON)\b", line)
                                      for line in installs), installs
    assert "CONSTRAINTS=toolchain.txt" in setup
    makefile = (ROOT / "Makefile").read_text()
    assert "bash tools/setup_env.sh" in makefile and "make test" in (ROOT / ".ci" / "run").read_text()
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir -r requirements.txt -c toolchain.txt" in dockerfile
    assert "python -m grader.toolchain --check" in dockerfile and "toolchain.txt" in dockerfile.split(
        "COPY requirements.txt", 1)[1].splitlines()[0]
    from tools.gradescope_zip import build as build_zip
    with zipfile.ZipFile(build_zip(tmp_path / "gs.zip")) as zf:
        assert zf.read("toolchain.txt") == (ROOT / "toolchain.txt").read_bytes()
        script = zf.read("setup.sh").decode()
    assert all("-c toolchain.txt" in line for line in script.splitlines() if "pip install" in line)
    assert "grader.toolchain --check" in script
    from tools.dist import INCLUDE
    assert "toolchain.txt" in INCLUDE


# ----------------------------------------------------------------------------- make setup with NO_VENV=1

FAKE_PYTHON = r'''#!/usr/bin/env bash
# Stands in for a Python environment: versions from FAKE_VERSIONS ("torch=2.10.0 numpy=2.3.5 ...");
# "-m pip install ... --target DIR triton==V" installs a fake Triton V there.
case "$1" in
  -c) exit 0 ;;
  -) read -r -d '' _ ; for kv in $FAKE_VERSIONS; do [ "${kv%%=*}" = "$2" ] && echo "${kv#*=}"; done; exit 0 ;;
  -m) shift; shift; shift; dir=""; spec=""
      while [ $# -gt 0 ]; do case "$1" in --target) dir=$2; shift ;; triton==*) spec=$1 ;; esac; shift; done
      [ -n "$FAKE_NO_NETWORK" ] && exit 1
      mkdir -p "$dir/triton" "$dir/triton-${spec#triton==}.dist-info"; exit 0 ;;
esac
exit 3
'''


def _setup(tmp_path, versions: str, **env):
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    run_env = {**os.environ, "NO_VENV": "1", "PYTHON": str(fake), "FAKE_VERSIONS": versions,
               "GRADER_TOOLCHAIN_DIR": str(tmp_path / "tc"), **env}
    return subprocess.run(["bash", "tools/setup_env.sh"], cwd=ROOT, env=run_env, capture_output=True, text=True)


def _versions(**over) -> str:
    return " ".join(f"{k}={v}" for k, v in {**PINS, **over}.items())


@pytest.mark.skipif(sys.platform != "linux", reason="the grading Triton has Linux wheels only")
def test_no_venv_setup_refuses_another_torch_or_numpy_and_installs_the_grading_triton_beside_another(tmp_path):
    done = _setup(tmp_path, _versions(torch="2.11.0+cpu"))
    assert done.returncode == 0 and not (tmp_path / "tc").exists(), done.stderr
    refused = _setup(tmp_path, _versions(numpy="2.4.1", torch="2.10.0"))
    assert refused.returncode == 1
    assert "torch 2.10.0 (pinned 2.11.0), numpy 2.4.1 (pinned 2.3.5)" in refused.stderr, refused.stderr
    assert "ALLOW_OTHER_TOOLCHAIN=1" in refused.stderr
    allowed = _setup(tmp_path, _versions(numpy="2.4.1"), ALLOW_OTHER_TOOLCHAIN="1")
    assert allowed.returncode == 0 and "WARNING" in allowed.stderr and "report says so" in allowed.stderr
    beside = _setup(tmp_path, _versions(triton="3.9.0"))
    side = tmp_path / "tc" / f"triton-{PINS['triton']}"
    assert beside.returncode == 0 and "installing the grading Triton" in beside.stdout, beside.stderr
    assert toolchain.version_in(side, "triton") is None   # the fake's dist-info has no METADATA ...
    assert (side / f"triton-{PINS['triton']}.dist-info").is_dir()   # ... but it is where the real one goes
    shutil.rmtree(tmp_path / "tc")
    offline = _setup(tmp_path, _versions(triton="3.9.0"), FAKE_NO_NETWORK="1")
    assert offline.returncode == 0 and "could not install Triton" in offline.stderr and "every report says so" \
        in offline.stderr


# ----------------------------------------------------------------------------- the reports' first lines


def test_report_lines_name_what_differs():
    act = toolchain.Activation(device="cpu", pins=PINS, why="No grading Triton in .toolchain/triton-3.6.0")
    lines = toolchain.report_lines("cpu", {**PINS, "triton": "3.9.0"}, None, act)
    assert len(lines) == 1 and lines[0].startswith(f"Compiled with Triton 3.9.0, not the grading GPU's Triton "
                                                   f"{PINS['triton']}")
    assert "describe another compiler's code" in lines[0] and "No grading Triton in" in lines[0]
    assert toolchain.report_lines("cpu", {**PINS, "torch": "2.11.0+cpu"}, None, act) == []
    numpy = toolchain.report_lines("cpu", {**PINS, "numpy": "2.4.1"}, None, act)
    assert len(numpy) == 1 and "numpy 2.4.1, not the grading toolchain's numpy 2.3.5" in numpy[0]
    calibrated = {"torch": "2.11.0+cu130", "triton": PINS["triton"]}
    assert toolchain.report_lines("cuda", {**PINS, "torch": "2.11.0+cu130"}, calibrated, act) == []
    gpu = toolchain.report_lines("cuda", {**PINS, "torch": "2.12.0+cu130"}, calibrated, act)
    assert len(gpu) == 1 and "calibrated with torch 2.11.0+cu130" in gpu[0] and "This GPU runs torch 2.12.0" in gpu[0]


def test_every_report_leads_with_the_toolchain_warning(tmp_path):
    from grader.gradescope import merge
    from grader.report import error_result, terminal_table
    warning = "Compiled with Triton 3.9.0, not the grading GPU's Triton 3.6.0 (toolchain.txt): ..."
    result = dataclasses.replace(error_result(rubric(), "sub", "x"), toolchain_warnings=[warning])
    write_reports(result, tmp_path)
    md = (tmp_path / "report.md").read_text().splitlines()
    assert md[2] == f"> **Toolchain.** {md_inline(warning, 1000)}"   # under the title: the first thing read
    data = json.loads((tmp_path / "report.json").read_text())
    assert next(iter(data)) == "toolchain_warnings" and data["toolchain_warnings"] == [warning]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["output"].splitlines()[0] == f"Toolchain: {warning}"
    assert terminal_table(result).splitlines()[0] == f"toolchain: {warning}"
    merged = merge([data, {**data, "toolchain_warnings": [warning, "another"]}], [], True, 1, 1.0)
    assert merged.toolchain_warnings == [warning, "another"]


# ----------------------------------------------------------------------------- a newer Triton in the environment


def _pip_target(target: Path, spec: str) -> str | None:
    """pip install --target (no dependencies); None when done, else why not (the network)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q",
                           "--no-deps", "--target", str(target), spec], capture_output=True, text=True,
                          timeout=900)
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["pip failed"])[-1]


def _link_or_copy(src, dst) -> None:
    """A hard link (no data copied), or a copy where there can be none (another file system,
    a file of another user)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _link_tree(src: Path, dst: Path, ignore=None) -> None:
    shutil.copytree(src, dst, copy_function=_link_or_copy, symlinks=True, ignore=ignore)


def _site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


@pytest.fixture(scope="module")
def newer_env():
    """(python, grading Triton's folder): a virtual environment holding everything this one
    holds (hard links of its site-packages) but a Triton newer than the pinned one, from PyPI
    (TOOLCHAIN_TEST_TRITON: a --target folder holding one, to skip the download); and the
    pinned Triton in a folder of its own, as make setup leaves it beside such an environment."""
    import triton
    if not toolchain.same(triton.__version__, PINS["triton"]):
        pytest.skip(f"this environment runs Triton {triton.__version__}, not the pinned {PINS['triton']}")
    here = Path(triton.__file__).resolve().parent.parent
    work = Path(tempfile.mkdtemp(prefix="toolchain-test-"))
    try:
        work.chmod(0o755)
        newer = Path(os.environ.get("TOOLCHAIN_TEST_TRITON") or work / "newer")
        if "TOOLCHAIN_TEST_TRITON" not in os.environ:
            why = _pip_target(newer, "triton")
            if why is not None:
                pytest.skip(f"PyPI is unreachable, so no newer Triton to test with: {why}")
        version = toolchain.version_in(newer, "triton")
        if version is None or tuple(map(int, re.findall(r"\d+", version)[:3])) <= \
                tuple(map(int, re.findall(r"\d+", PINS["triton"])[:3])):
            pytest.skip(f"PyPI's newest Triton ({version}) is not newer than the pinned {PINS['triton']}")
        env = work / "env"
        base = Path(getattr(sys, "_base_executable", sys.executable))
        system = "include-system-site-packages = true" in (Path(sys.prefix) / "pyvenv.cfg").read_text() \
            if (Path(sys.prefix) / "pyvenv.cfg").exists() else True
        subprocess.run([str(base), "-m", "venv", "--without-pip", *(["--system-site-packages"] if system else []),
                        str(env)], check=True)
        site = _site_packages(env)
        if sys.prefix != sys.base_prefix:   # this environment's own packages, Triton left out
            site.rmdir()
            _link_tree(here, site, ignore=lambda d, names: [n for n in names if Path(d) == here and (
                n == "triton" or re.match(r"triton-.*\.dist-info", n))])
        for item in newer.iterdir():
            if item.name == "triton" or re.match(r"triton-.*\.dist-info", item.name):
                _link_tree(item, site / item.name)
        side = work / "side" / f"triton-{PINS['triton']}"
        side.mkdir(parents=True)
        for item in here.iterdir():
            if item.name == "triton" or item.name == f"triton-{triton.__version__}.dist-info":
                _link_tree(item, side / item.name)
        python = env / "bin" / "python"
        own = subprocess.run([str(python), "-c", "import triton, torch; print(triton.__version__)"],
                             capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                                  if k != "PYTHONPATH"})
        assert own.stdout.strip() == version, own.stderr
        yield python, side.parent, version
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _grade(python: Path, out: Path, toolchain_dir: Path | None, sub: Path, rubric_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", toolchain.DIR_ENV)}
    if toolchain_dir is not None:
        env[toolchain.DIR_ENV] = str(toolchain_dir)
    proc = subprocess.run([str(python), "-m", "grader", "grade", str(sub), "--tasks", "dds", "--device", "cpu",
                           "--rubric", str(rubric_path), "--report-dir", str(out), "--seed", "7"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"json": json.loads((out / "report.json").read_text()), "stdout": proc.stdout,
            "md": (out / "report.md").read_text(), "results": json.loads((out / "results.json").read_text())}


def _table(report: dict) -> list:
    """The compile table: what each row says about the compiled code, the labels it serves."""
    return [(sorted(k["tests"]), sorted(k["cpu_tests"]), k["status"], k["loop"], k["shared_bytes"])
            for t in report["tasks"] for k in t["kernels"]]


PTX_FACTS = r'''
import importlib, json, re, sys
from collections import Counter
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime import jit
sys.path.insert(0, sys.argv[1])
jf = importlib.import_module("fx.dds")._dds_kernel
target = GPUTarget("cuda", 90, 32)
backend = make_backend(target)
M, N, K, B = 64, 256, 256, 32
x, y = torch.empty(M, K, dtype=torch.float16), torch.empty(M, N, dtype=torch.float16)
crow, col = torch.zeros(N // B + 1, dtype=torch.int64), torch.zeros(32, dtype=torch.int64)
values = torch.empty(32, B, B, dtype=torch.float16)
kwargs = dict(BLOCK_M=64, BLOCK=B, debug=False)
bound, spec, options = jit.create_function_from_signature(jf.signature, jf.params, backend)(
    x, values, crow, col, y, M, K, 1, N, 1, **kwargs)
options, signature, constexprs, attrs = jf._pack_args(backend, kwargs, bound, spec, options)
ptx = triton.compile(ASTSource(jf, signature, constexprs, attrs), target=target).asm["ptx"]
copies = re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^]]*\], \[[^]]*\], (\w+)", ptx)
print(json.dumps({"cp.async": dict(Counter(copies)),
                  "ld.global": dict(Counter(re.findall(r"\bld\.global[.a-z0-9]*", ptx)))}))
'''


def _ptx_facts(python: Path, package_root: Path, toolchain_dir: Path | None = None) -> dict:
    """What one compile of the fixture's kernel for sm_90 emits: its async copies by size and its
    global loads by width, compiled directly by ``python``'s Triton (or the one in ``toolchain_dir``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    if toolchain_dir is not None:
        env["PYTHONPATH"] = str(toolchain_dir)
    proc = subprocess.run([str(python), "-c", PTX_FACTS, str(package_root)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow   # three CPU grades through python -m grader grade
def test_a_cpu_run_compiles_with_the_grading_triton_whatever_the_environment_holds(tmp_path, newer_env):
    """An environment whose own Triton is newer than the pinned one: its CPU grade reports what
    the pinned compiler emits for a kernel with gathered 2-D loads (the same compile table as a
    grade on the pinned toolchain itself), and where the grading Triton is not to be had, every
    report's first line says that the table describes another compiler's code."""
    python, side, newer = newer_env
    fixture = ROOT / "tests" / "fixtures" / "toolchain" / "dds.py"
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copyfile(fixture, sub / "dds.py")
    package = tmp_path / "pkg" / "fx"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copyfile(ROOT / "assignment" / "utils.py", package / "utils.py")
    shutil.copyfile(fixture, package / "dds.py")
    pinned_facts = _ptx_facts(Path(sys.executable), package.parent)
    newer_facts = _ptx_facts(python, package.parent)
    assert pinned_facts != newer_facts, "the fixture's kernel compiles alike with both Tritons: it shows nothing"
    assert _ptx_facts(python, package.parent, side / f"triton-{PINS['triton']}") == pinned_facts
    rubric_path = tmp_path / "rubric.toml"
    rubric_path.write_text(rubric_toml(tasks=("dds",)))

    pinned = _grade(Path(sys.executable), tmp_path / "pinned", None, sub, rubric_path)
    graded = _grade(python, tmp_path / "newer", side, sub, rubric_path)
    assert pinned["json"]["versions"]["triton"] == graded["json"]["versions"]["triton"] == PINS["triton"]
    assert f"this environment's own: {newer}" in graded["json"]["versions"]["toolchain"]
    assert graded["json"]["toolchain_warnings"] == [] and pinned["json"]["toolchain_warnings"] == []
    table = _table(graded["json"])
    assert table and all(row[2] == "ok" and row[3] for row in table)
    assert any(row[0] for row in table), "the GPU shape was not captured: the capture is off with this Triton"
    assert table == _table(pinned["json"])
    assert graded["json"]["score"] == pinned["json"]["score"] > 0

    # No grading Triton beside the environment: the grade goes on, and says so first, everywhere.
    other = _grade(python, tmp_path / "other", tmp_path / "empty", sub, rubric_path)
    assert other["json"]["versions"]["triton"] == newer
    first = other["json"]["toolchain_warnings"]
    assert len(first) == 1 and first[0].startswith(f"Compiled with Triton {newer}, not the grading GPU's Triton")
    assert "the compile table and the speed estimate describe another compiler's code" in first[0]
    assert next(iter(other["json"])) == "toolchain_warnings"
    assert other["md"].splitlines()[2].startswith(f"> **Toolchain.** Compiled with Triton {newer}")
    assert other["results"]["output"].startswith(f"Toolchain: Compiled with Triton {newer}")
    assert other["stdout"].startswith(f"toolchain: Compiled with Triton {newer}")
    assert _table(other["json"]) != table


def test_a_workers_pythonpath_is_its_packages_and_the_grading_triton_only(monkeypatch):
    # Nothing of the grading process's own PYTHONPATH: a worker imports what its environment holds.
    monkeypatch.setenv("PYTHONPATH", "/somewhere/pinned-numpy")
    monkeypatch.setattr(toolchain, "_ACTIVE", None)
    assert toolchain.worker_pythonpath("/stage") == "/stage"
    assert toolchain.worker_pythonpath() == ""
    monkeypatch.setattr(toolchain, "_ACTIVE", SimpleNamespace(side="/grading-triton"))
    assert toolchain.worker_pythonpath("/stage") == os.pathsep.join(["/stage", "/grading-triton"])
