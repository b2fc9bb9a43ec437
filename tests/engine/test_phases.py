"""grade.py's phases and what they hand the harness. The harness imports no phase
(tests/engine/test_import_graph.py): the static check's findings, the judge's rule for what voids a
task and the judge's allowance of host reads come in as arguments, and it applies them as
given. No worker starts here."""

import types

import pytest

from grader import grade
from grader.compare import Check
from grader.facts import CallResult, CaseRun, Draw, Runs, TaskRun
from grader.harness import run as harness_run
from grader.judge import voids_task
from grader.submission import Submission
from tests.fakes import SOLUTION, rubric

FORBIDDEN = "import torch\n\ndef dds_mm(x, w):\n    return torch.mm(x, w.to_dense().t())\n"


def _sub(**sources: str) -> Submission:
    return Submission(source="test", files={f"{task}.py": src.encode() for task, src in sources.items()})


def test_the_static_check_is_a_phase_of_its_own():
    """Findings by task: [] for a clean file, none for a file the submission lacks, the
    syntax finding left to the import, and nothing when the rubric turns the check off."""
    found = grade.static_findings(_sub(w8a8=SOLUTION["w8a8"], dds=FORBIDDEN, w4a16="def f(:\n"), rubric(),
                                  ["w8a8", "w4a16", "dds"])
    assert found["w8a8"] == [] and found["w4a16"] == []
    assert found["dds"] and "torch.mm" in found["dds"][0]
    assert "dds" not in grade.static_findings(_sub(w8a8=SOLUTION["w8a8"]), rubric(), ["w8a8", "dds"])
    assert grade.static_findings(_sub(dds=FORBIDDEN), rubric(static=False), ["dds"]) == {}


def test_the_harness_takes_the_static_findings_it_is_handed():
    # A dds.py without dds_mm: the harness stops before any worker, findings recorded.
    sub = _sub(dds="import torch\nmm = torch.mm\n")
    given = ["a finding handed in by grade.py"]
    runs = harness_run.run_tasks(sub, rubric(), "cpu", 1, ["dds"], log=lambda *_: None,
                                 static={"dds": given}, voided=lambda run: False, host_reads=0)
    run = runs.tasks["dds"]
    assert run.missing["kind"] == "missing_entry" and run.static == given and not run.error
    runs = harness_run.run_tasks(sub, rubric(), "cpu", 1, ["dds"], log=lambda *_: None,
                                 static={}, voided=lambda run: False, host_reads=0)
    assert runs.tasks["dds"].static == []   # the harness runs no static check of its own


def _clean_run(task: str, r) -> TaskRun:
    """A task whose every scored correctness case came back clean on all its draws."""
    clean = Draw("ok", check=Check(True, "ok"), sanity=Check(True, "ok"))
    run = TaskRun(task)
    for spec in r.tests_for(task, "correctness"):
        run.cases[spec.name] = CaseRun(spec.name, [clean] * harness_run.DRAWS)
    return run


@pytest.mark.parametrize("voids", [True, False])
def test_the_harness_times_a_task_only_when_the_handed_rule_lets_it(voids):
    r = rubric()
    run, asked = _clean_run("w8a8", r), []
    session = types.SimpleNamespace(deadline=0.0)

    def voided(seen):
        asked.append(seen)
        return voids

    harness_run._performance(run, r, [], session, 60.0, Runs("cuda", 1, {"w8a8": run}), lambda *_: None, voided)
    assert asked == [run]
    if voids:
        assert run.untimed.startswith("performance counts only for a kernel that passes")
        assert session.deadline == 0.0   # nothing was timed
    else:
        assert run.untimed == "" and session.deadline > 0


def test_a_case_not_clean_is_not_timed_whatever_the_rule():
    r = rubric()
    run = _clean_run("w8a8", r)
    scored = next(s for s in r.tests_for("w8a8", "correctness") if not s.bonus and s.shape_on("cuda"))
    run.cases[scored.name].draws = [Draw("error", "boom")]
    harness_run._performance(run, r, [], types.SimpleNamespace(deadline=0.0), 60.0, Runs("cuda", 1, {}),
                             lambda *_: None, lambda run: False)
    assert run.untimed.startswith("performance counts only")


def test_the_judges_rule_voids_a_task_for_forbidden_code_or_a_calls_evidence():
    assert not voids_task(TaskRun("w8a8"))
    assert voids_task(TaskRun("w8a8", static=["uses torch.mm"]))
    flagged = CallResult("ok", evidence={"own_launches": 1, "library_matmuls": ["aten::mm"]})
    assert voids_task(TaskRun("w8a8", calls=[("w8a8/c0", flagged)]))
    fine = CallResult("ok", evidence={"own_launches": 1})
    assert not voids_task(TaskRun("w8a8", calls=[("w8a8/c0", fine)]))
