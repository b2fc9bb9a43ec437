"""Quantized and sparse matrix multiplication in Triton: the three layers and their kernels."""

from .dds import dds_mm
from .layers import QuantizedLinear_w8a8, QuantLinear_w4a16, SparseLinear
from .w4a16 import w4a16_mm
from .w8a8 import w8a8_mm

__all__ = [
    "QuantizedLinear_w8a8", "QuantLinear_w4a16", "SparseLinear",
    "w8a8_mm", "w4a16_mm", "dds_mm",
]
