"""Adversarial submissions, one per attack: each gets exactly the score it deserves.

Each attack is a fixture file in tests/fixtures/submissions/ (``w8a8_*.py``),
a complete student file whose docstring says what it does and what the grader
must make of it; those that need a correct kernel besides the attack carry the
tutorial-style kernel of calibration/naive/w8a8.py.

Most attacks are stopped twice: by the static check of the kernel file (in the
trusted parent) and, with that check switched off, by what happens at run time
(the parent judges outputs it recomputes itself; the child records launches and
PyTorch ops). Both layers are tested.
"""

import os
import re
import time
from pathlib import Path

import pytest
import torch

from grader.grade import grade
from grader.rubric import parse_rubric
from tests.fakes import ROOT, SOLUTION, by_name, correctness, grade_files, rubric, submission
from tests.helpers import HAS_CUDA, needs_gpu, scaled

pytestmark = pytest.mark.slow  # nearly every test grades a submission in the interpreter

NAIVE_W8A8 = (ROOT / "calibration" / "naive" / "w8a8.py").read_text()  # the attacks' honest twin


def _flags(task) -> str:
    return " ".join(f["detail"] for f in task.flags)


def _task(result, name="w8a8"):
    return {t.task: t for t in result.tasks}[name]


HOST_COMPUTE = "computes on the host"        # grader/worker/shapes.py: a torch op that computes, refused
VALUES_READ = "the wrapper read a tensor's value into Python"   # shapes.VALUES_MESSAGE


def _refused_on_the_cpu(result, *words, task="w8a8"):
    """On the CPU the wrapper sees shapes only (grader/worker/shapes.py): an attack on the host
    fails every correctness call with the refusal's words, before any kernel runs. The messages."""
    messages = [t.message for t in result.tests if t.task == task and t.kind == "correctness"]
    assert result.score == 0 and messages, messages
    assert all(any(w in m for w in words) for m in messages), messages
    return messages


@pytest.mark.parametrize("static", [True, False])
def test_torch_fallback_gets_nothing(tmp_path, static):
    result = grade_files(tmp_path, {"w8a8": submission("w8a8_torch_fallback")}, ["w8a8"], static=static)
    task = _task(result)
    assert result.score == 0
    if static:
        assert "forbidden code" in _flags(task)
    elif HAS_CUDA:
        assert "library matmul" in _flags(task)
    else:
        _refused_on_the_cpu(result, HOST_COMPUTE)


def test_broadcast_product_with_a_token_triton_copy_gets_nothing(tmp_path):
    # The product as multiply-and-sum in PyTorch, then a Triton launch just to look busy.
    src = submission("w8a8_torch_product_token_launch")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False)
    if HAS_CUDA:
        assert result.score == 0 and "computed outside Triton" in _flags(_task(result))
    else:
        _refused_on_the_cpu(result, HOST_COMPUTE)


def test_output_caching_that_skips_the_kernel_voids_the_task(tmp_path):
    src = submission("w8a8_cache_skips_kernel")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], same_shape_twice=True)
    assert result.score == 0 and "no Triton kernel" in _flags(_task(result))


def test_output_caching_fails_on_fresh_inputs(tmp_path):
    # Launches the kernel every time (so it looks busy) but returns the first answer.
    # Every case is called twice on fresh draws: the second call gets the cached answer.
    src = submission("w8a8_cache_first_answer")
    result = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"]))
    for name in ("w8a8/c0", "w8a8/c1"):
        assert result[name].score == 0, result[name].message
        assert "keep state between calls" in result[name].message


def test_writing_into_inputs_voids_the_task(tmp_path):
    src = submission("w8a8_writes_into_inputs")
    # The static check refuses the in-place op by name; without it the write is seen after the call.
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    assert result.score == 0 and "forbidden code" in _flags(_task(result))
    result = grade_files(tmp_path / "no_static", {"w8a8": src}, ["w8a8"], static=False)
    if HAS_CUDA:
        assert result.score == 0 and "inputs modified" in _flags(_task(result)), \
            (_task(result).flags, [t.message for t in result.tests])
    else:   # an in-place multiply computes: refused on shape-only tensors (a fill is not: the hidden-call test)
        _refused_on_the_cpu(result, HOST_COMPUTE)


@pytest.mark.parametrize("patched", ["allclose", "testing", "equal", "cuda_events", "grader_worker"])
def test_monkeypatching_is_flagged(tmp_path, patched):
    # An honest kernel plus one monkeypatch: the patch alone voids the task.
    result = grade_files(tmp_path, {"w8a8": submission(f"w8a8_monkeypatch_{patched}")}, ["w8a8"])
    assert result.score == 0 and "forbidden code" in _flags(_task(result))


def test_monkeypatched_checks_cannot_pass_a_wrong_kernel(tmp_path):
    # Static check off: the patches run in the child, but judging happens in the parent.
    result = grade_files(tmp_path, {"w8a8": submission("w8a8_zeros_with_patched_checks")}, ["w8a8"], static=False)
    assert result.score == 0


def test_patching_the_child_recorders_does_not_hide_a_fallback_from_the_static_check(tmp_path):
    src = submission("w8a8_patches_child_recorders")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=True)
    assert result.score == 0


def test_fake_report_is_overwritten(tmp_path):
    report_dir = tmp_path / "report"
    src = submission("w8a8_fake_report", report_dir=report_dir)
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    assert result.score == 0 and "forbidden code" in _flags(_task(result))
    from grader.report import write_reports
    write_reports(result, report_dir)
    assert '"score": 0' in (report_dir / "report.json").read_text()


@pytest.mark.parametrize("how", ["sys_exit", "os_exit"])
def test_exit_mid_test_loses_only_the_cases_it_stopped(tmp_path, how):
    # Calls 1 and 2 are the two draws of c0; the exit comes in c1's first call.
    src = submission(f"w8a8_{how}_mid_test")
    tests = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False))
    assert tests["w8a8/c0"].status == "passed"  # before the exit
    assert tests["w8a8/c1"].score == 0
    static = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=True)
    assert static.score == 0


