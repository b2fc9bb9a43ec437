"""These tests need the grader's outputs: run them through `make grade`.

Collected by a plain `pytest` run (say, at the root of the student bundle),
they are skipped with that advice instead of failing on missing fixtures.
"""

import pytest

from grader.pytest_plugin import GradingPlugin


def pytest_collection_modifyitems(config, items):
    if not any(isinstance(p, GradingPlugin) for p in config.pluginmanager.get_plugins()):
        skip = pytest.mark.skip(reason="graded tests run through the grader: use `make grade`")
        for item in items:
            item.add_marker(skip)
