"""make calibrate: the placement rule on synthetic ratios, the rubric it writes
(only thresholds, calibrated_on and toolchain change; it loads strictly), the
toolchain it records (one per calibration), the GPU path with
a fake grader (partial results, resume, budget), --from on the recorded runs,
one-line errors, the results entry the docs render, and the report's warning
on a GPU the rubric was not calibrated on."""

from __future__ import annotations

import contextlib
import copy
import difflib
import json
import math
import re
import subprocess
import sys
import types

import pytest

from grader.rubric import DEFAULT_RUBRIC, RubricError, load_rubric, parse_rubric, set_values
from tests.fakes import ROOT, rubric_dict
from tools import calibrate, gpu_session, render_results
from tools.calibrate import Placement, place

RECORDED = [ROOT / "results" / "2026-11-22-h100.json", ROOT / "results" / "2026-11-22-h200.json"]
OLD = (0.9, 0.1)


# ----------------------------------------------------------------------------- the rule

@pytest.mark.parametrize("ref, naive, want", [
    ([1.29, 1.10], [0.21, 0.16], (0.95, 0.15)),  # 0.85 x 1.10 = 0.935 rounds up; just below the naive's 0.16
    ([0.70, 0.73], [0.12, 0.12], (0.6, 0.1)),    # 0.595 rounds up to 0.6
    ([1.23, 1.37], [0.95, 1.07], (1.05, 0.5)),   # naive close to full: zero at half of full
    ([1.10], [0.04], (0.95, 0.1)),               # naive below a tenth of full: zero at that tenth
    ([0.78], [0.74], (0.7, 0.35)),               # naive past full (0.7 is 90 % of 0.78: still in the band)
    ([1.0], [0.15], (0.85, 0.1)),                # 0.85 exactly; 0.15 itself is not "below" the naive
])
def test_placement_on_typical_ratios(ref, naive, want):
    assert (place(ref, naive, OLD).full_ratio, place(ref, naive, OLD).zero_ratio) == want


@pytest.mark.parametrize("ref", [0.003, 0.02, 0.05, 0.07, 0.12, 0.33, 0.5, 0.64, 0.9, 1.1, 1.37, 2.5, 7.0])
@pytest.mark.parametrize("share", [None, 0.01, 0.3, 0.79, 1.0, 1.6])
def test_placement_keeps_its_promises_everywhere(ref, share):
    naive = [] if share is None else [share * ref]
    p = place([ref * 1.07, ref], naive, OLD)
    assert 0.85 - 1e-9 <= p.full_ratio / ref <= 0.90 + 1e-9   # full credit needs at least 85 % of the reference
    assert 0 <= p.zero_ratio < p.full_ratio
    assert p.zero_ratio <= 0.5 * p.full_ratio + 1e-12
    if share is not None and share * ref > 0.15 * p.full_ratio:
        assert p.zero_ratio < share * ref          # a reasonable naive kernel earns partial credit
    step = 0.05
    while abs(p.full_ratio / step - round(p.full_ratio / step)) > 1e-6:
        step /= 5
    assert abs(p.zero_ratio / step - round(p.zero_ratio / step)) < 1e-6   # one step for both


@pytest.mark.parametrize("ref", [1.3, 1.6, 2.0, 2.4, 3.1])
@pytest.mark.parametrize("naive", [[], [0.5], [0.75], [1.2]])
def test_a_kernel_no_faster_than_dense_gets_at_most_half(ref, naive):
    """The lesson's ratio (DDS: 1.0, dense speed) earns at most half of the points."""
    from types import SimpleNamespace

    from grader.judge import ratio_fraction

    p = place([ref], naive, OLD, lesson=1.0)
    assert 0 <= p.zero_ratio < p.full_ratio
    spec = SimpleNamespace(full_ratio=p.full_ratio, zero_ratio=p.zero_ratio)
    assert ratio_fraction(spec, 1.0) <= 0.5 + 1e-9
    assert ratio_fraction(spec, ref) == 1.0                   # the reference still gets full credit
    without = place([ref], naive, OLD)
    assert p.full_ratio == without.full_ratio and p.zero_ratio >= without.zero_ratio


