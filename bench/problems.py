"""Random problem instances for the benchmark and the config sweep: the
grader's own inputs (each task's make_inputs, grader/tasks/), on the GPU."""

from __future__ import annotations

import random

from grader.tasks import get


def problem(task: str, shape, device: str = "cuda", **options):
    """(kernel arguments..., fp16 weight [N, K]) with fresh random values on the GPU (or ``device``)."""
    args, extras = get(task).make_inputs(shape, options, random.randrange(2**31), device)
    return (*args, extras["weight"])


def w8a8_problem(M: int, N: int, K: int):
    """(x, qweight_t, input_scale, weight_scale, fp16 weight [N, K])."""
    return problem("w8a8", (M, N, K))


def w4a16_problem(M: int, N: int, K: int, group_size: int | None = None):
    """(x, qweight, scales, fp16 weight [N, K])."""
    return problem("w4a16", (M, N, K), group_size=group_size)


def dds_problem(M: int, N: int, K: int, density: float):
    """(x, weight_bsr, dense fp16 weight with the zero blocks)."""
    return problem("dds", (M, N, K), density=density)
