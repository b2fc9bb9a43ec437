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