def test_the_lesson_cannot_be_taught_by_a_reference_no_faster_than_dense():
    p = place([1.1], [0.7], OLD, lesson=1.0)    # full credit at 0.9: below dense speed
    assert p.full_ratio < 1.0 and any("does not beat it" in n for n in p.notes)
    assert p == Placement(p.full_ratio, place([1.1], [0.7], OLD).zero_ratio, p.notes)


def test_only_sparse_tests_at_half_density_or_less_carry_the_lesson():
    from grader.tasks import get

    dds = get("dds")
    assert [dds.lesson_ratio(dds.defaults({"density": d})) for d in (0.05, 0.25, 0.5, 1.0)] == [1.0, 1.0, 1.0, None]
    assert dds.lesson_ratio(dds.defaults({})) == 1.0
    assert get("w8a8").lesson_ratio({}) is None and get("w4a16").lesson_ratio({}) is None


def test_naive_faster_than_the_reference():
    p = place([0.7, 0.72], [0.9, 0.95], OLD)
    assert (p.full_ratio, p.zero_ratio) == (0.6, 0.3)
    assert p.notes == ("the tutorial-style kernels are as fast as the reference",)


def test_a_slow_reference_gets_a_finer_step():
    p = place([0.05], [0.03], OLD)       # 0.05 (step 0.05 or 0.01) would be 100 % of the reference's ratio
    assert (p.full_ratio, p.zero_ratio) == (0.044, 0.022)
    assert any("step 0.002" in n for n in p.notes)
    tiny = place([0.003], [], OLD)
    assert math.isclose(tiny.full_ratio, 0.00256) and tiny.zero_ratio < tiny.full_ratio


@pytest.mark.parametrize("points", [3, 4, 5, 7])
@pytest.mark.parametrize("ref, naive, draft", [
    ([0.90], [0.70], [0.695, 0.70]),    # DDS 4096 @ 25 % on an H100: the draft at 78 % of the reference
    ([1.61], [0.90], [0.91]),           # DDS 65536 @ 5 %
    ([0.78], [0.50], [0.46]),           # DDS 4096 @ 50 %
    ([1.30], [0.28], [0.35]),           # a draft far below: the cap changes nothing
])
def test_the_stub_plan_draft_earns_at_most_sixty_percent_after_rounding(ref, naive, draft, points):
    p = place(ref, naive, OLD, draft=draft, points=points, points_step=0.25)
    spec = types.SimpleNamespace(full_ratio=p.full_ratio, zero_ratio=p.zero_ratio, points=points)
    assert calibrate._points(spec, draft, 0.25, highest=True) <= calibrate.DRAFT * points
    assert p.full_ratio == place(ref, naive, OLD).full_ratio      # full credit is the reference's alone
    assert p.zero_ratio >= place(ref, naive, OLD).zero_ratio      # the cap only raises zero_ratio


def test_a_draft_as_fast_as_the_reference_cannot_be_capped_and_says_so():
    p = place([0.80], [0.5], OLD, draft=[0.79], points=5, points_step=0.25)
    assert p.zero_ratio < p.full_ratio
    assert any("cannot be held" in n for n in p.notes)


def test_missing_ratios():
    assert place([None, None], [0.5], OLD) == Placement(0.9, 0.1, ("kept: the reference was never timed",))
    assert place([], [], (0.55, 0.08)).full_ratio == 0.55
    p = place([None, 1.0], [None], OLD)
    assert (p.full_ratio, p.zero_ratio) == (0.85, 0.4)
    assert "reference timed in 1 of 2 runs" in p.notes
    assert any("no tutorial-style ratio" in n for n in p.notes)
    assert place([float("nan"), 0.0, -1.0, float("inf"), 1.0], [], OLD).full_ratio == 0.85


