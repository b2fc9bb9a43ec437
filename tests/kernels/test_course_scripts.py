"""The course's own benchmark scripts' correctness cases, through the compatibility module.

The course ships ``benchmark_w8a8.py``, ``benchmark_w4a16.py`` and
``benchmark_sparse.py`` (a public copy: GitHub sandytruant/aiarch-lab2).
Their code is not in this repository; each case below is rebuilt from what
the scripts do, with fresh random numbers where they draw them:

- W8A8: the layer quantizes its weight per output channel with
  ``s_w = max|w| / 127.5`` in the weight's dtype, the forward takes
  ``s_x = max|x| / 127`` per row in fp16 and calls
  ``w8a16_mm(x, qweight.T, s_x, s_w)``. Case 1: x [1, 4] by a 4 x 4 integer
  weight; case 2: x [2, 8] by a 6 x 8 weight; both weights fp16, so both
  scales are fp16. Case 3: M = 5, K = 1024, N = 2048, an fp32 ``nn.Linear``
  weight (fp32 weight scale, fp16 input scale).
- W4A16: M = 5, K = 1024, N = 2048, an fp32 ``nn.Linear`` weight; per-channel
  scales ``max|w| / 7.5`` passed as [1, N] fp16; the int4 values packed 8 per
  int32 along K (lowest k in the lowest nibble). The script divides every
  column by the first output channel's scale (``scales[g_idx]`` with
  ``g_idx = 0``), and so do these cases: they are its inputs.
- Sparse: a 1024 x 1024 fp16 weight whose elements are nonzero (Gaussian)
  with probability 0.3, 0.6, 0.9; x [1, 1024]; the BSR (32 x 32) of
  ``weight.t()`` given as ``dds_mm(x, shape, values, crow, col)``.

Every script passes a case when ``max |y - F.linear(x, w16)| <= 0.5`` against
the fp16 layer; the cases here also check the output against the grader's
exact reference on the same inputs. The W8A8 cases also pass their scales in
the other dtype: same values, same result. On the CPU this runs in the Triton
interpreter at the scripts' own sizes (seconds). The scripts themselves,
unmodified, run on a GPU with tools/run_course_scripts.sh.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from grader.compare import check_task_output
from solutions import course_compat
from tests.helpers import DEVICE

ROOT = Path(__file__).resolve().parents[2]
SEED = random.randrange(2**31)  # fresh inputs every run; printed on failure
COURSE_BOUND = 0.5  # the scripts' pass criterion: max |y - fp16 nn.Linear| <= 0.5


def _gen(offset: int = 0) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(SEED + offset)


def _linear_weight(N: int, K: int, g: torch.Generator) -> torch.Tensor:
    """fp32 [N, K] as nn.Linear initializes it: uniform in +-1/sqrt(K)."""
    return (torch.rand(N, K, generator=g, device=DEVICE) * 2 - 1) / K ** 0.5


def _course_bound(y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, what: str) -> None:
    diff = (y - F.linear(x, weight.half())).abs().max().item()
    assert diff <= COURSE_BOUND, f"{what} (seed {SEED}): max difference {diff} > {COURSE_BOUND}, the script fails"


def _exact(y: torch.Tensor, task: str, args: tuple, what: str) -> None:
    check = check_task_output(y, task, args)
    assert check.passed, f"{what} (seed {SEED}): {check.message}"


# ---------------------------------------------------------------- W8A8

def _w8a8_case(x: torch.Tensor, weight: torch.Tensor, what: str) -> None:
    weight_scale = weight.abs().amax(dim=-1, keepdim=True) / 127.5        # in the weight's dtype
    qweight = (weight / weight_scale).round().clamp(-128, 127).to(torch.int8)
    input_scale = x.abs().amax(dim=-1, keepdim=True) / 127                # fp16, as x
    args = (x, qweight.T, input_scale, weight_scale)
    y = course_compat.w8a16_mm(*args)
    _course_bound(y, x, weight, what)
    _exact(y, "w8a8", args, what)
    # The same scale values as fp16 and as fp32 tensors: one result.
    sx, sw = input_scale.half(), weight_scale.half()
    y16 = course_compat.w8a16_mm(x, qweight.T, sx, sw)
    y32 = course_compat.w8a16_mm(x, qweight.T, sx.float(), sw.float())
    assert torch.equal(y16, y32), f"{what} (seed {SEED}): fp16 and fp32 scales give two results"
    _exact(y16, "w8a8", (x, qweight.T, sx, sw), f"{what}, fp16 scales")


def test_w8a8_case1_small_integers():
    x = torch.tensor([[1, 2, 3, 4]], dtype=torch.float16, device=DEVICE)
    weight = torch.tensor([[5, -1, 2, 0], [-3, 4, 1, -2], [5, 4, 0, -6], [1, 0, -5, 3]],
                          dtype=torch.float16, device=DEVICE)
    _w8a8_case(x, weight, "W8A8 case 1")


def test_w8a8_case2_two_rows():
    x = torch.tensor([[1.0, -2.0, 3.0, 4.0, 0.5, -1.5, 2.5, 3.0],
                      [-1.0, 2.0, -3.0, -4.0, 1.5, 0.5, -2.5, -3.0]], dtype=torch.float16, device=DEVICE)
    weight = torch.tensor([[0.1, -0.2, 0.3, 0.4, -0.5, 0.6, -0.7, 0.8],
                           [-0.9, 1.0, -1.1, 1.2, -1.3, 1.4, -1.5, 1.6],
                           [0.2, -0.3, 0.4, -0.5, 0.6, -0.7, 0.8, -0.9],
                           [-1.0, 1.1, -1.2, 1.3, -1.4, 1.5, -1.6, 1.7],
                           [0.3, -0.4, 0.5, -0.6, 0.7, -0.8, 0.9, -1.0],
                           [-0.5, 0.6, -0.7, 0.8, -0.9, 1.0, -1.1, 1.2]], dtype=torch.float16, device=DEVICE)
    _w8a8_case(x, weight, "W8A8 case 2")


@pytest.mark.slow
def test_w8a8_case3_linear_layer():
    g = _gen()
    x = torch.randn(5, 1024, generator=g, device=DEVICE).half()
    _w8a8_case(x, _linear_weight(2048, 1024, g), "W8A8 case 3")


def test_w8a8_scales_of_both_dtypes_and_mixed_give_one_result():
    """fp16 and fp32 scale tensors holding the same values: one result, the reference's."""
    g = _gen(1)
    x = torch.randn(33, 96, generator=g, device=DEVICE).half()
    qweight = torch.randint(-128, 128, (64, 96), generator=g, device=DEVICE).to(torch.int8)
    sx = (x.float().abs().amax(dim=1, keepdim=True) / 127).half()
    sw = (torch.rand(64, 1, generator=g, device=DEVICE) / 100 + 1e-3).half()
    results = [course_compat.w8a16_mm(x, qweight.T, a, b)
               for a in (sx, sx.float()) for b in (sw, sw.float())]
    for y in results[1:]:
        assert torch.equal(y, results[0]), f"seed {SEED}"
    _exact(results[0], "w8a8", (x, qweight.T, sx.float(), sw.float()), "fp16 vs fp32 scales")


