"""The graded tests need what a grade's run brought back.

`make grade` hands it to them in its own process (grader/judge.py). A TA can
judge a saved run again, test by test, and read each verdict:

    python -m grader grade SUBMISSION --runs-out runs.json      # TA option
    pytest grader/tests --runs runs.json [--rubric R] -k w8a8 -v

Collected by a plain `pytest` run (say, at the root of the student bundle),
they are skipped with that advice instead of failing on missing fixtures.
"""

import pytest

from grader.pytest_plugin import GradingPlugin


def pytest_addoption(parser):
    parser.addoption("--runs", default=None, metavar="FILE",
                     help="a runs file (python -m grader grade --runs-out FILE): judge it again")
    parser.addoption("--rubric", default=None, metavar="TOML",
                     help="with --runs: the rubric to judge it by (default: grader/rubric.toml)")


def pytest_configure(config):
    path = config.getoption("--runs")
    if path is None or any(isinstance(p, GradingPlugin) for p in config.pluginmanager.get_plugins()):
        return
    from grader.facts import load_runs
    from grader.judge import Judging
    from grader.rubric import DEFAULT_RUBRIC, load_rubric

    try:
        runs = load_runs(path)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise pytest.UsageError(f"--runs {path}: {e}") from None
    rubric = load_rubric(config.getoption("--rubric") or DEFAULT_RUBRIC)
    config.pluginmanager.register(GradingPlugin(Judging(runs, rubric)), "grading-runs-file")


def pytest_collection_modifyitems(config, items):
    if not any(isinstance(p, GradingPlugin) for p in config.pluginmanager.get_plugins()):
        skip = pytest.mark.skip(reason="graded tests run through the grader: use `make grade`, or judge a "
                                       "saved run with --runs FILE (python -m grader grade --runs-out FILE)")
        for item in items:
            item.add_marker(skip)
