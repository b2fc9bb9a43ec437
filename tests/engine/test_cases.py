"""Every graded case tests what its name says, on its CPU shape and its GPU shape.

A case named empty_block_rows must have some empty block rows and some full
ones; one named k_tail a K that no tile size divides; and so on. The inputs
are built for real (the GPU shapes too, on the CPU: they are only drawn, not
multiplied) and the property is checked on the tensors the grader would use.
"""

import pytest
import torch

from grader.rubric import load_rubric
from tests.helpers import make_inputs

RUBRIC = load_rubric()
CASES = [(t, where, shape) for t in RUBRIC.tests if t.kind == "correctness"
         for where, shape in (("cpu", t.cpu_shape), ("gpu", t.shape)) if shape is not None]
# The GPU shapes' inputs are drawn at full size: seconds each on a CPU (make test-fast leaves them out).
PARAMS = [pytest.param(*case, marks=[pytest.mark.slow] if case[1] == "gpu" else [], id=f"{case[0].name}-{case[1]}")
          for case in CASES]


def _block_rows(bsr):
    counts = bsr.crow_indices().diff()
    return int((counts == 0).sum()), int((counts > 0).sum())


def _properties(spec, shape, args) -> dict[str, bool]:
    """name fragment -> does the property hold on these inputs."""
    M, N, K = shape
    x = args[0]
    props = {}
    case = spec.name.split("/", 1)[1]
    if "m1" in case.split("_"):
        props["M = 1"] = M == 1
    if "ragged" in case:
        props["M not a multiple of 16"] = M % 16 != 0
    if "nonsquare" in case:
        props["N != K"] = N != K
    if case.startswith("large"):
        props["more than one 128-row tile"] = M > 128
    if "zero_rows" in case:
        zero = int((x.abs().amax(dim=1) == 0).sum())
        props["some rows of x zero, some not"] = 0 < zero < M
    if "odd_k" in case or "k_tail" in case:
        props["K not a multiple of 32"] = K % 32 != 0
    if "ties" in case:
        t = x.float() / args[2]
        props["exact ties x / s = k + 1/2"] = bool((t == torch.floor(t) + 0.5).any())
        props["values past the int8 range (clamping)"] = bool((t.abs() > 127.5).any())
        props["power-of-two scales (ties must round half to even)"] = bool(
            (torch.frexp(args[2]).mantissa == 0.5).all())
    if "fp16_scales" in case:
        props["both scales float16, none of them 0"] = all(
            s.dtype == torch.float16 and bool((s > 0).all()) for s in args[2:4])
    if "group" in case:
        props["at least two groups along K"] = args[2].shape[0] >= 2
    if spec.task == "dds":
        empty, full = _block_rows(args[1])
        nnz = args[1].values().shape[0]
        blocks = (N // 32) * (K // 32)
        if "empty_matrix" in case:
            props["no stored block"] = nnz == 0
        if "full_matrix" in case:
            props["every block stored"] = nnz == blocks
        if "density" in case:
            props["some blocks stored, not all"] = 0 < nnz < blocks
        if "empty_block_rows" in case:
            props["some block rows empty, some not"] = empty > 0 and full > 0
        if "int32" in case:
            props["int32 indices"] = args[1].crow_indices().dtype == torch.int32
    return props


@pytest.mark.parametrize("spec,where,shape", PARAMS)
def test_case_has_its_property(spec, where, shape):
    args, _ = make_inputs(spec.task, shape, spec.options, seed=7, device="cpu")
    props = _properties(spec, shape, args)
    assert props, f"{spec.name}: no property known for this case name; add one to this test"
    failed = [p for p, ok in props.items() if not ok]
    assert not failed, f"{spec.name} on its {where} shape {list(shape)} lacks: {failed}"


def test_w8a8_cases_call_the_kernel_with_both_scale_dtypes():
    """The contract takes fp32 or fp16 scales (the course's own layers compute fp16
    ones): the graded cases give the kernel each, both scales of a call alike."""
    seen = set()
    for spec in RUBRIC.tests_for("w8a8", "correctness"):
        args, _ = make_inputs("w8a8", spec.cpu_shape, spec.options, seed=7, device="cpu")
        assert args[2].dtype == args[3].dtype, spec.name
        seen.add(args[2].dtype)
    assert seen == {torch.float32, torch.float16}
