"""bench/triton_fp16.py, the bench's Triton fp16 anchor: its kernel computes x @ w.t() on
awkward shapes (edges in M, N and K) in every one of its configurations' tile shapes, and
its wrapper refuses what it does not take. Timed only by ``make bench`` on a GPU."""

import pytest
import torch

from bench.triton_fp16 import CONFIGS, matmul_kernel, triton_fp16_matmul
from tests.helpers import DEVICE


@pytest.mark.parametrize("M,N,K", [(1, 40, 72), (37, 65, 100), (70, 33, 32)])
@pytest.mark.parametrize("config", [CONFIGS[6], CONFIGS[7]], ids=lambda c: "x".join(
    str(c.kwargs[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")))
def test_the_kernel_computes_x_times_w_transposed(M, N, K, config):
    g = torch.Generator().manual_seed(M * 1000 + N)
    x = torch.randn(M, K, generator=g).to(torch.float16).to(DEVICE)
    w = torch.randn(N, K, generator=g).to(torch.float16).to(DEVICE)
    y = triton_fp16_matmul(x, w, kernel=matmul_kernel, **config.kwargs)
    expect = x.float() @ w.float().t()
    assert y.dtype == torch.float16 and y.shape == (M, N)
    torch.testing.assert_close(y.float(), expect, rtol=2e-3, atol=2e-2)


def test_every_config_is_a_tile_shape_of_the_tutorial():
    assert len(CONFIGS) == 8
    for c in CONFIGS:
        assert set(c.kwargs) == {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"}
        blocks = [c.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")]
        assert all(b >= 16 and b & (b - 1) == 0 for b in blocks)   # powers of two, as tl.dot needs


def test_the_wrapper_says_what_it_expected():
    x = torch.zeros(4, 8, dtype=torch.float16)
    with pytest.raises(TypeError, match="fp16 x and w"):
        triton_fp16_matmul(x.float(), torch.zeros(3, 8, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"x \[M, K\] and w \[N, K\]"):
        triton_fp16_matmul(x, torch.zeros(3, 9, dtype=torch.float16))
