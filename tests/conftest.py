"""Test setup: without a CUDA GPU, Triton kernels run in the CPU interpreter.

TRITON_INTERPRET must be set before triton is first imported, so it is set here.

Two tiers: ``make test`` runs every test, ``make test-fast`` those not marked
``slow`` (``-m "not slow"``). A test that grades, here or through a command it
runs, starts grading workers in the interpreter (seconds to minutes each): it
is marked ``slow`` (``pytestmark = pytest.mark.slow`` for a whole module). A test
not so marked that starts a worker in this process fails, in either tier, and
says so (``_unmarked_grading``): the fast tier cannot grow a grade unnoticed.
"""

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
DEVICE = "cuda" if HAS_CUDA else "cpu"

# Student files used as fixtures (some are named like tests: w8a8_os_exit_mid_test.py)
# are data, never collected; so is tests/idioms/ (the idiom corpus and its check script).
collect_ignore_glob = ["fixtures/*", "variants/*", "idioms/*"]


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: also runs on a GPU, where it grades on the GPU "
                                       "(python -m pytest -m gpu there; without CUDA it runs on the CPU)")
    config.addinivalue_line("markers", "slow: grades in the CPU interpreter (starts grading workers, here or "
                                       "through a command) or runs long otherwise; make test-fast leaves it out")
    _watch_workers()


_current: list = []          # the test item whose setup, call or teardown is running
_unmarked_grading: set = set()   # node ids of tests that started a worker without the slow mark


def _watch_workers() -> None:
    """Wrap the one place a grading worker starts (``Session.__init__``): in a test
    not marked slow it is refused, and the test is failed at its teardown."""
    from grader.harness.session import Session

    start = Session.__init__

    def watched(self, *args, **kwargs):
        item = _current[-1] if _current else None
        if item is not None and item.get_closest_marker("slow") is None:
            _unmarked_grading.add(item.nodeid)
            raise RuntimeError(f"{item.nodeid} starts a grading worker: mark it @pytest.mark.slow")
        start(self, *args, **kwargs)

    Session.__init__ = watched


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current.append(item)
    try:
        yield
    finally:
        _current.pop()


@pytest.fixture(autouse=True)
def _grading_is_marked_slow(request):
    yield
    if request.node.nodeid in _unmarked_grading:
        pytest.fail(f"{request.node.nodeid} starts a grading worker in the interpreter but is not marked slow "
                    "(@pytest.mark.slow, or pytestmark = pytest.mark.slow for the module): make test-fast "
                    "runs only tests that grade nothing", pytrace=False)
