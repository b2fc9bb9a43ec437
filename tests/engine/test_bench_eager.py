"""bench/eager.py's own parts: the breakdown's timers name the sections and leave
everything as they found it (CPU), the CUDA-graph clock replays what it captured
(GPU), and recorded runs, old and new, render in docs/performance.md."""

import json

import torch

import solutions.layers as layers
from bench import eager
from solutions import w8a8 as w8a8_solution
from tests.helpers import DEVICE, needs_gpu


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

    def state():
        return (torch.empty, torch.zeros, w8a8_solution.check_w8a8_inputs, w8a8_solution._select_config,
                layers.symmetric_scale, jit.JITFunction.run, interpreter.InterpretedFunction.run,
                layers.SparseLinear.__dict__["weight_bsr"])

    layer = eager.layer_from("w8a8", eager.weight(96, 64, 3, device=DEVICE))
    x = torch.randn(2, 64, device=DEVICE, dtype=torch.float16)
    seen = state()
    b = eager.breakdown([lambda: layer(x)] * 2)
    assert state() == seen
    assert {"launch _quantize_rows_kernel", "launch _w8a8_gemm_kernel", "checks", "config", "allocations",
            "layer: token scale"} <= set(b)
    assert b["total"] >= sum(v for k, v in b.items() if k not in ("other", "total")) > 0


@needs_gpu
def test_gpu_the_graph_clock_replays_the_forwards_it_captured():
    layer = eager.layer_from("w8a8", eager.weight(4096, 4096, 3))
    x = torch.randn(4, 4096, device="cuda", dtype=torch.float16)
    outs = []
    with torch.inference_mode():
        us = eager.graph_us([lambda: outs.append(layer(x))] * 8)
        assert 0 < us < eager.eager_us([lambda: layer(x)] * 50)   # no host time per call
        assert torch.equal(outs[-1], layer(x))   # the last replay's output, as the eager forward gives it


def test_recorded_runs_render_in_the_performance_doc(tmp_path, monkeypatch):
    import tools.render_results as render

    old = dict(layer="w8a8", M=1, N=4096, K=4096, density=None, bias=False,
               eager_us={"after": 20.0, "before": 150.0, "fp16": 25.0},
               host_us={"after": 14.0, "before": 140.0, "fp16": 8.0},
               breakdown_us={}, meets={"eager <= fp16": True, "host <= 15 us": True})
    new = dict(layer="w4a16", M=1, N=4096, K=4096, density=None, bias=False,
               eager_us={"layer": 30.0, "graph": 13.5, "fp16": 25.0, "fp16 graph": 23.0, "tinygemm": 11.0},
               host_us={"layer": 29.0, "fp16": 8.0}, breakdown_us={"layer": {}})
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "2030-01-01-h100.json").write_text(json.dumps(
        {"date": "2030-01-01", "eager": [dict(gpu="NVIDIA H100", torch="2.11", triton="3.6", results=[old, new])]}))
    monkeypatch.setattr(render, "ROOT", tmp_path)
    text = render.eager_tables()
    assert "### NVIDIA H100, 2030-01-01" in text
    lines = {t.split()[0]: t.split()[2:] for t in text.splitlines() if t.startswith(("w8a8", "w4a16"))}
    assert lines["w8a8"] == ["20.0", "-", "25.0", "-", "-", "14.0", "8.0"]
    assert lines["w4a16"] == ["30.0", "13.5", "25.0", "23.0", "11.0", "29.0", "8.0"]