# ---------------------------------------------------------------- W4A16

def _course_pack(q: torch.Tensor) -> torch.Tensor:
    """[N, K] int4 values -> [K // 8, N] int32: word r holds k = 8r + j in bits 4j..4j+3."""
    q_t = q.t().to(torch.int32)
    packed = torch.zeros(q_t.shape[0] // 8, q_t.shape[1], dtype=torch.int32, device=q.device)
    for j in range(8):
        packed |= (q_t[j::8] & 0xF) << (4 * j)   # int32: the top nibble wraps into the sign bit
    return packed


@pytest.mark.slow
def test_w4a16_case_linear_layer():
    g = _gen(2)
    weight = _linear_weight(2048, 1024, g)
    scales = weight.abs().amax(dim=-1, keepdim=True) / 7.5                 # [N, 1] fp32
    q = (weight / scales[0]).round().clamp(-8, 7)                          # the script's scales[g_idx], g_idx = 0
    args = (torch.randn(5, 1024, generator=g, device=DEVICE).half(), _course_pack(q),
            scales.t().contiguous().half())
    y = course_compat.w4a16_mm(*args)
    _course_bound(y, args[0], weight, "W4A16")
    _exact(y, "w4a16", args, "W4A16")


# ---------------------------------------------------------------- DDS

def _course_sparse_call(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """y from the course's call, and W's own BSR (the grader's contract) for the exact reference."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        w_t = weight.t().to_sparse_bsr(blocksize=(32, 32))
        own = weight.to_sparse_bsr((32, 32))
    shape = torch.tensor(w_t.size())
    y = course_compat.dds_mm(x, shape, w_t.values(), w_t.crow_indices(), w_t.col_indices())
    return y, own


@pytest.mark.parametrize("nonzero", [0.3, 0.6, 0.9])
def test_sparse_cases_elementwise_density(nonzero):
    g = _gen(3)
    weight = torch.zeros(1024, 1024, device=DEVICE)
    keep = torch.rand(1024, 1024, generator=g, device=DEVICE) < nonzero
    weight[keep] = torch.randn(int(keep.sum()), generator=g, device=DEVICE)
    weight = weight.half()
    x = torch.randn(1, 1024, generator=g, device=DEVICE).half()
    y, own = _course_sparse_call(x, weight)
    _course_bound(y, x, weight, f"sparse, {nonzero} nonzero")
    _exact(y, "dds", (x, own), f"sparse, {nonzero} nonzero")


@pytest.mark.parametrize("N, K, M", [(96, 160, 33), (160, 64, 3), (64, 64, 1)])
def test_sparse_call_with_empty_blocks_and_a_nonsquare_weight(N, K, M):
    """Beyond the scripts (whose weight is square with every block stored): the
    transposed layout with empty blocks, empty block rows and N != K."""
    g = _gen(4)
    blocks = torch.rand(N // 32, K // 32, generator=g, device=DEVICE) < 0.5
    blocks[0] = False                                  # an empty block row of W
    blocks[:, -1] = False                              # and of W^T
    weight = torch.randn(N, K, generator=g, device=DEVICE)
    weight = (weight * blocks.repeat_interleave(32, 0).repeat_interleave(32, 1)).half()
    x = torch.randn(M, K, generator=g, device=DEVICE).half()
    y, own = _course_sparse_call(x, weight)
    _exact(y, "dds", (x, own), f"sparse {N}x{K}")


def test_sparse_weight_conversion_is_reused_until_the_weight_changes():
    g = _gen(5)
    weight = torch.randn(64, 96, generator=g, device=DEVICE).half()
    x = torch.randn(4, 96, generator=g, device=DEVICE).half()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        w_t = weight.t().to_sparse_bsr(blocksize=(32, 32))
    parts = (torch.tensor(w_t.size()), w_t.values().clone(), w_t.crow_indices(), w_t.col_indices())
    y1 = course_compat.dds_mm(x, *parts)
    built = course_compat._last["bsr"]
    y2 = course_compat.dds_mm(x, *parts)
    assert course_compat._last["bsr"] is built and torch.equal(y1, y2)   # one conversion per weight
    parts[1].mul_(2)                                                     # the layer's values change in place
    y3 = course_compat.dds_mm(x, *parts)
    assert course_compat._last["bsr"] is not built
    _exact(y3, "dds", (x, (2 * weight).to_sparse_bsr((32, 32))), "values changed in place")
    other = torch.randn(64, 96, generator=g, device=DEVICE).half()       # another layer of the same shape
    y4, own = _course_sparse_call(x, other)
    _exact(y4, "dds", (x, own), "a second layer")


def test_sparse_call_rejects_what_is_not_the_transposed_bsr():
    weight = torch.randn(64, 96, device=DEVICE).half()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        w_t = weight.t().to_sparse_bsr(blocksize=(32, 32))
    x = torch.randn(2, 96, device=DEVICE).half()
    parts = (w_t.values(), w_t.crow_indices(), w_t.col_indices())
    with pytest.raises(ValueError, match=r"input: expected \[M, 64\]"):       # W's shape, not W^T's
        course_compat.dds_mm(x, torch.tensor(weight.shape), *parts)
    with pytest.raises(ValueError, match="shape: expected"):
        course_compat.dds_mm(x, torch.tensor([96]), *parts)
    with pytest.raises(ValueError, match=r"value: expected \[nnz, 32, 32\]"):
        course_compat.dds_mm(x, torch.tensor(w_t.size()), w_t.values()[:, :16], *parts[1:])
    bad_crow = w_t.crow_indices().clone()
    bad_crow[-1] += 1                                                        # one more block than stored
    with pytest.raises(ValueError, match="not a BSR matrix"):
        course_compat.dds_mm(x, torch.tensor(w_t.size()), parts[0], bad_crow, parts[2])


# ---------------------------------------------------------------- the module itself

def test_each_package_binds_its_own_kernels():
    import assignment
    import assignment.course_compat as student_compat
    import solutions
    for package, compat in ((assignment, student_compat), (solutions, course_compat)):
        assert compat.w8a8_mm is package.w8a8_mm and compat.w4a16_mm is package.w4a16_mm
        assert compat._dds_mm is package.dds_mm
    args = (torch.zeros(1, 32, dtype=torch.float16, device=DEVICE),
            torch.zeros(32, 32, dtype=torch.int8, device=DEVICE).T,
            torch.ones(1, 1, dtype=torch.float16, device=DEVICE), torch.ones(32, 1, dtype=torch.float16, device=DEVICE))
    with pytest.raises(NotImplementedError, match="assignment/w8a8.py"):    # the stub, called the course's way
        student_compat.w8a16_mm(*args)


@pytest.mark.slow
def test_running_a_script_the_course_way(tmp_path):
    """``python -m solutions.course_compat script.py args``: the script's imports get
    the reference's kernels, even with a w8a8.py of its own next to it."""
    (tmp_path / "w8a8.py").write_text("raise RuntimeError('the course file next to the script was imported')\n")
    script = tmp_path / "course_script.py"
    script.write_text("import sys\n"
                      "from w8a8 import w8a16_mm\n"
                      "from int4_matmul_rowwise_dequantize import w4a16_mm\n"
                      "from sparse_matmul import dds_mm\n"
                      "print(__name__, w8a16_mm.__module__, w4a16_mm.__module__, dds_mm.__module__, sys.argv[1:])\n")
    run = subprocess.run([sys.executable, "-m", "solutions.course_compat", str(script), "--iters", "3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["__main__", "solutions.course_compat", "solutions.w4a16",
                                  "solutions.course_compat", "['--iters',", "'3']"]
    assert "solutions/" in run.stderr                                      # says whose kernels ran
    missing = subprocess.run([sys.executable, "-m", "assignment.course_compat", str(tmp_path / "nope.py")],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "no such file" in missing.stderr