def _survivors(marker: str) -> list[int]:
    """Processes (any namespace: the host's /proc sees them all) whose command line holds ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in proc.joinpath("cmdline").read_bytes().decode(errors="replace"):
                state = proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(proc.name))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("how", ["fork", "setsid", "double_fork"])
def test_forked_process_does_not_outlive_the_task(tmp_path, how):
    marker = f"{12345 + hash(str(tmp_path)) % 1000}.{len(how)}7"   # a unique sleep length
    src = submission(f"w8a8_{how}_survivor", marker=marker)
    result = _graded_untouched(tmp_path, src)
    # The kernel itself is right, but starting a process voids the task (grader/harness/osfacts.py).
    assert _task(result).score == 0 and "new process" in _flags(_task(result)), _flags(_task(result))
    time.sleep(0.5)
    assert _survivors(marker) == [], f"a process started by the submission outlived its task ({how})"
    assert grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=True).score == 0


def test_printing_100mb_is_harmless(tmp_path):
    src = submission("w8a8_prints_100mb")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    task = _task(result)
    assert all(t.status == "passed" for t in result.tests if t.kind == "correctness")
    assert len(task.log_tail) <= 4000


def test_cannot_import_solutions_or_the_grader(tmp_path):
    src = "from solutions.w8a8 import w8a8_mm\n"
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False)
    assert result.score == 0 and "No module named 'solutions'" in _task(result).summary
    src = "from grader.tasks.w8a8 import reference as w8a8_mm\n"
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False)
    assert result.score == 0 and "No module named 'grader'" in _task(result).summary


def test_reading_other_files_is_flagged(tmp_path):
    solution = ROOT / "solutions" / "w8a8.py"
    src = f"exec(open({str(solution)!r}).read().replace('from .utils', 'from submission.utils'))\n"
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    assert result.score == 0 and "forbidden code" in _flags(_task(result))


@needs_gpu
def test_side_stream_work_is_timed(tmp_path):
    # The clock is the harness's (host time around the whole batch, after the
    # worker's device-wide synchronize): work moved to another stream is timed.
    src = submission("w8a8_side_stream")
    hidden = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False))["w8a8/perf"]
    honest = by_name(grade_files(tmp_path, {"w8a8": NAIVE_W8A8}, ["w8a8"]))["w8a8/perf"]
    if "kernel_ms" not in hidden.details:   # not timed at all: it earns nothing
        assert hidden.score == 0, hidden.message
    else:
        assert hidden.details["kernel_ms"] > 0.8 * honest.details["kernel_ms"], (hidden.message, honest.message)


@needs_gpu
def test_forged_event_clock_changes_nothing(tmp_path):
    src = submission("w8a8_forged_event_clock")
    forged = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False))["w8a8/perf"]
    honest = by_name(grade_files(tmp_path, {"w8a8": NAIVE_W8A8}, ["w8a8"]))["w8a8/perf"]
    assert forged.details["kernel_ms"] > 0.8 * honest.details["kernel_ms"], (forged.message, honest.message)


@needs_gpu
def test_timed_calls_that_skip_the_work_fail(tmp_path):
    # Honest for the checked calls (the first 40), then computing only one timed
    # call in five: every timed output is checked.
    src = submission("w8a8_skips_timed_work")
    tests = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False))
    assert tests["w8a8/perf"].score == 0 and "wrong" in tests["w8a8/perf"].message


@needs_gpu
def test_timed_calls_computed_on_the_first_replay_only_fail(tmp_path):
    # Outputs are collected after the clock, from the replay that was timed: a later
    # replay that skips the work leaves NaN (and last round's activations' answer), not this round's.
    src = submission("w8a8_first_replay_only")
    tests = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"]))
    assert all(t.status == "passed" for n, t in tests.items() if n != "w8a8/perf")
    assert tests["w8a8/perf"].score == 0 and "wrong" in tests["w8a8/perf"].message


@needs_gpu
def test_timed_calls_that_return_one_buffer_fail(tmp_path):
    # Correct for every checked call; in a timed batch every call needs an output of its own.
    src = submission("w8a8_one_output_buffer")
    tests = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"]))
    assert all(t.status == "passed" for n, t in tests.items() if n != "w8a8/perf")
    assert tests["w8a8/perf"].score == 0 and "share memory" in tests["w8a8/perf"].message


@needs_gpu
@pytest.mark.parametrize("static", [True, False])
def test_cublas_while_captured_gets_nothing(tmp_path, static):
    # Phase switch: the honest kernel when called eagerly (checked), cuBLAS while
    # the timed batch is captured in a CUDA graph.
    # cuBLAS is warmed up at import, so that it can be captured.
    src = submission("w8a8_cublas_while_captured")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=static)
    task = _task(result)
    assert task.score == 0
    # Without the static check, the op record (library matmul) or the kernel trace (kernels
    # that are not the submission's: no Triton kernel) names it, whichever sees it first.
    said = ("forbidden code",) if static else ("library matmul", "no Triton kernel")
    assert any(s in _flags(task) for s in said), _flags(task)


# ---- The reply channel: the only thing the worker can say, parsed defensively.

@pytest.mark.parametrize("poison", ["forged-ok", "deep-nesting", "wrong-types", "wrong-evidence", "huge-line"])
def test_poisoned_replies_cost_the_task_only(tmp_path, poison):
    naive = (ROOT / "calibration" / "naive" / "dds.py").read_text()
    src = submission("w8a8_writes_reply_pipe", poison=poison)
    result = _graded_untouched(tmp_path, {"w8a8": src, "dds": naive})
    tasks = {t.task: t for t in result.tasks}
    assert tasks["w8a8"].score == 0
    assert tasks["dds"].score == tasks["dds"].max_score > 0   # the next task is untouched


def test_output_on_the_meta_device_is_a_failed_case(tmp_path):
    src = submission("w8a8_output_on_meta")
    result = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False))
    # On the CPU every tensor of the wrapper is on meta: it is the launch that is missing.
    words = "output is on meta" if HAS_CUDA else "launched no Triton kernel"
    assert result["w8a8/c0"].score == 0 and words in result["w8a8/c0"].message, result["w8a8/c0"].message


# ---- The sandbox: what a submission can reach with allowed modules and known paths.
# Each attack below runs with the static check off (so its code really runs),
# and each test asserts the score, that nothing outside the worker's scratch
# folder changed, and that a report exists.

def _snapshot(*extra: Path) -> dict:
    """Hashes of the grader's tree, the grading user's HOME dot-folders and ``extra`` paths."""
    import hashlib
    out = {}
    roots = [ROOT / "grader", ROOT / "assignment", ROOT / "solutions",
             Path.home() / ".local", Path.home() / ".config", *extra]
    for root in roots:
        if not root.exists():
            out[str(root)] = None
            continue
        for p in sorted(root.rglob("*")) if root.is_dir() else [root]:
            if p.is_file() and "__pycache__" not in p.parts:
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _graded_untouched(tmp_path, src, *extra: Path, task="w8a8"):
    """Grade ``src`` (a kernel file, or {task: source} for several tasks) with the
    static check off; assert a report exists and nothing outside scratch changed."""
    files = src if isinstance(src, dict) else {task: src}
    before = _snapshot(*extra)
    result = grade_files(tmp_path, files, list(files), static=False)
    from grader.report import write_reports
    write_reports(result, tmp_path / "report")
    assert (tmp_path / "report" / "report.json").is_file()
    after = _snapshot(*extra)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"the submission changed files outside its scratch folder: {changed[:5]}"
    return result


def test_writing_the_graders_conftest_and_tree_fails(tmp_path):
    # With the grader's real paths known, write a conftest that passes every test,
    # and try the parent's folder through /proc too. Then return zeros.
    result = _graded_untouched(tmp_path, submission("w8a8_writes_grader_conftest", root=ROOT))
    assert result.score == 0


def test_earlier_reports_cannot_be_rewritten(tmp_path):
    earlier = tmp_path / "batch" / "students" / "alice"
    earlier.mkdir(parents=True)
    report = earlier / "report.json"
    report.write_text('{"score": 0}')
    _graded_untouched(tmp_path, submission("w8a8_rewrites_earlier_reports", earlier=earlier), report)
    assert report.read_text() == '{"score": 0}'


def test_pth_file_in_the_graders_home_is_not_planted(tmp_path):
    site = Path.home() / ".local" / "lib" / "python3.11" / "site-packages"
    result = _graded_untouched(tmp_path, submission("w8a8_plants_pth", home=Path.home()))
    assert not (site / "zz_grader_attack.pth").exists()
    assert _task(result).score > 0   # the kernel itself is honest


def test_hidden_cases_do_not_leak_into_visible_messages(tmp_path):
    # Everything the worker can read goes into an exception message.
    src = submission("w8a8_leaks_what_it_reads")
    from grader.grade import grade
    from grader.rubric import parse_rubric
    from tests.fakes import rubric_dict
    data = rubric_dict(tasks=("w8a8",), static=False)
    data["tests"].append(dict(name="w8a8/secret_case_xyz", task="w8a8", kind="correctness", points=1,
                              shape=[7, 32, 72], cpu_shape=[7, 32, 72], hidden=True))
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "w8a8.py").write_text(src)
    result = grade(sub, parse_rubric(data), seed=99, tasks=["w8a8"], log=lambda *_: None)
    visible = " ".join(t.message for t in result.tests if "secret" not in t.name) + _task(result).log_tail
    # The grade's own temporary folders have random names (grade-6kwg_l99): not a secret, and not to match one.
    visible = re.sub(r"grade-\w{8}", "grade-XXXXXXXX", visible.replace(str(tmp_path), ""))
    for secret in ("secret_case_xyz", "[7, 32, 72]", "72", "rubric", str(99)):
        assert secret not in visible, f"{secret!r} leaked into a visible message"


@pytest.mark.skipif(HAS_CUDA, reason="with a GPU the sandbox does not bound the worker's memory (CUDA "
                    "reserves huge address ranges): docker --memory does, docs/integrity.md")
def test_memory_hog_dies_alone(tmp_path):
    result = _graded_untouched(tmp_path, submission("w8a8_memory_hog"))
    tests = by_name(result)
    assert tests["w8a8/c0"].score == 0
    assert "memory" in tests["w8a8/c0"].message.lower() or "alloc" in tests["w8a8/c0"].message.lower()


def test_network_is_cut(tmp_path):
    import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.1)
    port = server.getsockname()[1]
    result = _graded_untouched(tmp_path, submission("w8a8_connects_socket", port=port))
    try:
        server.accept()
        reached = True
    except OSError:
        reached = False
    server.close()
    assert not reached, "the worker reached a socket on the grading machine"
    assert "ConnectionRefused" in by_name(result)["w8a8/c0"].message or "unreachable" in \
        by_name(result)["w8a8/c0"].message.lower()


def test_patching_the_worker_from_the_kernel_file_is_refused(tmp_path):
    # Replace the worker's call with one that writes the reference, computed in
    # PyTorch, into the output: the static check refuses the file.
    src = submission("w8a8_patches_worker_call")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=True)
    assert result.score == 0 and "forbidden code" in _flags(_task(result))


# ---- Holes a red-team review found (each fixture's docstring tells the attack).

def test_arena_names_in_scratch_reach_nothing(tmp_path):
    """Symlinks where the shared input files once were: the files they point at,
    one of them root's and unreadable to others, stay as they were."""
    victims = tmp_path / "victim"
    victims.mkdir(mode=0o700)
    secret, absent = victims / "secret", victims / "created-by-grader"
    secret.write_text("secret\n")
    secret.chmod(0o600)
    src = submission("w8a8_arena_symlinks", targets=[str(secret), str(absent)])
    result = _graded_untouched(tmp_path, src, victims)
    assert secret.read_text() == "secret\n" and secret.stat().st_mode & 0o777 == 0o600
    assert not absent.exists()
    assert correctness(result) == 4   # the kernel is honest
    (tmp_path / "static").mkdir()
    static = grade_files(tmp_path / "static", {"w8a8": src}, ["w8a8"], static=True)
    assert static.score == 0 and secret.read_text() == "secret\n" and not absent.exists()


