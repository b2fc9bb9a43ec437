"""bench/sweep.py, the one sweep over a kernel's declared configs: its search space,
its ranking and its handling of a config that fails, on small shapes (in the
interpreter on the CPU, where a stand-in clock replaces the GPU's)."""

import pytest
import triton

from bench import sweep
from tests.helpers import DEVICE, HAS_CUDA


def _clock(fn, reps):
    """Runs fn once; every time is 1 ms (no GPU clock in the interpreter)."""
    fn()
    return 1.0


def test_space_is_the_declared_configs_or_those_matching():
    from solutions import w8a8
    assert sweep.space("w8a8") == w8a8.CONFIGS
    wanted = {n for n in w8a8.CONFIGS if n.startswith("16x") or n.endswith("_s3")}
    assert set(sweep.space("w8a8", "16x*,*_s3")) == wanted
    with pytest.raises(SystemExit, match="no config of w8a8 matches"):
        sweep.space("w8a8", "nothing*")


def test_cases_and_shapes():
    assert sweep.parse_shapes("1x4096x4096, 256X11008x4096") == [(1, 4096, 4096), (256, 11008, 4096)]
    density = sweep.parse_options("dds", ["density=0.25,1.0"])
    assert sweep.cases("dds", [(1, 64, 64)], density) == [((1, 64, 64), {"density": 0.25}),
                                                          ((1, 64, 64), {"density": 1.0})]
    both = sweep.parse_options("dds", ["density=0.5", "index_dtype=int32,int64"])
    assert [o for _, o in sweep.cases("dds", [(1, 64, 64)], both)] == [
        {"density": 0.5, "index_dtype": "int32"}, {"density": 0.5, "index_dtype": "int64"}]
    assert sweep.cases("w4a16", [(1, 64, 64)], sweep.parse_options("w4a16", ["group_size=32"])) == \
        [((1, 64, 64), {"group_size": 32})]
    assert sweep.cases("w8a8", [(1, 64, 64)], {}) == [((1, 64, 64), {})]
    for task, bad in (("w8a8", "density=0.5"), ("w8a8", "ties"), ("dds", "empty_rows=two")):
        with pytest.raises(SystemExit, match="--option"):   # not its option; no value; not an int
            sweep.parse_options(task, [bad])


@pytest.mark.slow
@pytest.mark.parametrize("task,shape,options", [("w4a16", (5, 40, 64), {"group_size": 32}),
                                                ("dds", (5, 64, 96), {"density": 0.5})])
def test_every_config_is_checked_and_ranked_and_a_broken_one_is_a_row(task, shape, options, monkeypatch):
    import importlib
    module = importlib.import_module(f"solutions.{task}")
    configs = dict(module.CONFIGS)
    broken = dict(configs[next(iter(configs))].kwargs, BLOCK_M=3)  # not a power of 2: no tl.arange
    configs["broken"] = triton.Config(broken, num_warps=4, num_stages=2)
    record = sweep.sweep_case(task, shape, options, configs, reps=1, device=DEVICE,
                              clock=None if HAS_CUDA else _clock)
    rows = {r["name"]: r for r in record["configs"]}
    assert set(rows) == set(configs) and record["selected"] in module.CONFIGS
    assert rows["broken"]["ms"] is None and rows["broken"]["error"]
    assert all(rows[n]["ms"] and not rows[n]["error"] for n in module.CONFIGS), record
    assert module.FORCE_CONFIG is None
    text = sweep.table(record)
    assert "*" + record["selected"] in text and text.rstrip().splitlines()[-1].split()[1] == "broken"


@pytest.mark.slow
def test_list_needs_no_gpu(capsys):
    assert sweep.main(["w4a16", "--shapes", "1x4096x4096,800x4096x4096", "--list"]) == 0
    out = capsys.readouterr().out
    assert "w4a16 1x4096x4096: " in out and "num_stages=" in out


def test_anchors_and_the_copy_bandwidth_share_are_in_the_ranking():
    from grader.tasks import get
    from solutions import w8a8
    name = next(iter(w8a8.CONFIGS))
    record = sweep.sweep_case("w8a8", (5, 40, 64), {}, {name: w8a8.CONFIGS[name]}, reps=1, device=DEVICE,
                              clock=None if HAS_CUDA else _clock)
    assert set(record["anchors_ms"]) == set(get("w8a8").anchors) and record["floor_bytes"] == 5 * 64 * 2 + 40 * 64 \
        + 5 * 4 + 40 * 4 + 5 * 40 * 2
    # A copy bandwidth at which the floor takes exactly a quarter of the config's time.
    gbs = record["floor_bytes"] / (record["configs"][0]["ms"] * 1e-3 / 4) / 1e9
    head, _, _, row = sweep.table(record, gbs).splitlines()[:4]
    assert "int_mm" in head and "memory floor" in head and "x int_mm" in sweep.table(record, gbs).splitlines()[1]
    assert row.split()[1] == "*" + name or row.split()[1] == name
    assert "25%" in row.split()
