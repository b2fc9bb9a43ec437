"""What the grader knows about one task, as one object: the interface every task module fills in.

A task module (``grader/tasks/w8a8.py`` and its siblings) builds one
``Task`` and the registry (``grader/tasks/__init__.py``) collects them. The
rest of the grader asks the registry; nothing else keeps a list of tasks:

- the rubric's validation: the case options a test may set, the shapes a task accepts;
- the harness: the inputs of a call, which of them are activations, their names;
- the judge: the exact reference, the tolerance, the sanity bound, the likely causes of a failure;
- the data-movement table and the timing floor: the bytes and FLOPs a call cannot avoid;
- the submission loader and the static check: the kernel file and its entry point.

Everything here runs in the trusted grading process; the worker never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch


@dataclass(frozen=True)
class Option:
    """A case option a rubric test may set (``ties = true``, ``density = 0.25``).

    ``kind`` is "int", "bool", "number" or "choice"; ``low`` and ``high`` bound
    a number (``high`` holds the choices of a "choice"); ``default`` is what a
    case gets when the rubric does not set it.
    """
    kind: str
    low: float | None = None
    high: Any = None
    default: Any = None
    help: str = ""


# A diagnosis check: (y, ref, bad, bound, blank, finite, args) -> cause id and
# fields, or None. See grader/diagnose.py for the arguments and the stages.
Signature = Callable[..., "tuple[str, dict] | None"]


@dataclass(frozen=True)
class Task:
    """One kernel of the assignment, everything the grader needs to know about it."""

    name: str                       # the rubric's [tasks.<name>] and every report's key
    file: str                       # the kernel file a submission provides
    entry: str                      # the function in it the grader calls
    title: str                      # the default title of its report section
    handout_section: str            # the handout heading of this task (likely causes point there)
    arg_names: tuple[str, ...]      # the entry point's arguments, in order (a BSR weight's parts
                                    # are "<name>.crow_indices", "<name>.col_indices", "<name>.values")
    activation_args: tuple[int, ...]  # which arguments are a call's activations (fresh every timed
                                      # call); the others are the layer's weights
    options: Mapping[str, Option]

    # (M, N, K, generator, **options) -> (args of the entry point, extras). The
    # generator lives on the device the kernel runs on, and the caller sets that
    # device as the default, so factory calls allocate there. extras["weight"]
    # is the unquantized fp16 [N, K] weight: the sanity check and the baseline use it.
    build_inputs: Callable[..., tuple[tuple, dict]]
    # (args: {argument index: tensor}, generator) -> None: new random activations
    # in place, with whatever follows them (W8A8's per-token scale).
    refresh_activations: Callable[[dict, torch.Generator], None]
    # (*args) -> the exact result, [M, N], float64 or fp16
    reference: Callable[..., torch.Tensor]
    # |y - ref| <= tolerance * (|ref| + rms(ref)) [+ slack], element by element (docs/grading.md)
    tolerance: float
    # ||y - x W^T|| / ||x W^T|| against the unquantized layer: the result is the layer's output
    sanity: float
    # (shape, options) -> fewest bytes each tensor of a call must move, by argument
    # name and "output": every input read once, the output written once
    floor_parts: Callable[[tuple, dict], dict[str, int]]
    # (shape, options) -> FLOPs of the product itself
    dot_flops: Callable[[tuple, dict], int]
    # (shape, options) -> why this shape cannot be a case of the task, or None
    shape_problem: Callable[[tuple, dict], "str | None"] = lambda shape, options: None
    # (*args) -> extra absolute deviation per element a faithful kernel may need
    # (W8A8: an ambiguous rounding); None: the tolerance alone
    slack: Callable[..., torch.Tensor] | None = None

    # Likely causes (grader/diagnose.py): this task's own cause texts,
    # {id: (text, handout section or None for this task's)}, and its checks by
    # stage: "first" before the generic whole-row checks, "specific" after them
    # (what the kernel computed instead), "late" before the generic column,
    # NaN-band and scale checks.
    causes: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    signatures: Mapping[str, tuple[Signature, ...]] = field(default_factory=dict)
    ragged_k: bool = True           # K need not be a multiple of a tile: a read past the end of x
                                    # shows as NaN in the last row only
    column_scale_hint: str = "scale"  # what a per-column factor points at ("weight scale")
    scale_section: str | None = None  # handout section for a wrong scale (None: handout_section)

    # (options) -> the ratio to fp16 of a kernel that misses the task's lesson, or None:
    # tools/calibrate.py places a performance test's thresholds so that a kernel at
    # this ratio earns at most half of its points (DDS at a density of 50 % or
    # less: 1.0, a sparse kernel no faster than the dense product).
    lesson_ratio: Callable[[Mapping], "float | None"] = lambda options: None

    # For the benchmark (bench/bench.py), not the grader: the cases it times,
    # ((M, N, K), options, in the --quick subset), the type its product runs in
    # on the tensor cores (the util column's peak), and library implementations
    # of the same product to time next to the reference: name -> (args, extras)
    # -> a thunk (one that raises where this PyTorch lacks the op).
    bench_cases: tuple = ()
    mma_dtype: str = "fp16"
    anchors: Mapping[str, Callable] = field(default_factory=dict)

    def defaults(self, options: Mapping) -> dict:
        """``options`` with every unset option at its default."""
        return {**{k: o.default for k, o in self.options.items()}, **options}

    def make_inputs(self, shape, options: Mapping, seed: int, device: str = "cpu") -> tuple[tuple, dict]:
        """(args for the entry point, extras), on ``device``; the same (shape,
        options, seed, device) always gives the same numbers."""
        M, N, K = shape
        with torch.device(device):  # every factory call of the builder allocates on ``device``
            return self.build_inputs(M, N, K, generator(seed, device), **self.defaults(options))

    def fresh_activations(self, args: dict, seed: int) -> None:
        """New random activations in place (``args``: argument index -> tensor)."""
        self.refresh_activations(args, generator(seed, str(args[self.activation_args[0]].device)))

    def reference_and_slack(self, args) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The exact reference on ``args`` and the slack there (None when the task has none)."""
        return self.reference(*args), (self.slack(*args) if self.slack else None)

    def minimum_bytes(self, shape, options: Mapping) -> int:
        """Fewest bytes a call must move: every input read once, the output written once."""
        return sum(self.floor_parts(shape, self.defaults(options)).values())


def generator(seed: int, device: str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)