def test_a_fifo_where_an_arena_was_does_not_hang_the_grade(tmp_path):
    started = time.monotonic()
    result = _graded_untouched(tmp_path, submission("w8a8_arena_fifo"))
    assert correctness(result) == 4 and time.monotonic() - started < scaled(120)


def test_a_worker_that_stops_reading_commands_costs_its_task_only(tmp_path):
    """Its command pipe full, a harness that wrote without a deadline would block forever."""
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "w8a8.py").write_text(submission("w8a8_stops_reading_commands"))
    (sub / "dds.py").write_text((ROOT / "calibration" / "naive" / "dds.py").read_text())
    started = time.monotonic()
    limit = scaled(20)   # enough for the honest DDS task on this machine now
    result = grade(sub, rubric(timeout_s=limit, static=False, tasks=("w8a8", "dds")), seed=5,
                   tasks=["w8a8", "dds"], log=lambda *_: None)
    assert time.monotonic() - started < limit + scaled(120)   # the deadline held (dds still ran after it)
    tasks = {t.task: t for t in result.tasks}
    assert tasks["w8a8"].score == 0 and tasks["w8a8"].status == "timeout", tasks["w8a8"].summary
    assert correctness(result, "dds") == 4


def test_truncating_what_the_worker_has_open_cannot_kill_the_grader(tmp_path):
    result = _graded_untouched(tmp_path, submission("w8a8_truncates_arenas"))
    assert correctness(result) == 4