# What the rule places from the recorded runs (results/2026-11-22-*.json), worked out by hand
# from their lowest reference ratios (e.g. w8a8/perf_m1: 0.85 x 1.101 = 0.936, up to 0.95;
# dds/perf_m4096_d25: 0.85 x 0.776 = 0.660, where 0.70 would be 90.2 % of 0.776: step 0.01, 0.66;
# dds/perf_m65536_d5: 1.05, and zero 0.95 so that dense speed, 1.0, earns at most half).
PLACED = {"w8a8/perf_m1": [0.95, 0.1], "w8a8/perf_m16": [1.05, 0.1], "w8a8/perf_m4096": [0.95, 0.15],
          "w4a16/perf_m1": [1.05, 0.15], "w4a16/perf_m16": [1.05, 0.15], "w4a16/perf_m1024": [0.6, 0.1],
          "dds/perf_m4096_d25": [0.66, 0.33], "dds/perf_m65536_d5": [1.05, 0.95], "dds/perf_m4096_d50": [0.55, 0.25]}


def test_the_recorded_runs_give_the_placed_thresholds():
    ratios, places, toolchain = calibrate.from_files([str(p) for p in RECORDED])
    assert places == ["NVIDIA H100 80GB HBM3, 2026-11-22", "NVIDIA H200, 2026-11-22"]
    assert toolchain == {"torch": "2.11.0+cu130", "triton": "3.6.0"}   # numpy: not recorded then
    rubric = load_rubric()
    assert ratios["draft"] == {}   # no stub-plan draft was graded then
    records = calibrate.rows(rubric, ratios["reference"], ratios["naive"])
    assert len(records) == sum(t.kind == "performance" for t in rubric.tests)
    placed = {r["test"]: r["new"] for r in records if r["test"] in PLACED}
    assert placed and placed == {name: PLACED[name] for name in placed}
    assert all(r["reference_points"][1] == r["points"] for r in records)   # full points under the new ones


# ----------------------------------------------------------------------------- the rubric it writes

def _changed(old: str, new: str) -> list[tuple[str, str]]:
    """(removed line, added line) pairs; an added line alone is ("", line)."""
    out = []
    for group in difflib.SequenceMatcher(None, old.splitlines(), new.splitlines()).get_opcodes():
        tag, i1, i2, j1, j2 = group
        if tag != "equal":
            a, b = old.splitlines()[i1:i2], new.splitlines()[j1:j2]
            out += list(zip(a + [""] * (len(b) - len(a)), b))
    return out


def test_the_calibrated_rubric_changes_only_thresholds_calibrated_on_and_toolchain(tmp_path):
    text = DEFAULT_RUBRIC.read_text()
    rubric = load_rubric()
    records = calibrate.rows(rubric, {t.name: [t.full_ratio] for t in rubric.tests if t.kind == "performance"},
                             {t.name: [0.5 * t.full_ratio] for t in rubric.tests if t.kind == "performance"})
    toolchain = {"torch": "2.12.0+cu130", "triton": "3.7.0", "numpy": "2.3.5"}
    new = calibrate.calibrated_rubric(text, rubric, records, ["NVIDIA A100-SXM4-80GB, 2026-12-01"], toolchain)
    changes = _changed(text, new)
    assert changes and all(a.split("=")[0] == b.split("=")[0] for a, b in changes)
    assert {a.split("=")[0].strip() for a, _ in changes} <= {"full_ratio", "zero_ratio", "calibrated_on",
                                                             "toolchain"}
    path = tmp_path / "rubric.toml"
    path.write_text(new)
    loaded = load_rubric(path)
    assert loaded.settings.calibrated_on == ("NVIDIA A100-SXM4-80GB, 2026-12-01",)
    assert loaded.settings.toolchain == toolchain
    got = {t.name: [t.full_ratio, t.zero_ratio] for t in loaded.tests if t.kind == "performance"}
    assert got == {r["test"]: r["new"] for r in records}
    assert [t.name for t in loaded.tests] == [t.name for t in rubric.tests]


