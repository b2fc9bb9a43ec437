"""Test setup: without a CUDA GPU, Triton kernels run in the CPU interpreter.

TRITON_INTERPRET must be set before triton is first imported, so it is set here.
"""

import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
DEVICE = "cuda" if HAS_CUDA else "cpu"

# Student files used as fixtures (some are named like tests: w8a8_os_exit_mid_test.py)
# are data, never collected.
collect_ignore_glob = ["fixtures/*", "variants/*"]


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: also runs on a GPU, where it grades on the GPU "
                                       "(python -m pytest -m gpu there; without CUDA it runs on the CPU)")