def test_cpu_arenas_are_sealed():
    from grader.harness.arena import Arena, Plan
    plan = Plan()
    plan.tensor(torch.ones(8))
    arena = Arena(plan, "cpu")
    with pytest.raises(PermissionError):
        os.ftruncate(arena.fd, 0)
    with pytest.raises(PermissionError):
        os.ftruncate(arena.fd, arena.buf.numel() * 2)


def _hidden_rubric(extra_hidden: list):
    from tests.fakes import rubric_dict
    data = rubric_dict(tasks=("w8a8",), static=False)
    data["tests"] = [t for t in data["tests"] if t["kind"] == "correctness"]
    for name, shape in extra_hidden:
        data["tests"].append(dict(name=name, task="w8a8", kind="correctness", points=1, shape=shape,
                                  cpu_shape=shape, hidden=True, visibility="after_due_date"))
    return parse_rubric(data)


def _visible_text(result) -> str:
    """Everything a student sees before the due date: visible tests' messages, the
    task summaries and printed output, the notes, and Gradescope's visible output."""
    from grader.report import gradescope
    parts = [t.message for t in result.tests if t.visibility == "visible"]
    parts += [f"{t.summary} {t.log_tail} {t.kernels}" for t in result.tasks] + list(result.notes)
    gs = gradescope(result)
    parts += [gs["output"]] + [t["output"] for t in gs["tests"] if t.get("visibility") == "visible"]
    return "\n".join(parts)


def test_what_the_hidden_worker_prints_stays_out_of_visible_reports(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "w8a8.py").write_text(submission("w8a8_prints_shapes"))
    result = grade(sub, _hidden_rubric([("w8a8/odd", [7, 32, 72])]), seed=8, tasks=["w8a8"],
                   log=lambda *_: None)
    visible = _visible_text(result)
    assert "SHAPE 5 64 96" in visible            # its own prints on visible shapes are shown
    assert "SHAPE 7 32 72" not in visible


def test_how_the_hidden_worker_ended_stays_out_of_visible_reports(tmp_path):
    from tests.fakes import rubric_dict
    public = [t["cpu_shape"] for t in rubric_dict(tasks=("w8a8",))["tests"] if t["kind"] == "correctness"]
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "w8a8.py").write_text(submission("w8a8_exit_code_leak", public=public))
    result = grade(sub, _hidden_rubric([("w8a8/odd", [7, 32, 72])]), seed=8, tasks=["w8a8"],
                   log=lambda *_: None)
    hidden = next(t for t in result.tests if t.name == "w8a8/odd")
    assert "code 72" in hidden.message            # its own message says how it ended
    assert "code 72" not in _visible_text(result)
    assert correctness(result) == 4


def test_the_hidden_tests_gpu_shapes_stay_out_of_the_compile_table_and_the_estimate(tmp_path):
    """A CPU run calls the wrapper at every test's GPU shape and compiles what it launches;
    the hidden test's GPU shape goes to the hidden worker only, and a hidden performance
    test's to no worker. A wrapper that picks 128-row tiles from M = 512 on, where only
    the hidden tests' GPU shapes reach: the visible compile table, the estimate and every
    report carry neither that configuration, nor a hidden test's name as a label, nor a
    number of its shape."""
    import json

    from grader.report import terminal_table, write_reports
    from tests.fakes import rubric_dict
    M, N, K = 1777, 1408, 2240
    P = [1999, 1152, 3136]
    data = rubric_dict(tasks=("w8a8",), static=False)
    data["tests"].append(dict(name="w8a8/secret_case_q", task="w8a8", kind="correctness", points=1,
                              shape=[M, N, K], cpu_shape=[7, 32, 72], hidden=True, visibility="after_due_date"))
    data["tests"].append(dict(name="w8a8/secret_perf_z", task="w8a8", kind="performance", points=1, shape=P,
                              full_ratio=1.0, zero_ratio=0.5, hidden=True, visibility="after_due_date"))
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "w8a8.py").write_text((ROOT / "tests" / "fixtures" / "compile" / "w8a8_by_m.py").read_text())
    result = grade(sub, parse_rubric(data), seed=8, device="cpu", tasks=["w8a8"], log=lambda *_: None)
    task = _task(result)
    assert by_name(result)["w8a8/secret_case_q"].score == 1 and correctness(result) == 5
    assert task.kernels and any(k.get("tests") for k in task.kernels)   # the visible GPU shapes are there
    assert task.estimate.get("tests", {}).get("w8a8/perf"), task.estimate
    write_reports(result, tmp_path / "report")
    texts = {p.name: p.read_text() for p in (tmp_path / "report").iterdir() if p.suffix in (".md", ".json")}
    texts["terminal"] = terminal_table(result)
    texts["visible"] = _visible_text(result)
    texts["kernels, estimate"] = json.dumps([task.kernels, task.estimate])
    assert {"report.md", "report.json", "results.json"} <= set(texts)
    shape = [str(n) for n in (M, N, K, M * N, M * K, M * N * K, 2 * M * N * K, *P, P[0] * P[1] * P[2])]
    for name, text in texts.items():
        for secret in [*shape, "BLOCK_M=128", "BLOCK\\_M=128", "num_warps=8"]:
            # a number of the shape as a number of its own, not as digits inside another (31.2819994)
            found = re.search(rf"(?<![\d.]){re.escape(secret)}(?!\d)", text) if secret.isdigit() else secret in text
            assert not found, f"{secret!r} from the hidden test's GPU shape is in {name}"
    for name in ("visible", "kernels, estimate"):   # the TA's own rows name the hidden tests
        assert "secret_" not in texts[name], name


def test_a_product_computed_by_pytorch_ops_gets_nothing(tmp_path):
    """A K-loop of rank-1 updates in PyTorch arithmetic (no matmul anywhere) and a
    token Triton copy: the static check cannot see tensor arithmetic; on the CPU the
    shape-only wrapper refuses it, on a GPU the kernel trace names the ops."""
    result = grade_files(tmp_path, {"w8a8": submission("w8a8_torch_k_loop")}, ["w8a8"])
    assert result.score == 0
    if HAS_CUDA:
        assert "no_triton_compute" in [f["kind"] for f in _task(result).flags], _task(result).flags
    else:
        _refused_on_the_cpu(result, HOST_COMPUTE)