def test_set_values_keeps_every_other_byte():
    text = ('# head\r\n[settings]\r\npoints_step = 0.25   # step\r\nnote = "a # b"  # c\r\n\r\n'
            '[[tests]]\r\nname = "x"\r\nfull_ratio = 1\r\n')
    new = set_values(text, {(("settings",), "points_step"): 0.5, (("settings",), "note"): "d",
                            (("tests", 0), "full_ratio"): 0.85, (("settings",), "calibrated_on"): ["G, 2026-01-02"]})
    assert new == ('# head\r\n[settings]\r\npoints_step = 0.5    # step\r\nnote = "d"      # c\r\n'
                   'calibrated_on = ["G, 2026-01-02"]\n\r\n[[tests]]\r\nname = "x"\r\nfull_ratio = 0.85\r\n')
    with pytest.raises(ValueError, match="not a one-line value"):
        set_values('[settings]\nx = [\n  1,\n]\n', {(("settings",), "x"): [2]})
    with pytest.raises(ValueError, match="no table"):
        set_values("[settings]\n", {(("tasks", "w8a8"), "title"): "t"})


# ----------------------------------------------------------------------------- the command line

@pytest.mark.slow
def test_from_recorded_runs_on_the_command_line(tmp_path):
    out = tmp_path / "calibrated.toml"
    proc = subprocess.run([sys.executable, "-m", "tools.calibrate", "--from", *map(str, RECORDED), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shipped = next(t for t in load_rubric(DEFAULT_RUBRIC).tests if t.name == "w4a16/perf_m1024")
    for words in ("old full / zero", "new full / zero", "w8a8/perf_m1 ", "1.29 1.10",
                  f"{shipped.full_ratio:g} / {shipped.zero_ratio:g}", "0.6 / 0.1"):   # old (shipped), new
        assert words in proc.stdout, words
    assert re.search(rf"wrote {re.escape(str(out))}: \d+ of 18 thresholds changed", proc.stdout), proc.stdout
    assert load_rubric(out).settings.calibrated_on == ("NVIDIA H100 80GB HBM3, 2026-11-22", "NVIDIA H200, 2026-11-22")


def test_write_replaces_the_rubric_it_started_from(tmp_path, capsys):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(DEFAULT_RUBRIC.read_text().replace("full_ratio = 0.55", "full_ratio = 0.7"))
    assert calibrate.main(["--from", str(RECORDED[0]), "--rubric", str(rubric), "--write"]) == 0
    spec = next(t for t in load_rubric(rubric).tests if t.name == "w4a16/perf_m1024")
    assert spec.full_ratio == 0.6 and load_rubric(rubric).settings.calibrated_on == (
        "NVIDIA H100 80GB HBM3, 2026-11-22",)
    with pytest.raises(SystemExit):
        calibrate.main(["--from", str(RECORDED[0]), "--write", "--out", str(tmp_path / "x.toml")])


def _one_line_error(capsys, argv) -> str:
    assert calibrate.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("calibrate: "), err
    return err


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    out = ["--out", str(tmp_path / "r.toml")]
    assert "no such results file" in _one_line_error(capsys, ["--from", str(tmp_path / "nope.json"), *out])
    (tmp_path / "bad.json").write_text("{not json")
    assert "not a results file" in _one_line_error(capsys, ["--from", str(tmp_path / "bad.json"), *out])
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"gpu": "NVIDIA H200", "date": "2026-12-01", "grades": {}}))
    assert "no reference ratios" in _one_line_error(capsys, ["--from", str(RECORDED[0]), str(empty), *out])
    (tmp_path / "rubric.toml").write_text("schema_version = 2\n")
    assert "schema_version" in _one_line_error(capsys, ["--from", str(RECORDED[0]), "--rubric",
                                                        str(tmp_path / "rubric.toml"), *out])
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert "no CUDA GPU here" in _one_line_error(capsys, out)
    assert not (tmp_path / "r.toml").exists()


# ----------------------------------------------------------------------------- the GPU path, faked

