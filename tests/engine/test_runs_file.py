"""pytest is the judge a TA can run: a grade saves what its run brought back
(--runs-out), and `pytest grader/tests --runs FILE` reaches every rubric entry's
verdict again from it, test by test, with the message a student reads."""

import json
import re
import subprocess
import sys

import pytest

from grader.facts import Runs, load_runs, save_runs
from grader.grade import grade
from grader.judge import judge
from grader.rubric import DEFAULT_RUBRIC, load_rubric
from tests.fakes import ROOT


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A W8A8 without the clamp (fails the tie/clamp case, passes the others) and a
    DDS stub (every DDS test fails as not implemented), graded on the CPU."""
    folder = tmp_path_factory.mktemp("submission")
    (folder / "w8a8.py").write_text((ROOT / "tests" / "variants" / "w8a8_bug_no_clamp.py").read_text())
    (folder / "dds.py").write_text((ROOT / "assignment" / "dds.py").read_text())
    runs_file = tmp_path_factory.mktemp("runs") / "runs.json"
    result = grade(folder, load_rubric(DEFAULT_RUBRIC), seed=21, device="cpu", tasks=["w8a8", "dds"],
                   log=lambda *_: None, runs_out=runs_file)
    return result, runs_file


def _pytest(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "grader/tests", "-p", "no:cacheprovider", "-rA", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_saved_run_is_judged_again_to_the_same_verdicts(saved):
    result, runs_file = saved
    runs = load_runs(runs_file)
    assert isinstance(runs, Runs) and set(runs.tasks) == {"w8a8", "dds"}
    judgment = judge(runs, load_rubric(DEFAULT_RUBRIC))
    for test in result.tests:
        assert judgment.tests[test.name].passed == (test.status == "passed"), test.name
        assert judgment.tests[test.name].message.split("\n")[0] == test.message.split("\n")[0], test.name


@pytest.mark.slow
def test_a_ta_runs_the_rubric_tests_on_a_saved_run(saved):
    result, runs_file = saved
    ran = _pytest("--runs", str(runs_file), "-k", "w8a8", "-v")
    outcomes = dict(re.findall(r"test_rubric\[(\S+)\] (PASSED|FAILED|SKIPPED)", ran.stdout))
    w8a8 = {t.name: t for t in result.tests if t.task == "w8a8"}
    assert set(outcomes) == set(w8a8), ran.stdout[-2000:]
    for name, test in w8a8.items():
        want = {"passed": "PASSED", "not_run": "SKIPPED"}.get(test.status, "FAILED")
        assert outcomes[name] == want, (name, test.status, ran.stdout[-3000:])
    assert "likely cause: no clamp" in ran.stdout   # the verdict's message, as the report says it
    assert ran.returncode == 1


@pytest.mark.slow
def test_without_a_runs_file_the_tests_say_how_to_get_one(tmp_path):
    ran = _pytest()
    assert ran.returncode == 0 and "--runs-out" in ran.stdout, ran.stdout[-1000:]
    bad = tmp_path / "runs.json"
    bad.write_text(json.dumps({"format": 99}))
    ran = _pytest("--runs", str(bad))
    assert ran.returncode != 0 and "not a runs file" in ran.stderr + ran.stdout


@pytest.mark.slow
def test_the_runs_file_is_the_tas_not_the_students(saved, tmp_path):
    """It holds the hidden tests' facts: readable by its owner and their group only; it
    round-trips unchanged."""
    result, runs_file = saved
    assert oct(runs_file.stat().st_mode & 0o777) == "0o640"
    again = tmp_path / "again.json"
    save_runs(load_runs(runs_file), again)
    assert json.loads(again.read_text()) == json.loads(runs_file.read_text())