def test_a_zip_member_that_lies_about_its_size_is_read_with_a_cap(tmp_path):
    """Declares 100 bytes, inflates to 64 MiB: the grader reads no more than its cap."""
    import zipfile

    from grader.submission import MAX_FILE_BYTES, load_submission
    path = tmp_path / "lying.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("w8a8.py", b"#" * (64 << 20))
    raw = bytearray(path.read_bytes())
    # Rewrite the uncompressed size (local header and central directory) to 100 bytes.
    for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = raw.index(sig)
        raw[at + offset:at + offset + 4] = (100).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    sub = load_submission(path)
    assert "w8a8.py" not in sub.files
    assert any("w8a8.py could not be read" in p for p in sub.problems), sub.problems
    assert MAX_FILE_BYTES < 64 << 20


# ---- No Triton, no points: a product computed anywhere but in the submission's kernels.
# The worker records every PyTorch op of a call wherever it runs (Triton calls
# student code during a launch), the CPU interpreter counts the arithmetic of
# the submission's kernels, and on a GPU a kernel trace shows what ran.

NO_TRITON = "no Triton kernel computed the output"


@pytest.mark.gpu
@pytest.mark.parametrize("where, static", [("grid_callable", True), ("grid_callable", False),
                                           ("launch_hook", True), ("argument_method", False),
                                           ("kernel_helper", False)])
def test_no_triton_no_points_where_triton_calls_student_code(tmp_path, where, static):
    """The product in PyTorch inside code Triton calls during the launch: the grid
    callable, a Config's pre_hook, a method of an argument, a helper the kernel
    calls (the interpreter runs it as Python); the kernel itself does no work."""
    result = grade_files(tmp_path, {"w8a8": submission(f"w8a8_{where}_computes")}, ["w8a8"], static=static)
    task = _task(result)
    assert correctness(result) == 0, [t.message for t in result.tests]
    if where == "kernel_helper":
        # A plain function called from a kernel does not compile for a GPU: every call fails, on the CPU
        # before anything runs (the executor builds the file's kernels alone, grader/worker/kernels_only.py).
        if not HAS_CUDA:
            _refused_on_the_cpu(result, "does not compile for the GPU")
    elif HAS_CUDA:
        assert NO_TRITON in _flags(task), task.flags
        assert "no_triton_compute" in [f["kind"] for f in task.flags]
    else:   # the shape-only wrapper refuses the product's torch ops wherever Triton calls it from,
        # and an object of the file's own as a kernel argument
        _refused_on_the_cpu(result, HOST_COMPUTE, VALUES_READ, "was passed to a kernel or an op")


@pytest.mark.skipif(HAS_CUDA, reason="one .item() per element of x and the weight: far too slow at the GPU "
                    "shapes (docs/integrity.md)")
def test_no_triton_no_points_for_python_arithmetic(tmp_path):
    """Element by element in Python floats: PyTorch computes nothing (only .item() and
    element writes). On the CPU the wrapper never holds a value: the first .item() is refused."""
    result = grade_files(tmp_path, {"w8a8": submission("w8a8_python_scalar_loop")}, ["w8a8"])
    _refused_on_the_cpu(result, VALUES_READ)   # the first .item() of an input


@pytest.mark.gpu
def test_hidden_call_evidence_voids_the_task_in_fixed_words_only(tmp_path):
    """An honest kernel that, on shapes missing from the public rubric, builds a cat
    and a stack whose sizes spell M, N and K. On a GPU the hidden test's evidence (the op
    record: more elements than a wrapper may make) voids W8A8; on the CPU a cat and a stack
    are copies the wrapper may make, carried out by the executor. Either way no output a
    student or TA reads (report.md, report.json, results.json, class.csv, summary.md, the
    terminal) holds a number made from the hidden call."""
    from classroom import batch
    from grader.judge import HIDDEN_DETAIL, HIDDEN_KIND
    from grader.report import terminal_table, write_reports
    from tests.fakes import rubric_dict
    public = [t["cpu_shape"] for t in rubric_dict(tasks=("w8a8",))["tests"] if t["kind"] == "correctness"]
    M, N, K = hidden = [11, 48, 136] if not HAS_CUDA else [50, 512, 1000]
    sub = tmp_path / "alice"
    sub.mkdir()
    (sub / "w8a8.py").write_text(submission("w8a8_hidden_shape_in_op_sizes", public=public))
    result = grade(sub, _hidden_rubric([("w8a8/odd_shape", hidden)]), seed=8, tasks=["w8a8"], log=lambda *_: None)
    task = _task(result)
    if HAS_CUDA:
        assert task.score == 0 and correctness(result) == 0
        assert {"kind": HIDDEN_KIND, "detail": HIDDEN_DETAIL} in task.flags
    else:
        assert task.score == task.max_score and not task.flags, (task.flags, [t.message for t in result.tests])
    out = tmp_path / "batch"
    write_reports(result, out / "students" / "alice")
    batch.write_class_files(out, [batch.Entry("alice", sub, "alice")], ["w8a8"])
    texts = {p.name: p.read_text() for p in [*(out / "students" / "alice").iterdir(), out / "class.csv",
                                                out / "summary.md"]}
    texts["terminal"] = terminal_table(result)
    assert len(texts) == 6
    derived = {3000000 + 10000 * M + 100 * N + K, 5000000 + M * N * K,        # the ops' sizes
               M * N + M * K + M, 2 * M * N * K, M * N * K, M * K, N * K}     # limits and FLOPs of the call
    spelled = [str(n) for n in derived] + [f"{M}, {N}, {K}", f"{M} x {N} x {K}", "cat (", "stack ("]
    for name, text in texts.items():
        for secret in spelled:
            assert secret not in text, f"{secret!r} from the hidden call is in {name}"
    if HAS_CUDA:
        assert "a hidden test broke the rules" in texts["report.md"] + texts["results.json"]


@pytest.mark.gpu
@pytest.mark.parametrize("static", [True, False])
def test_a_launch_hook_installed_through_knobs_gets_nothing(tmp_path, static):
    """tl.core.knobs.setenv, and _Setter.install(tl.core.knobs.runtime, hook): a method
    of the file's own class with a knobs object as self installs a launch hook that
    computes the product. The static check refuses both; with it off, the hook's work
    is seen on a GPU (the CPU interpreter calls no launch hook: the output stays unwritten)."""
    result = grade_files(tmp_path, {"w8a8": submission("w8a8_knobs_launch_hook")}, ["w8a8"], static=static)
    task = _task(result)
    assert correctness(result) == 0, [t.message for t in result.tests]
    if static:
        text = _flags(task)
        assert "forbidden code" in text and "tl.core.knobs.setenv" in text and "_Setter.install" in text, text
    elif HAS_CUDA:
        assert NO_TRITON in _flags(task), task.flags