class FakeGPU:
    """Stands in for the GPU: session_record and grade_submission of tools.gpu_session.
    Each grade is the recorded H200 grade with its ratios scaled per call."""

    def __init__(self, monkeypatch, results, scale=(1.0, 0.97, 1.02, 0.99), fail_at=None, error=False, done=0):
        self.recorded = json.loads(RECORDED[1].read_text())["grades"]
        self.recorded["draft"] = copy.deepcopy(self.recorded["naive"])   # (no draft was recorded then)
        self.calls, self.results, self.scale, self.fail_at, self.error = [], results, scale, fail_at, error
        self.done, self.now = done, 0.0   # grades already on disk; a clock that grades advance
        monkeypatch.setattr("torch.cuda.is_available", lambda: True)
        monkeypatch.setattr(gpu_session, "session_record", lambda: {
            "date": "2026-12-01", "gpu": "NVIDIA FakeGPU 9000", "sandbox": "fake",
            "versions": {"torch": "2.11.0+cu130", "triton": "3.6.0", "numpy": "2.3.5", "cuda": "13.0"}})
        monkeypatch.setattr(gpu_session, "grade_submission", self.grade)

    def grade(self, name, path, out, env=None, args=()):
        who = name.split("-")[0]
        on_disk = json.loads(self.results.read_text())["calibration"]["grades"]
        assert sum(map(len, on_disk.values())) == self.done + len(self.calls)   # each grade is on disk at once
        if len(self.calls) == self.fail_at:
            raise KeyboardInterrupt
        self.calls.append(name)
        self.now += self.recorded[who]["wall_s"]
        assert path == gpu_session.SUBMISSIONS[who] and args[0] == "--rubric"
        if self.error == "crash" and who == "reference":
            return {"submission": path, "error": "grader exited 1: CUDA error", "wall_s": 3.0, "tests": {}}
        g = copy.deepcopy(self.recorded[who])
        if self.error == "untimed" and who == "reference":   # e.g. a correctness test failed on this GPU
            g["score"] = 60.0
            g["tests"] = {n: {k: v for k, v in t.items() if k != "ratio"} for n, t in g["tests"].items()}
        for t in g["tests"].values():
            if "ratio" in t:
                t["ratio"] *= self.scale[(len(self.calls) - 1) % len(self.scale)]
        return g


def test_calibrating_on_a_gpu_records_each_grade_and_the_thresholds(tmp_path, monkeypatch, capsys):
    results, out = tmp_path / "res.json", tmp_path / "r.toml"
    gpu = FakeGPU(monkeypatch, results)
    assert calibrate.main(["--results", str(results), "--out", str(out)]) == 0
    assert gpu.calls == ["reference-0", "naive-0", "draft-0", "reference-1", "naive-1", "draft-1"]
    record = json.loads(results.read_text())
    cal = record["calibration"]
    assert record["gpu"] == "NVIDIA FakeGPU 9000" and cal["state"] == "complete"
    assert cal["calibrated_on"] == "NVIDIA FakeGPU 9000, 2026-12-01"
    assert [len(cal["grades"][w]) for w in ("reference", "naive", "draft")] == [2, 2, 2]
    assert cal["rubric_written"]["hash"] == load_rubric(out).hash
    assert cal["rule"]["margin"] == calibrate.MARGIN
    row = next(r for r in cal["thresholds"] if r["test"] == "w8a8/perf_m1")
    assert len(row["reference"]) == 2 and row["new"][0] == place(row["reference"], row["naive"], OLD).full_ratio
    assert all(r["draft_points"][1] <= calibrate.DRAFT * r["points"] or any("cannot be held" in n for n in r["notes"])
               for r in cal["thresholds"])
    loaded = load_rubric(out)
    assert loaded.settings.calibrated_on == ("NVIDIA FakeGPU 9000, 2026-12-01",)
    # The toolchain the grades ran with, in the rubric and in the results file's calibration entry.
    assert loaded.settings.toolchain == cal["toolchain"] == {"torch": "2.11.0+cu130", "triton": "3.6.0",
                                                             "numpy": "2.3.5"}
    printed = capsys.readouterr().out
    assert ("graded on NVIDIA FakeGPU 9000: 2 reference, 2 tutorial-style, 2 stub-plan draft runs of 2 asked"
            in printed)
    assert "old full / zero" in printed and f"recorded in {results}" in printed


