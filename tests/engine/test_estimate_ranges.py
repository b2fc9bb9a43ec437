"""The estimate's ranges are the model's measured error: per what bounds a call, the
spread of measured over predicted time on the validation runs (grader/targets.toml's
``[uncertainty]``, fitted by tools/validate_estimate.fit_bands), not a fixed factor;
and the report says what each range rests on."""

import math

import pytest

from grader import estimate as model
from grader.estimate import DEFAULT_BAND, MIN_BAND_TESTS, MODEL_VERSION, Band, band_for, call_bound, load_bands
from grader.estimate_report import _band_lines
from grader.facts import TaskRun
from grader.rubric import load_rubric

TEST = "dds/perf_m65536_d5"
DRAM = Band("DRAM", 0.9, 1.2, tests=10, within=8)
POOLED = Band("all", 0.5, 2.5, tests=40, within=32)


def _dram_bound_capture() -> tuple[dict, list]:
    """A DDS call that reads x twice from DRAM (too big for L2 to serve the second pass)
    and writes the output once: DRAM-bound, about 1.5x its memory floor."""
    M, N, K, programs = 65536, 1024, 1024, 16384
    x, out = 2 * M * K, 2 * M * N
    counts = {"x": {"sectors_read": 2 * x / programs, "rows_read": 4},
              "o": {"sectors_written": out / programs, "rows_written": 4}}
    tensors = {"x": {"name": "x", "bytes": x}, "o": {"name": "output", "bytes": out}}
    launch = {"kernel": "k", "programs": programs, "steps": 1, "sampled": 6, "counts": counts, "tensors": tensors,
              "variant": 0}
    rows = [{"ids": [0], "num_warps": 4, "num_stages": 3, "registers": 32, "shared_bytes": 0, "loop": {}}]
    return {"cases": {TEST: {"launches": [launch]}}}, rows


def _predicted(bands: dict) -> list[dict]:
    capture, rows = _dram_bound_capture()
    est = model.estimate(TaskRun(task="dds", capture=capture, kernels=rows), load_rubric(), bands=bands)
    return est["tests"][TEST]["gpus"]


def test_a_range_is_the_error_measured_for_calls_bound_alike():
    for gpu in _predicted({"DRAM": DRAM, "all": POOLED}):
        assert gpu["bound"] == "DRAM" and not gpu["at_floor"]
        assert gpu["band"] == DRAM.as_dict()
        assert gpu["us_range"] == pytest.approx([gpu["us"] * 0.9, gpu["us"] * 1.2])
        assert gpu["ratio_range"] == pytest.approx([gpu["baseline_us"] / (gpu["us"] * 1.2),
                                                    gpu["baseline_us"] / (gpu["us"] * 0.9)])
        assert gpu["points_range"][0] <= gpu["points"] <= gpu["points_range"][1]


def test_a_kind_with_too_few_checked_calls_takes_the_pooled_range():
    few = Band("DRAM", 0.99, 1.01, tests=MIN_BAND_TESTS - 1)
    for gpu in _predicted({"DRAM": few, "all": POOLED}):
        assert gpu["band"]["kind"] == "all"
        assert gpu["us_range"][1] == pytest.approx(gpu["us"] * 2.5)
    for gpu in _predicted({}):      # no validation run recorded: the default, and it says so
        assert gpu["band"] == DEFAULT_BAND.as_dict()
        assert gpu["us_range"][1] == pytest.approx(gpu["us"] * 1.5)


def test_no_range_reaches_below_the_memory_floor():
    wide = Band("DRAM", 0.1, 1.2, tests=10)
    for gpu in _predicted({"DRAM": wide}):
        assert gpu["us_range"][0] == pytest.approx(gpu["floor_us"]) and gpu["us_range"][0] > gpu["us"] * 0.1


def test_a_call_is_bound_by_its_longest_launch():
    launches = [{"us": 3.0, "bound": "latency"}, {"us": 9.0, "bound": "DRAM"}, {"us": math.inf, "bound": "x"}]
    assert call_bound(launches) == "DRAM"
    assert call_bound([]) == ""


def test_bands_are_read_from_the_targets_file(tmp_path):
    path = tmp_path / "targets.toml"
    path.write_text('[[gpu]]\nname = "g"\n\n[uncertainty]\nDRAM = {low = 0.8, high = 1.3, tests = 9, within = 7}\n'
                    '"tensor cores" = {low = 1.1, high = 2.0, tests = 7, within = 5}\nbroken = {low = "x"}\n')
    bands = load_bands(path)
    assert bands["DRAM"] == Band("DRAM", 0.8, 1.3, 9, 7)
    assert bands["tensor cores"].low == 1.0      # widened to hold the prediction itself
    assert "broken" not in bands
    assert band_for("latency", bands) is DEFAULT_BAND     # no "all": the default
    assert load_bands(tmp_path / "missing.toml") == {}
    assert all(b.low <= 1 <= b.high for b in load_bands().values())   # the repository's own