# ---- Any zip is graded, or named as broken: never a grader error.

def _zip(path: Path, members: list) -> Path:
    """Write ``members`` ((name, bytes) or a ZipInfo with its bytes) into a zip at ``path``."""
    import warnings
    import zipfile
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "Duplicate name": a case below wants one
        for name, data in members:
            zf.writestr(name, data)
    return path


def _patched(path: Path, old: bytes, new: bytes) -> Path:
    """Replace ``old`` by ``new`` (same length) everywhere in the zip's bytes: in its local
    headers and its central directory alike."""
    raw = path.read_bytes()
    assert len(old) == len(new) and old in raw
    path.write_bytes(raw.replace(old, new))
    return path


def _symlink_member(name: str, target: str):
    import stat
    import zipfile
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target.encode()


def test_a_zip_whose_member_name_is_not_utf8_is_graded(tmp_path):
    """The reference kernels and one stray member named notes_\\xff\\xfe.txt with the
    UTF-8 flag set: Python's zipfile refuses such a zip outright; the grader reads
    it, grades the kernels and names the odd member in the report."""
    import zipfile
    path = _zip(tmp_path / "alice.zip", [("w8a8.py", SOLUTION["w8a8"]), ("dds.py", SOLUTION["dds"]),
                                         ("w4a16.py", SOLUTION["w4a16"]), ("notes_\u00e9.txt", b"hi")])
    _patched(path, "notes_\u00e9".encode(), b"notes_\xff\xfe")
    with pytest.raises(UnicodeDecodeError):
        zipfile.ZipFile(path)
    result = grade(path, rubric(), seed=3, tasks=["dds"], log=lambda *_: None)
    assert correctness(result) == 4
    assert any("not valid UTF-8" in n and "notes_" in n for n in result.notes), result.notes


ZIPS = {
    # name: (members, patch (old, new) or None, files found, words the problems or notes must hold)
    "duplicate names: the last copy": ([("w8a8.py", b"garbage("), ("w8a8.py", SOLUTION["w8a8"])], None,
                                       {"w8a8.py": SOLUTION["w8a8"].encode()}, ["more than once", "w8a8.py"]),
    "a folder named like a kernel file": ([("w8a8.py/", b""), ("alice/w8a8.py", b"x = 1\n")], None,
                                          {"w8a8.py": b"x = 1\n"}, []),
    "a symbolic link named like a kernel file": ([_symlink_member("w8a8.py", "/etc/passwd")], None, {},
                                                 ["symbolic link", "w8a8.py not found"]),
    "a zip inside the zip": ([("outer/inner.zip", "@INNER@")], None, {"dds.py": SOLUTION["dds"].encode()},
                             ["zip inside it", "inner.zip"]),
    "a broken zip inside the zip": ([("inner.zip", b"PK\x03\x04 not a zip")], None, {},
                                    ["could not be read", "dds.py not found"]),
    "Windows separators": ([("alice\\dds.py", b"x = 2\n")], None, {"dds.py": b"x = 2\n"}, []),
    "a name in another case": ([("W8A8.py", b"x = 3\n")], None, {},
                               ["w8a8.py not found", "W8A8.py", "named exactly w8a8.py"]),
    "an unknown compression method": ([("dds.py", b"x = 4\n" * 50)], (b"\x08\x00", b"\x09\x00"), {},
                                      ["dds.py could not be read"]),
    "paths outside the folder": ([("../dds.py", b"x = 5\n"), ("/abs/w4a16.py", b"x = 6\n")], None, {},
                                 ["unsafe paths", "dds.py not found"]),
}


@pytest.mark.parametrize("case", list(ZIPS))
def test_any_zip_is_read_or_named_as_broken(tmp_path, case):
    from grader.submission import load_submission
    members, patch, found, words = ZIPS[case]
    if any(data == "@INNER@" for _, data in members):
        inner = _zip(tmp_path / "inner.zip", [("dds.py", SOLUTION["dds"])]).read_bytes()
        members = [(name, inner) for name, _ in members]
    path = _zip(tmp_path / "s.zip", members)
    if patch:   # the method field of the local header and of the central directory entry
        raw = bytearray(path.read_bytes())
        for sig, at in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
            i = raw.index(sig)
            assert raw[i + at:i + at + 2] == patch[0]
            raw[i + at:i + at + 2] = patch[1]
        path.write_bytes(bytes(raw))
    sub = load_submission(path)
    assert sub.files == found
    said = " ".join(sub.problems + sub.notes)
    for w in words:
        assert w in said, (w, said)


def test_a_zip_with_a_broken_central_directory_is_named_as_broken(tmp_path):
    """Garbage where the central directory should be: the report says the zip is
    corrupt (unreadable), never a grader error."""
    path = _zip(tmp_path / "bob.zip", [("dds.py", SOLUTION["dds"])])
    raw = bytearray(path.read_bytes())
    at = raw.index(b"PK\x01\x02")
    raw[at:at + 4] = b"XXXX"
    path.write_bytes(bytes(raw))
    result = grade(path, rubric(), seed=3, tasks=["dds"], log=lambda *_: None)
    task = _task(result, "dds")
    assert result.score == 0 and task.status == "unreadable", task.summary
    assert "a truncated or corrupt .zip file" in task.summary, task.summary


@pytest.mark.gpu
def test_no_triton_no_points_for_work_in_a_finalizer(tmp_path):
    """A __del__ the garbage collector calls when it pleases, maybe after the call
    returned. The static check refuses the name; without it, the trace (GPU) sees idle
    kernels, and on the CPU the finalizer has shapes only: the output is never computed."""
    task = _task(grade_files(tmp_path, {"w8a8": submission("w8a8_del_computes")}, ["w8a8"]))
    assert task.score == 0 and "forbidden code" in _flags(task) and "__del__" in _flags(task), task.flags
    result = grade_files(tmp_path / "no_static", {"w8a8": submission("w8a8_del_computes")}, ["w8a8"], static=False)
    assert correctness(result) == 0, [t.message for t in result.tests]
    if HAS_CUDA:
        assert NO_TRITON in _flags(_task(result)), _task(result).flags