def test_an_interrupted_calibration_continues(tmp_path, monkeypatch, capsys):
    results, out = tmp_path / "res.json", tmp_path / "r.toml"
    first = FakeGPU(monkeypatch, results, fail_at=4)
    with pytest.raises(KeyboardInterrupt):
        calibrate.main(["--results", str(results), "--out", str(out)])
    assert first.calls == ["reference-0", "naive-0", "draft-0", "reference-1"]
    assert json.loads(results.read_text())["calibration"]["state"] == "incomplete"
    again = FakeGPU(monkeypatch, results, done=4)
    assert calibrate.main(["--results", str(results), "--out", str(out)]) == 0
    assert again.calls == ["naive-1", "draft-1"]
    assert "continuing from" in capsys.readouterr().out
    assert json.loads(results.read_text())["calibration"]["state"] == "complete"
    fresh = FakeGPU(monkeypatch, results)
    assert calibrate.main(["--results", str(results), "--out", str(out), "--fresh", "--runs", "1"]) == 0
    assert fresh.calls == ["reference-0", "naive-0", "draft-0"]


def test_budget_stops_before_a_grade_that_would_not_fit(tmp_path, monkeypatch, capsys):
    results = tmp_path / "res.json"
    gpu = FakeGPU(monkeypatch, results)
    for g in gpu.recorded.values():
        g["wall_s"] = 80.0
    monkeypatch.setattr(calibrate, "_clock", lambda: gpu.now)
    assert calibrate.main(["--results", str(results), "--out", str(tmp_path / "r.toml"), "--budget-s", "250"]) == 0
    assert gpu.calls == ["reference-0", "naive-0", "draft-0"]
    printed = capsys.readouterr().out
    assert "would pass --budget-s 250" in printed and "run the same command again" in printed
    assert json.loads(results.read_text())["calibration"]["state"] == "incomplete"


@pytest.mark.parametrize("error, words", [("crash", "(grader exited 1: CUDA error)"),
                                          ("untimed", "(its grades scored 60, their notes are in ")])
