"""The reference solutions: the three kernel files, complete, as a submission holds them.

layers.py, utils.py and course_compat.py are assignment's own: this package's
path ends with assignment/, so ``solutions.layers``, ``solutions.utils`` and
``solutions.course_compat`` are those files loaded as modules of this package,
and their relative imports (``.w8a8``, ``.utils``) reach the kernels here. The grader, which stages one kernel file
per task next to its own utils.py, reads only the kernel files."""

from pathlib import Path

__path__.append(str(Path(__file__).resolve().parent.parent / "assignment"))

from .dds import dds_mm  # noqa: E402
from .layers import QuantizedLinear_w8a8, QuantLinear_w4a16, SparseLinear  # noqa: E402
from .w4a16 import w4a16_mm  # noqa: E402
from .w8a8 import w8a8_mm  # noqa: E402

__all__ = [
    "QuantizedLinear_w8a8", "QuantLinear_w4a16", "SparseLinear",
    "w8a8_mm", "w4a16_mm", "dds_mm",
]