@pytest.mark.gpu
def test_no_triton_no_points_for_pytorch_work_on_another_thread(tmp_path):
    """The product computed on a thread of the submission's own: the kernel trace (GPU) sees
    the kernels, not the thread; on the CPU that thread has shapes only, like the wrapper,
    and the threads rule (osfacts) sees it start."""
    result = grade_files(tmp_path, {"w8a8": submission("w8a8_thread_computes")}, ["w8a8"], static=False)
    task = _task(result)
    assert correctness(result) == 0, [t.message for t in result.tests]
    if HAS_CUDA:
        assert NO_TRITON in _flags(task), task.flags


@pytest.mark.gpu
@needs_gpu
def test_the_kernel_trace_of_honest_kernels_shows_their_kernels_only(tmp_path):
    """On a GPU every checked call of the reference and the tutorial-style kernels is
    traced: their own Triton kernels ran, and nothing else computed (torch.empty's NaN
    fill in deterministic mode and copies are allowed)."""
    from grader.grade import run_workers, static_findings
    from grader.submission import load_submission
    tasks = ["w8a8", "w4a16", "dds"]
    for folder in ("solutions", "calibration/naive"):
        sub, r = load_submission(ROOT / folder), rubric(static=True)
        runs = run_workers(sub, r, "cuda", 21, tasks, static_findings(sub, r, tasks), log=lambda *_: None)
        for task, run in runs.tasks.items():
            assert run.checks_off == {}, (folder, task, run.checks_off)
            checked = [(name, r) for name, r in run.calls if r.traced]
            assert checked, (folder, task)
            for name, r in checked:
                t = r.evidence.get("trace")
                assert t and t["own"] >= 1 and t["torch_ops"] == [] and t["foreign"] == [], (folder, name, t)


# ---- One grade everywhere (issue 32): hidden evidence, settings, silent checks, who wrote the answer.

def _student_view(result) -> str:
    """All a student reads before the due date, task flags and states included (as data).
    The compile rows' "key" (a hash of the kernel's source, which differs between the
    fixture's variants) is left out: no report shows it."""
    import dataclasses
    import json
    result = dataclasses.replace(result, tasks=[dataclasses.replace(t, kernels=[
        {k: v for k, v in row.items() if k != "key"} for row in t.kernels]) for t in result.tasks])
    tasks = [(t.task, t.status, t.summary, t.flags, t.checks_off, t.score) for t in result.tasks]
    return _visible_text(result) + "\n" + json.dumps(tasks, sort_keys=True)


def test_every_hidden_call_finding_reads_the_same_words(tmp_path):
    """A file that on the hidden test's shape writes into its inputs, or launches its
    kernel on no rows and returns zeros, or both: before, the visible reports said which
    ("inputs modified", "no Triton kernel computed the output", or both), so a student
    steering the behaviour by M, N and K learnt bits of the hidden shape per submission.
    Now every finding gives byte-identical visible reports, and the task gets nothing. On
    the CPU no launch is a finding no longer (the wrapper cannot compute without one): the
    zeros are a wrong answer, the hidden test's point lost like any other."""
    from grader.judge import HIDDEN_DETAIL, HIDDEN_KIND
    from tests.fakes import rubric_dict
    public = [t["cpu_shape"] for t in rubric_dict(tasks=("w8a8",))["tests"] if t["kind"] == "correctness"]
    seen = {}
    for how in ("inputs", "no_compute", "both"):
        sub = tmp_path / how
        sub.mkdir()
        (sub / "w8a8.py").write_text(submission("w8a8_hidden_call_misbehaves", public=public, how=how))
        result = grade(sub, _hidden_rubric([("w8a8/odd", [7, 32, 72])]), seed=8, tasks=["w8a8"],
                       log=lambda *_: None)
        task = _task(result)
        hidden = by_name(result)["w8a8/odd"]
        seen[how] = _student_view(result)
        if how == "no_compute" and not HAS_CUDA:
            assert task.flags == [] and hidden.score == 0 and task.score == task.max_score - hidden.max_score
            assert hidden.message not in seen[how]
            continue
        assert task.score == 0 and task.flags == [{"kind": HIDDEN_KIND, "detail": HIDDEN_DETAIL}], task.flags
        # the TA's (after the due date) says which
        assert {"inputs": "inputs_modified", "no_compute": "no_triton_compute"}.get(how, "inputs_modified") \
            in hidden.message, hidden.message
    assert seen["inputs"] == seen["both"]
    if HAS_CUDA:
        assert seen["inputs"] == seen["no_compute"]


def test_the_settings_a_kernel_file_reads_are_the_ones_the_handout_names(tmp_path, monkeypatch):
    """The handout lets a kernel file read the environment with os.environ.get/os.getenv
    and names what it holds when graded: TRITON_INTERPRET, "1" on a CPU; no variable of the
    student's shell. A file that reads a setting of its own, set where the grader runs,
    and TRITON_INTERPRET sees exactly that: the setting unset, the interpreter on."""
    import re
    row = next(line for line in (ROOT / "handout.md").read_text().splitlines()
               if line.startswith("| Python |") and "os.getenv" in line)
    promise = row[row.index("os.getenv"):]
    assert re.findall(r"`([A-Z][A-Z0-9_]+)`", promise) == ["TRITON_INTERPRET"], promise
    assert '`"1"` when graded on a CPU' in promise and "no variable you set in your shell reaches it" in promise
    monkeypatch.setenv("W8A8_BLOCK_M", "32")   # the student's own setting, in the grader's environment
    src = NAIVE_W8A8 + ("\nimport os\n\nprint(\"SETTINGS\", os.environ.get(\"W8A8_BLOCK_M\"), "
                        "os.getenv(\"TRITON_INTERPRET\"))\n")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    task = _task(result)
    assert correctness(result) == 4 and not task.flags, (task.flags, [t.message for t in result.tests])
    expected = "SETTINGS None None" if HAS_CUDA else "SETTINGS None 1"
    assert expected in task.log_tail, task.log_tail


def _with_fp16_scales():
    """The small W8A8 rubric, with a test whose scales are fp16 (as the rubric's w8a8/fp16_scales)."""
    from tests.fakes import rubric_dict
    data = rubric_dict(tasks=("w8a8",))
    data["tests"].insert(2, dict(name="w8a8/fp16_scales", task="w8a8", kind="correctness", points=1,
                                 shape=[5, 2048, 1024], cpu_shape=[5, 64, 96], scale_dtype="float16"))
    return parse_rubric(data)