def test_a_reference_that_never_times_exits_1(tmp_path, monkeypatch, capsys, error, words):
    FakeGPU(monkeypatch, tmp_path / "res.json", error=error)
    assert calibrate.main(["--results", str(tmp_path / "res.json"), "--out", str(tmp_path / "r.toml"),
                           "--runs", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("calibrate: the reference was never timed ") and words in err
    assert not (tmp_path / "r.toml").exists()


def test_a_results_file_of_another_gpu_is_refused(tmp_path, monkeypatch, capsys):
    results = tmp_path / "res.json"
    results.write_text(RECORDED[1].read_text())
    FakeGPU(monkeypatch, results)
    assert "holds runs of NVIDIA H200, not of this GPU" in _one_line_error(
        capsys, ["--results", str(results), "--out", str(tmp_path / "r.toml")])


def test_the_calibration_entry_renders_in_the_docs(tmp_path, monkeypatch):
    results = tmp_path / "results" / "2026-12-01-fakegpu.json"
    FakeGPU(monkeypatch, results)
    assert calibrate.main(["--results", str(results), "--out", str(tmp_path / "r.toml")], log=lambda *_: None) == 0
    (tmp_path / "results" / RECORDED[0].name).write_text(RECORDED[0].read_text())
    monkeypatch.setattr(render_results, "ROOT", tmp_path)
    cal = json.loads(results.read_text())["calibration"]
    low, high = sorted(cal["grades"]["reference"][i]["tests"]["w8a8/perf_m1"]["ratio"] for i in (0, 1))
    spec = next(t for t in load_rubric().tests if t.name == "w8a8/perf_m1")   # the rubric's thresholds
    assert (f"| w8a8/perf_m1 | {spec.full_ratio:g} | {spec.zero_ratio:g} | 1.29 / {low:.2f}-{high:.2f} |"
            in render_results.table())
    docs = render_results.calibration_tables()
    assert "Calibrated on NVIDIA FakeGPU 9000, 2026-12-01 (`results/2026-12-01-fakegpu.json`, 2 reference" in docs
    assert "--from results/2026-11-22-h100.json results/2026-12-01-fakegpu.json" in docs
    assert docs.count("| w8a8/perf_m1 ") == 2


# ----------------------------------------------------------------------------- the warning in reports

def test_calibration_note():
    from grader.grade import calibration_note

    on = ("NVIDIA H100 80GB HBM3, 2026-11-22", "NVIDIA H200, 2026-11-22")
    assert calibration_note(on, None) is None                      # CPU run
    assert calibration_note(on, "NVIDIA H200") is None             # a GPU it was calibrated on
    assert calibration_note((), "NVIDIA GeForce RTX 4090") is None  # an uncalibrated rubric says nothing
    note = calibration_note(on, "NVIDIA GeForce RTX 4090")
    assert "\n" not in note and note.startswith("Warning:")
    assert "NVIDIA H100 80GB HBM3 (2026-11-22) and NVIDIA H200 (2026-11-22)" in note
    assert "NVIDIA GeForce RTX 4090" in note and "make calibrate" in note


@pytest.mark.parametrize("gpu, warned", [("NVIDIA GeForce RTX 4090", True), ("NVIDIA H200", False), (None, False)])
def test_reports_carry_the_warning_on_another_gpu(tmp_path, monkeypatch, gpu, warned):
    """Through grade(): report.md, report.json and the terminal. The submission is
    unreadable, so no worker starts; on "cuda" the GPU's name, clock and lock are faked."""
    import grader.grade as grade_module
    import grader.harness.timing as timing
    from grader.report import terminal_table, write_reports

    data = rubric_dict(tasks=("dds",))
    data["settings"]["calibrated_on"] = ["NVIDIA H200, 2026-11-22"]
    rubric = parse_rubric(data)
    if gpu:
        monkeypatch.setattr("torch.cuda.get_device_name", lambda *a: gpu)
        monkeypatch.setattr(timing, "copy_bandwidth_gbs", lambda *a, **k: 1000.0)
        monkeypatch.setattr(grade_module, "_one_grader_per_gpu", lambda *a: contextlib.nullcontext())
    bad = tmp_path / "s.zip"
    bad.write_bytes(b"not a zip")
    result = grade_module.grade(bad, rubric, seed=1, device="cuda" if gpu else "cpu", log=lambda *_: None)
    out = write_reports(result, tmp_path / "report")
    notes = json.loads((out / "report.json").read_text())["notes"]
    found = [n for n in notes if "calibrated on" in n]
    assert len(found) == (1 if warned else 0)
    if warned:
        assert found[0] in (out / "report.md").read_text()
        assert f"note: {found[0]}" in terminal_table(result)
    # A GPU report always says where its thresholds were placed; a CPU report has none to state.
    said = "Performance thresholds calibrated on: NVIDIA H200, 2026-11-22" in (out / "report.md").read_text()
    assert said == bool(gpu)


def test_calibrated_on_is_checked_strictly():
    data = rubric_dict(tasks=("dds",))
    for bad in ("NVIDIA H200, 2026-11-22", ["NVIDIA H200"], ["NVIDIA H200, 26-11-22"], [3]):
        data["settings"]["calibrated_on"] = bad
        with pytest.raises(RubricError, match='calibrated_on must be a list of "GPU name, YYYY-MM-DD" texts'):
            parse_rubric(data)
    data["settings"]["calibrated_on"] = ["NVIDIA A100-SXM4-80GB, 2026-12-01"]
    assert parse_rubric(data).settings.calibrated_on == ("NVIDIA A100-SXM4-80GB, 2026-12-01",)


def test_writing_the_calibrated_rubric_grades_nothing_again(tmp_path, monkeypatch, capsys):
    """The recorded grades stay valid when only thresholds change: --write after a
    calibration, and a later run with the written rubric, reuse them."""
    results, rubric = tmp_path / "res.json", tmp_path / "rubric.toml"
    rubric.write_text(DEFAULT_RUBRIC.read_text())
    FakeGPU(monkeypatch, results)
    assert calibrate.main(["--results", str(results), "--rubric", str(rubric), "--out", str(tmp_path / "r.toml")]) == 0
    for _ in range(2):
        again = FakeGPU(monkeypatch, results, done=4)
        assert calibrate.main(["--results", str(results), "--rubric", str(rubric), "--write"]) == 0
        assert again.calls == []
    assert rubric.read_text() == (tmp_path / "r.toml").read_text()
    moved = rubric.read_text().replace("shape = [1, 4096, 4096]\nfull_ratio", "shape = [2, 4096, 4096]\nfull_ratio")
    rubric.write_text(moved)   # a timed shape changed: the grades no longer apply
    regraded = FakeGPU(monkeypatch, results, done=0)
    assert calibrate.main(["--results", str(results), "--rubric", str(rubric), "--write", "--runs", "1"]) == 0
    assert regraded.calls == ["reference-0", "naive-0", "draft-0"]


@pytest.mark.slow
def test_grade_submission_records_the_report_or_the_error(tmp_path):
    """The real grader behind make calibrate: on the CPU a small rubric's DDS
    task grades the reference (performance not run: no ratio); a grade that
    writes no report is recorded with the grader's last line."""
    from tests.fakes import rubric_toml

    rubric = tmp_path / "rubric.toml"
    rubric.write_text(rubric_toml(tasks=("dds",)))
    g = gpu_session.grade_submission("reference-0", "solutions", tmp_path, args=("--rubric", str(rubric)))
    assert "error" not in g and g["score"] == 4 and (tmp_path / "grade-reference-0.log").exists()
    assert g["tests"]["dds/perf"]["status"] == "not_run" and "ratio" not in g["tests"]["dds/perf"]
    assert gpu_session.recorded_ratios({"grades": {"reference": g}}, "reference") == {"dds/perf": [None]}
    bad = gpu_session.grade_submission("naive-0", str(tmp_path / "nowhere"), tmp_path)
    assert bad["tests"] == {} and bad["error"].startswith("grader exited 2: no such submission")


def test_runs_of_two_toolchains_are_not_calibrated_together(tmp_path, capsys):
    """Thresholds placed from the runs of two compilers fit neither: --from refuses them, and a
    results file of another toolchain is not continued on this machine."""
    other = json.loads(RECORDED[1].read_text())
    other["versions"]["triton"] = "3.9.0"
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other))
    assert calibrate.main(["--from", str(RECORDED[0]), str(path), "--out", str(tmp_path / "r.toml")]) == 2
    err = capsys.readouterr().err
    assert "ran triton 3.9.0" in err and "calibrate from the runs of one toolchain" in err
    assert not (tmp_path / "r.toml").exists()
    del other["versions"]
    path.write_text(json.dumps(other))
    assert calibrate.main(["--from", str(path), "--out", str(tmp_path / "r.toml")]) == 2
    assert "records no torch and triton versions" in capsys.readouterr().err


def test_a_results_file_of_another_toolchain_is_not_continued(tmp_path, monkeypatch, capsys):
    results = tmp_path / "res.json"
    FakeGPU(monkeypatch, results, fail_at=1)
    with pytest.raises(KeyboardInterrupt):
        calibrate.main(["--results", str(results), "--out", str(tmp_path / "r.toml")])
    record = json.loads(results.read_text())
    record["versions"]["triton"] = "3.9.0"
    results.write_text(json.dumps(record))
    again = FakeGPU(monkeypatch, results)
    assert calibrate.main(["--results", str(results), "--out", str(tmp_path / "r.toml")]) == 2
    assert again.calls == [] and "this machine runs torch 2.11.0+cu130, triton 3.6.0" in capsys.readouterr().err