def test_the_report_says_what_each_range_rests_on():
    tests = {"a": {"gpus": [{"bound": "DRAM", "band": DRAM.as_dict()}]},
             "b": {"gpus": [{"bound": "latency", "band": POOLED.as_dict()},
                            {"bound": "issue", "band": POOLED.as_dict()}]},
             "c": {"error": "no Triton launch at this shape"}}
    lines = _band_lines(tests)
    assert lines[0] == ("- Calls bound by DRAM: on the 10 such calls checked on a GPU the time measured was 0.90x "
                        "to 1.20x the predicted time, 8 of them inside that range.")
    assert lines[1].startswith("- Calls bound by issue, latency: too few checked calls of that kind")
    assert "40 calls" in lines[1] and "32 of them" in lines[1]
    default = _band_lines({"a": {"gpus": [{"bound": "DRAM", "band": DEFAULT_BAND.as_dict()}]}})
    assert "no check of the model on a GPU is recorded" in default[0]


# ----------------------------------------------------------------------------- fitting the bands

def _row(kind: str, ratio: float, model: str = MODEL_VERSION, **extra) -> dict:
    return {"kernels": "k", "test": "t", "predicted_us": 10.0, "measured_us": 10.0 * ratio, "bound_kind": kind,
            "model": model, **extra}


def test_bands_span_the_measured_errors_per_bound_kind():
    from tools.validate_estimate import fit_bands

    errors = [0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 2.0, 2.4]
    rows = [_row("DRAM", e) for e in errors] + [_row("latency", 1.5), _row("latency", 1.7)]
    rows += [_row("DRAM", 9.0, model="an older model"), _row("DRAM", 9.0, error="wrong output")]
    bands = fit_bands(rows)
    # 10th percentile of the DRAM errors: 0.8 + 0.1 * (0.9 - 0.8) * 10 = 0.9; 90th: 2.0
    assert bands["DRAM"] == {"low": 0.9, "high": 2.0, "tests": 11, "within": 9}
    # latency: both errors above 1, so its band is widened down to 1
    assert bands["latency"]["low"] == 1.0 and bands["latency"]["high"] == pytest.approx(1.68)
    assert bands["all"]["tests"] == 13
    assert fit_bands([_row("DRAM", 1.1, model="an older model")]) == {}


def test_the_summary_counts_what_the_issue_asks_of_the_estimate():
    from tools.validate_estimate import summary

    def row(pred, meas, lo, hi, pts_pred, pts_meas, pts_range):
        return {"predicted_ratio": pred, "measured_ratio": meas, "predicted_us": 10, "measured_us": 10 * pred / meas,
                "predicted_us_range": [lo, hi], "predicted_points": pts_pred, "measured_points": pts_meas,
                "predicted_points_range": pts_range, "points": 4}

    rows = [row(1.0, 1.1, 8, 12, 2, 2.5, [1, 2.5]),     # close, in range, narrow
            row(1.0, 1.4, 9, 11, 2, 3, [1, 3.5]),       # within 1.5 only; measured 7.1 us: out of range; wide
            row(1.0, 1.0, 9, 11, 3, 0, [2.5, 3.5])]     # predicted 3 of 4 points, earned none
    s = summary(rows)
    assert (s["tests"], s["within"], s["close"], s["in_range"], s["narrow"], s["zero_when_half"]) == (3, 3, 2, 2, 2, 1)


def test_a_launch_the_capture_had_no_time_to_count_gets_no_prediction():
    """On a busy machine the capture's budget can run out before an autotuned launch's configs are
    counted: modelled as free, it was predicted at several times fp16 (a student's report said
    11.63-14 of 14). Now the test says why it has no prediction."""
    capture, rows = _dram_bound_capture()
    (launch,) = capture["cases"][TEST]["launches"]
    uncounted = {k: v for k, v in launch.items() if k not in ("sampled", "counts")}
    trials = [{**uncounted, "trial": True, "config": f"BLOCK_M={b}"} for b in (64, 128)]
    capture["cases"][TEST]["launches"] = [*trials, {**uncounted, "alternatives": [0, 1]}]
    est = model.estimate(TaskRun(task="dds", capture=capture, kernels=rows), load_rubric(), bands={})
    assert "ran out before it counted k" in est["tests"][TEST]["error"]
    assert "gpus" not in est["tests"][TEST]


def test_the_prediction_cache_is_keyed_by_the_kernel_file_and_the_capture_code(tmp_path, monkeypatch):
    """tools/validate_estimate.py --cache: a kernel file's capture is read back while the kernel
    file, the tests and grader/worker, grader/harness, grader/tasks are as they were, and made
    again (not read) once the kernel file changes."""
    import pickle
    import shutil

    from tools import validate_estimate as ve

    real = ve.ROOT
    folder = tmp_path / "kernels"
    shutil.copytree(real / "solutions", folder)
    monkeypatch.setattr(ve, "ROOT", tmp_path)
    for code in ve.CAPTURE_CODE:   # the capture code as it is here
        (tmp_path / code).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / code).symlink_to(real / code)
    rubric = load_rubric()
    key = ve.capture_key("kernels", "w8a8", rubric)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"kernels+w8a8+{key}.pickle").write_bytes(pickle.dumps((["captured"], ["compiled"])))
    assert ve.captured_run("kernels", "w8a8", rubric, cache) == (["captured"], ["compiled"])
    (folder / "w8a8.py").write_text((folder / "w8a8.py").read_text() + "\n# changed\n")
    assert ve.capture_key("kernels", "w8a8", rubric) != key