@pytest.mark.skipif(HAS_CUDA, reason="the compile check of a CPU run")
def test_a_specialization_that_does_not_compile_fails_only_the_tests_that_launch_it(tmp_path):
    """A W8A8 file whose fp16-scales specialization alone does not compile for sm_90: on the GPU
    only the fp16-scales test fails, so on the CPU only that test fails (the compile table knows
    which tests each variant serves), not every correctness test of the task."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "w8a8.py").write_text(submission("w8a8_fp16_scales_do_not_compile"))
    result = grade(sub, _with_fp16_scales(), seed=5, tasks=["w8a8"], log=lambda *_: None)
    tests = by_name(result)
    assert tests["w8a8/fp16_scales"].score == 0
    assert "does not compile for the GPU" in tests["w8a8/fp16_scales"].message
    assert "Cannot access global variable _HALF_TO_FLOAT" in tests["w8a8/fp16_scales"].message
    assert tests["w8a8/c0"].score == tests["w8a8/c0"].max_score > 0
    assert tests["w8a8/c1"].score == tests["w8a8/c1"].max_score > 0
    rows = _task(result).kernels
    failing = [k for k in rows if k.get("status") == "error"]
    assert failing and all(k["tests"] == ["w8a8/fp16_scales"] for k in failing)


@pytest.mark.skipif(HAS_CUDA, reason="the compile check of a CPU run")
def test_a_wrapper_that_sabotages_the_gpu_shape_capture_still_has_its_cpu_launches_compiled(tmp_path):
    """8x8 tl.dot tiles (no sm_90 compile) and a wrapper that launches on the grid (-1, 1) when
    called at a GPU shape inside the interpreter, which only the launch capture does: the
    capture's reply is malformed and its worker ends, but what the CPU shapes launched was
    compiled first (the executor's gate, before it ran), and every correctness test fails as on
    the GPU, naming the student's line."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "w8a8.py").write_text(submission("w8a8_dot8_sabotages_capture"))
    result = grade(sub, _with_fp16_scales(), seed=5, tasks=["w8a8"], log=lambda *_: None)
    assert correctness(result) == 0
    for test in result.tests:
        if test.kind == "correctness":
            assert "does not compile for the GPU" in test.message and "tl.dot" in test.message, test.message
            assert "w8a8.py, line" in test.message, test.message   # the student's tl.dot, refused before it ran


@pytest.mark.skipif(HAS_CUDA, reason="the CPU's shape-only wrapper")
def test_the_forged_product_gets_nothing(tmp_path):
    """An earlier round's forge (tests/fixtures/forged): each wrapper computes the product in
    plain Python numbers (one .item() per element), returns a tensor built from them, and
    launches one kernel that tl.dots zero tiles until 2 M N K FLOPs are done. It once scored
    60/60 plus 4 bonus on the CPU; the wrapper now never holds a value to compute with."""
    forged = ROOT / "tests" / "fixtures" / "forged"
    files = {task: (forged / f"{task}.py").read_text() for task in ("w8a8", "w4a16", "dds")}
    result = grade_files(tmp_path, files, list(files), static=False)
    for task in files:
        _refused_on_the_cpu(result, VALUES_READ, HOST_COMPUTE, task=task)


@pytest.mark.skipif(HAS_CUDA, reason="the CPU's shape-only wrapper")
def test_a_kernel_that_stores_host_numbers_into_the_output_gets_nothing(tmp_path):
    """The forge's next step: a kernel of the submission copies host-built numbers into the
    output, plus 0 * x. The host has no numbers to build them from."""
    result = grade_files(tmp_path, {"w8a8": submission("w8a8_kernel_copies_host_numbers")}, ["w8a8"],
                         static=False)
    _refused_on_the_cpu(result, VALUES_READ, HOST_COMPUTE)


def test_numbers_passed_to_kernels_are_caught_by_the_reads_that_made_them(tmp_path):
    """The product in Python numbers, each passed to a kernel as an argument and stored as
    v + 0 * x[0], one launch per element: the wrapper would have to read every element of x
    and of the weight into Python, and on the CPU it cannot read one."""
    if HAS_CUDA:
        pytest.skip("one .item() per element and one launch per output element: far too slow on a GPU")
    result = grade_files(tmp_path, {"w8a8": submission("w8a8_numbers_as_kernel_arguments")}, ["w8a8"],
                         static=False)
    _refused_on_the_cpu(result, VALUES_READ)


def test_a_graded_call_prints_tensors_without_their_values(tmp_path):
    """Printing a tensor (repr, str, an f-string) reads its values into Python past every op
    record; during a graded call it prints its shape and dtype, and the honest kernel that
    prints keeps its points."""
    result = grade_files(tmp_path, {"w8a8": submission("w8a8_prints_its_inputs")}, ["w8a8"])
    t = _task(result)
    assert correctness(result) == 4 and not t.flags, (t.flags, [x.message for x in result.tests])
    printed = [line for line in t.log_tail.splitlines() if line.startswith("PRINTED")]
    assert printed and all("values are not printed during a graded call" in line for line in printed)
    assert all("tensor([" not in line and "0." not in line for line in printed), printed


@pytest.mark.skipif(HAS_CUDA, reason="the launch capture of a CPU run")
def test_a_capture_the_wrapper_sabotages_is_reported_off_in_every_channel(tmp_path):
    """A wrapper called at a GPU shape inside the interpreter (only the launch capture does
    this) launches on the grid (-1, 1): the capture's reply is malformed and its worker is
    ended after the correctness cases passed, so what the GPU shapes launch is never compiled.
    The kernel is right and keeps its points, and report.md, report.json, Gradescope's
    results.json and the terminal all say that the launch capture was off, and why."""
    import json

    from grader.report import terminal_table, write_reports
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "w8a8.py").write_text(submission("w8a8_sabotages_capture"))
    result = grade(sub, _with_fp16_scales(), seed=5, tasks=["w8a8"], log=lambda *_: None)
    assert correctness(result) == 5, [t.message for t in result.tests]
    (line,) = [c for c in _task(result).checks_off if c.startswith("launch capture off")]
    assert "malformed launch capture" in line and "the worker was ended" in line, line
    write_reports(result, tmp_path / "report")
    texts = {name: (tmp_path / "report" / name).read_text() for name in ("report.md", "report.json", "results.json")}
    texts["terminal"] = terminal_table(result)
    texts["results.json output"] = json.loads(texts["results.json"])["output"]
    for name, text in texts.items():
        assert "launch capture off" in text and "malformed launch capture" in text, name
