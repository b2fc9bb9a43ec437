"""bench/eager.py's own parts, on the CPU: the "before" path computes what the
layers compute, and the breakdown's timers name the sections and leave
everything as they found it. (The timings themselves need a GPU.)"""

import pytest
import torch

import solutions.layers as layers
from bench import eager
from solutions import w8a8 as w8a8_solution
from tests.helpers import DEVICE


@pytest.mark.parametrize("kind,density", [("w8a8", None), ("w4a16", None), ("dds", 0.5)])
@pytest.mark.parametrize("bias", [False, True])
def test_the_forward_as_first_written_computes_what_the_layers_compute(kind, density, bias):
    layer = eager.layer_from(kind, eager.weight(96, 64, 3, density, device=DEVICE), bias)
    x = torch.randn(3, 2, 64, device=DEVICE, dtype=torch.float16)
    x[1, 0] = 0
    with eager.before():
        assert all(not m.REUSE_PLANS for m in eager.MODULES)
        old = eager.forward_before(layer, x)
    assert all(m.REUSE_PLANS for m in eager.MODULES)
    assert torch.equal(layer(x), old)


def test_the_row_grid_is_the_issues():
    grid = eager.rows()
    quant = {(k, M, N, K) for k, M, N, K, d, b in grid if k != "dds" and not b}
    assert quant == {(k, M, N, K) for k in ("w8a8", "w4a16") for M in (1, 4, 16)
                     for N, K in ((4096, 4096), (11008, 4096), (4096, 11008))}
    assert {(M, d) for k, M, N, K, d, b in grid if k == "dds" and not b} == \
        {(M, d) for M in (1, 4, 16) for d in (0.05, 0.25, 0.5)}
    assert sum(b for *_, b in grid) == 3


def test_the_breakdown_names_its_sections_and_restores_what_it_timed():
    import triton.runtime.interpreter as interpreter
    import triton.runtime.jit as jit
    from triton.compiler.compiler import CompiledKernel

    def state():
        return (torch.empty, torch.zeros, w8a8_solution.check_w8a8_inputs, w8a8_solution._plan,
                w8a8_solution._select_config, w8a8_solution._plan_key, layers.symmetric_scale, eager.scale_before,
                jit.JITFunction.run, interpreter.InterpretedFunction.run, CompiledKernel.__getitem__,
                layers.SparseLinear.__dict__["weight_bsr"])

    layer = eager.layer_from("w8a8", eager.weight(96, 64, 3, device=DEVICE))
    x = torch.randn(2, 64, device=DEVICE, dtype=torch.float16)
    seen = state()
    with eager.before():
        layer.forward = eager.forward_before.__get__(layer)
        before = eager.breakdown([lambda: layer(x)] * 2)
        del layer.forward
    after = eager.breakdown([lambda: layer(x)] * 2)
    assert state() == seen
    launches = {"launch _quantize_rows_kernel (kernel[grid])", "launch _w8a8_gemm_kernel (kernel[grid])"}
    assert launches | {"checks", "config", "plan (decisions)", "allocations", "layer: token scale"} <= set(before)
    # The plan was made during warm-up: no checks, no config; on the CPU the launches stay kernel[grid](...).
    assert launches | {"plan lookup (key)", "allocations", "layer: token scale"} <= set(after)
    assert "checks" not in after and "config" not in after
    for b in (before, after):
        assert b["total"] >= sum(v for k, v in b.items() if k not in ("other", "total")) > 0


def test_a_recorded_run_renders_in_the_performance_doc(tmp_path, monkeypatch):
    import json

    import tools.render_results as render

    row = dict(layer="w8a8", M=1, N=4096, K=4096, density=None, bias=False,
               eager_us={"after": 20.0, "before": 150.0, "fp16": 25.0}, host_us={"after": 14.0, "before": 140.0,
                                                                             "fp16": 8.0},
               breakdown_us={}, meets={"eager <= fp16": True, "host <= 15 us": True})
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "2030-01-01-h100.json").write_text(json.dumps(
        {"date": "2030-01-01", "eager": [dict(gpu="NVIDIA H100", torch="2.11", triton="3.6", results=[row])]}))
    monkeypatch.setattr(render, "ROOT", tmp_path)
    text = render.eager_tables()
    assert "### NVIDIA H100, 2030-01-01" in text and "ok ok" in text
    line = next(t for t in text.splitlines() if t.startswith("w8a8"))
    assert line.split()[2:5] == ["20.0", "150.0", "25.0"]
