"""Where each kernel argument lives inside a shared byte buffer (an "arena").

The harness owns the arena: a file mapped by both processes on the CPU, a
CUDA allocation shared through a file descriptor on a GPU (vmm.py). It writes the inputs into
it and reads the outputs out of it; the worker only gets a description of
the arguments (JSON: offset, dtype, shape, strides) and rebuilds them as
views of the same memory with ``build``. The description is data from the
trusted side, so nothing here parses what the submission says.

    tensor spec   {"offset": bytes, "dtype": "float16", "shape": [...], "stride": [...]}
    argument      {"tensor": spec} | {"bsr": {"crow": spec, "col": spec, "values": spec,
                                               "size": [N, K]}}

This file runs on both sides of the boundary and depends on torch only.
"""

from __future__ import annotations

import warnings

import torch

DTYPES = {"float16": torch.float16, "float32": torch.float32, "int8": torch.int8,
          "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8}
ALIGN = 256  # bytes: every tensor starts on a boundary that vectorized loads and TMA accept


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def view(arena: torch.Tensor, spec: dict) -> torch.Tensor:
    """The tensor ``spec`` describes, as a view of ``arena`` (uint8, 1-D)."""
    dtype = DTYPES[spec["dtype"]]
    size = torch.empty((), dtype=dtype).element_size()
    offset = int(spec["offset"])
    if offset % size:
        raise ValueError(f"misaligned offset {offset} for {dtype}")
    usable = arena.numel() // size * size
    typed = arena[:usable].view(dtype)
    return typed.as_strided(tuple(spec["shape"]), tuple(spec["stride"]), offset // size)


def build(arena: torch.Tensor, arg: dict):
    """One kernel argument (tensor or sparse BSR tensor) from its description."""
    if "tensor" in arg:
        return view(arena, arg["tensor"])
    bsr = arg["bsr"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse BSR support is in beta"
        return torch.sparse_bsr_tensor(view(arena, bsr["crow"]), view(arena, bsr["col"]),
                                       view(arena, bsr["values"]), size=tuple(bsr["size"]),
                                       check_invariants=False)
