"""The task registry (grader/tasks/): what each task declares is consistent with
the stubs, the reference and the handout, and a fourth task needs nothing but
its own module and its rubric table."""

from __future__ import annotations

import importlib.util
import inspect
import shutil
from pathlib import Path

import pytest
import torch

from grader import tasks
from grader.compare import check_sanity
from grader.grade import grade
from grader.rubric import RubricError, parse_rubric
from grader.tasks import TASKS, get
from grader.tasks.common import SPIKE_MAX, activations, row_scale
from tests.helpers import HAS_CUDA

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "fixtures" / "toy_task"


@pytest.mark.parametrize("name", list(TASKS))
def test_each_task_matches_its_stub_reference_and_handout(name):
    task = get(name)
    handout = (ROOT / "handout.md").read_text()
    assert f"## {task.handout_section}" in handout
    for folder in ("assignment", "solutions"):
        module = importlib.import_module(f"{folder}.{Path(task.file).stem}")
        params = list(inspect.signature(getattr(module, task.entry)).parameters)
        assert tuple(params) == task.arg_names, f"{folder}/{task.file}: {params}"
    args, extras = task.make_inputs((5, 64, 64), {}, seed=3)
    assert len(args) == len(task.arg_names) and extras["weight"].shape == (64, 64)
    assert all(0 <= i < len(args) for i in task.activation_args)
    assert set(task.defaults({})) == set(task.options)
    ref = task.reference(*args)
    assert ref.shape == (5, 64) and torch.isfinite(ref.double()).all()
    # The same seed gives the same numbers; another seed does not.
    again, _ = task.make_inputs((5, 64, 64), {}, seed=3)
    other, _ = task.make_inputs((5, 64, 64), {}, seed=4)
    assert torch.equal(args[0], again[0]) and not torch.equal(args[0], other[0])


def test_activation_spikes_stay_within_their_bound():
    # 192 spikes of 8 sigma: unbounded, about nine of them would pass 16.
    x = activations(96, 4096, 0, torch.Generator().manual_seed(5)).float()
    assert x.abs().max() == SPIKE_MAX
    assert (x.abs() > 4.5).sum(dim=1).ge(1).float().mean() > 0.5   # still larger than the Gaussian body


def test_the_exact_w8a8_reference_passes_the_sanity_check_at_the_largest_spike():
    # One decode row at the GPU shape with both spikes at SPIKE_MAX, the largest the
    # generator makes: exact quantization is then furthest from the fp16 layer.
    task = get("w8a8")
    for seed in (0, 1):
        (x, qweight_t, _, weight_scale), extras = task.make_inputs((1, 4096, 4096), {}, seed)
        x[0, :2] = torch.tensor([SPIKE_MAX, -SPIKE_MAX], dtype=torch.float16)
        input_scale = row_scale(x, 127)   # the per-token scale of the new row, as the task builds it
        check = check_sanity(task.reference(x, qweight_t, input_scale, weight_scale), x, extras["weight"], "w8a8")
        assert check.passed, check.message
        assert "relative error vs the fp16 nn.Linear 0.03" in check.message   # 3.8 %, the bound 5 %


def test_a_task_cannot_be_registered_twice():
    with pytest.raises(ValueError, match="already registered"):
        tasks.register(get("w8a8"))
    with pytest.raises(KeyError, match="unknown task 'nope'; the registry has w8a8, w4a16, dds"):
        get("nope")


# ----------------------------------------------------------------------------- a fourth task

@pytest.fixture
def toy():
    spec = importlib.util.spec_from_file_location("toy_task", TOY / "task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tasks.register(module.TASK)
    yield module.TASK
    tasks.unregister("toy")


def _toy_rubric(**test_extra) -> dict:
    tests = [dict(name="toy/small", task="toy", kind="correctness", points=2, shape=[64, 64, 64],
                  cpu_shape=[5, 64, 96]),
             dict(name="toy/zero_rows_scaled", task="toy", kind="correctness", points=3, shape=[64, 64, 64],
                  cpu_shape=[17, 32, 64], **{"zero_rows": 3, "scale": 0.125, **test_extra}),
             dict(name="toy/perf", task="toy", kind="performance", points=5, shape=[256, 256, 256],
                  full_ratio=0.9, zero_ratio=0.2)]
    return {"schema_version": 1, "settings": {"cpu_task_timeout_s": 300},
            "tasks": {"toy": {"movement_shape": [16, 64, 64]}}, "tests": tests}


@pytest.mark.slow
def test_a_fourth_task_is_one_module_and_its_rubric_table(toy, tmp_path):
    rubric = parse_rubric(_toy_rubric())
    assert rubric.tasks["toy"].file == "toy.py" and rubric.tasks["toy"].title == toy.title
    sub = tmp_path / "submission"
    sub.mkdir()
    shutil.copy(TOY / "toy.py", sub / "toy.py")
    result = grade(sub, rubric, seed=11, log=lambda *_: None)   # the GPU where there is one
    by_name = {t.name: t for t in result.tests}
    assert by_name["toy/small"].status == "passed" and by_name["toy/zero_rows_scaled"].status == "passed", \
        [t.message for t in result.tests]
    (task,) = result.tasks
    assert task.task == "toy" and task.status == "ok" and task.kernels, task.summary
    if HAS_CUDA:   # timed against the fp16 baseline, with the toy's own memory floor
        assert "ratio" in by_name["toy/perf"].details and by_name["toy/perf"].details["memory_floor_ms"] > 0
        return
    assert by_name["toy/perf"].status == "not_run" and result.score == 5
    # The CPU run's data-movement table names the toy's own tensors, against its own floor.
    rows = {r["name"]: r for r in task.movement["tensors"]}
    assert set(rows) == {"x", "w", "output"} and rows["w"]["minimum"] == 2 * 64 * 64
    assert task.movement["min_flops"] == 2 * 16 * 64 * 64


def test_the_rubric_asks_the_toy_task_for_options_and_shapes(toy):
    with pytest.raises(RubricError, match="unknown key 'density'"):
        parse_rubric(_toy_rubric(density=0.5))
    with pytest.raises(RubricError, match="scale must be a number >= 0"):
        parse_rubric(_toy_rubric(scale=-1))
    data = _toy_rubric()
    data["tests"][0]["cpu_shape"] = [5, 64, 95]
    with pytest.raises(RubricError, match="cpu_shape: K must be even"):
        parse_rubric(data)


def test_without_its_module_the_task_is_unknown():
    with pytest.raises(RubricError, match="unknown task 'toy'"):
        parse_rubric(_toy_rubric())
