"""Run-time facts the submission cannot hide: the worker's threads, libraries and processes, read
by the harness from /proc (grader/harness/osfacts.py), never from the worker's own registries.

- A fake worker in each sandbox backend: what it starts is read from the outside, through the
  backend's wrappers (bwrap, unshare, sudo or setpriv) to the worker's host process.
- A reader that may not trace the worker (the Docker image's non-root grader) still sees a library
  load, as growth of executable memory.
- The judge: what appeared at import or after a CPU call voids the task; what appeared around the
  timed runs voids the task's timing.
- Grades (CPU, static check off): a thread at import, a thread at the first call, a library at
  import each void the task with a message that names them; honest files show no change.
- GPU: a thread that computes the timed batch during the clock's probes (item 7 of issue 40)
  earns no more than its honest control:
  ``python -m pytest tests/integrity/test_threads_and_libraries.py -m gpu -s -p no:cacheprovider``
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from grader.facts import CallResult, Runs, TaskRun, TimedRun, Timing
from grader.harness import osfacts
from grader.harness.sandbox import Jail, spawn
from grader.judge import STARTED_KIND, performance_verdict, task_problems, voids_task
from tests.fakes import ROOT, by_name, grade_files, rubric, submission
from tests.helpers import needs_gpu
from tests.integrity.test_sandbox import _backend, _python

NAIVE_W8A8 = (ROOT / "calibration" / "naive" / "w8a8.py").read_text()

# A stand-in for the worker (stdlib only, so that the system's Python can run it as the student
# user where the backend has no private mount table): it says "ready", waits for one line on
# stdin, does what the line says, says "done" and sleeps until it is killed.
FAKE_WORKER = r'''
import ctypes, glob, os, sys, threading, time

def unmapped_library():
    mapped = {line.split()[-1] for line in open("/proc/self/maps") if "/" in line}
    folder = os.path.join(os.path.dirname(os.__file__), "lib-dynload")
    return next(p for p in sorted(glob.glob(folder + "/*.so")) if os.path.realpath(p) not in mapped)

print("ready", flush=True)
what = sys.stdin.readline().strip()
if what == "thread":
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
elif what == "library":
    path = unmapped_library()
    ctypes.CDLL(path)
    print("loaded", path, flush=True)
elif what == "fork":
    if os.fork() == 0:
        time.sleep(600)
        os._exit(0)
elif what == "double_fork":
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    os.wait()
print("done", flush=True)
time.sleep(600)
'''


@pytest.fixture(params=["bwrap", "unshare", "none"])
def b(request):
    return _backend(request.param)


@pytest.fixture
def fake_worker(tmp_path_factory):
    """A task folder holding the fake worker as the package ``_grader_worker`` (the worker's
    module name, which the watch looks for) and an empty scratch folder."""
    from grader.harness import sandbox
    top = sandbox.task_dir("facts-test-")
    pkg = top / "stage" / "_grader_worker"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "main.py").write_text(FAKE_WORKER)
    for p in (top / "stage", pkg):
        p.chmod(0o755)
    for p in pkg.iterdir():
        p.chmod(0o644)
    (top / "scratch").mkdir()
    yield top
    subprocess.run(["rm", "-rf", str(top)])


def _line(stream) -> str:
    return stream.readline().decode().strip()


@pytest.mark.parametrize("what", ["nothing", "thread", "library", "fork", "double_fork"])
def test_what_the_worker_starts_is_read_from_outside_in_every_backend(b, fake_worker, what):
    jail = Jail(scratch=fake_worker / "scratch", readonly=[fake_worker / "stage"],
                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(fake_worker / "stage")})
    p = spawn([_python(b), "-m", osfacts.WORKER_MODULE], jail, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
              stderr=subprocess.STDOUT, backend_=b)
    try:
        assert _line(p.stdout) == "ready"
        watch = osfacts.Watch(p.pid)
        assert watch.find() == ""
        with open(f"/proc/{watch.pid}/cmdline", "rb") as f:   # the worker itself, not a wrapper around it
            assert f.read().split(b"\0")[1:3] == [b"-m", osfacts.WORKER_MODULE.encode()]
        before = watch.take()
        assert before.error == "" and before.libraries_how == "maps" and watch.pid in before.threads
        p._proc.stdin.write(f"{what}\n".encode())
        p._proc.stdin.flush()
        loaded = _line(p.stdout)
        if what == "library":
            path = loaded.split(" ", 1)[1]
            assert _line(p.stdout) == "done"
        else:
            assert loaded == "done"
        found = osfacts.changes(before, watch.take())
        expected = {"nothing": None, "thread": "new thread ", "library": "new library ",
                    "fork": "new process ", "double_fork": "new process "}[what]
        if expected is None:
            assert found == []
        else:
            assert len(found) == 1 and found[0].startswith(expected), found
        if what == "library":
            assert os.path.basename(path) in found[0]
    finally:
        p.kill()
        p.wait(10)


_READER = r'''
import json, sys
exec(compile(sys.argv[1], "osfacts", "exec"))
watch = Watch(int(sys.argv[2]))
watch.pid, watch.chain = int(sys.argv[2]), set()
before = watch.take()
print(json.dumps({"how": before.libraries_how, "error": before.error}), flush=True)
sys.stdin.readline()
print(json.dumps(changes(before, watch.take())), flush=True)
'''


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
                    reason="needs root, setpriv and /usr/bin/python3 (the reader runs as nobody)")
def test_a_reader_that_may_not_read_the_memory_map_still_sees_a_library_load():
    """The Docker image's grader is not the student and may not trace the worker: /proc/<pid>/maps is
    closed to it. The count of executable memory (VmLib, readable by anyone) still grows."""
    target = subprocess.Popen([sys.executable, "-c", FAKE_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    src = open(osfacts.__file__).read()
    reader = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                               "/usr/bin/python3", "-c", _READER, src, str(target.pid)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/")
    try:
        assert _line(target.stdout) == "ready"
        first = json.loads(reader.stdout.readline())
        assert first == {"how": "VmLib", "error": ""}
        target.stdin.write(b"library\n")
        target.stdin.flush()
        assert _line(target.stdout).startswith("loaded") and _line(target.stdout) == "done"
        reader.stdin.write(b"\n")
        reader.stdin.flush()
        found = json.loads(reader.stdout.readline())
        assert len(found) == 1 and "kB more executable memory" in found[0], found
    finally:
        for proc in (target, reader):
            proc.kill()
            proc.wait()


def test_unread_facts_are_never_a_change():
    unread = osfacts.Snapshot(libraries_how="", error="/proc does not show the sandbox's processes here")
    seen = osfacts.Snapshot(threads={1: "python"})
    assert osfacts.changes(unread, seen) == osfacts.changes(seen, unread) == []
    assert osfacts.unread(seen, unread) == unread.error
    assert osfacts.Watch(2 ** 22 + 12345).find()   # no such process: said, not silently watched


# ---- the judge: what the facts void ----------------------------------------------------------------

def test_the_judge_voids_the_task_for_what_the_import_or_a_cpu_call_started():
    at_import = TaskRun("w8a8", import_changes=["new thread 42 ('python')"])
    assert voids_task(at_import)
    found = task_problems(at_import, "w8a8.py")
    assert found[0]["kind"] == STARTED_KIND and "new thread 42 ('python')" in found[0]["detail"]
    in_call = TaskRun("w8a8", calls=[("w8a8/c0", CallResult("ok", evidence={"own_launches": 1},
                                                            appeared=["new library /tmp/x.so"]))])
    assert voids_task(in_call) and "/tmp/x.so" in task_problems(in_call, "w8a8.py")[0]["detail"]
    assert not voids_task(TaskRun("w8a8", calls=[("w8a8/c0", CallResult("ok", evidence={"own_launches": 1}))]))


def test_the_judge_voids_every_timing_of_a_task_whose_timed_runs_saw_a_new_thread():
    spec = next(t for t in rubric(tasks=("w8a8",)).tests if t.kind == "performance")
    timing = Timing(kernel_ms=[0.01, 0.01], baseline_ms=[0.1, 0.1], calls=10, graph=True)
    run = TaskRun("w8a8", timed={spec.name: TimedRun(spec.name, timing)})
    runs = Runs("cuda", 1, {"w8a8": run}, bandwidth_gbs=3000.0)
    settings = rubric(tasks=("w8a8",)).settings
    assert performance_verdict(spec, run, runs, settings).fraction > 0
    timing.appeared = ["new thread 7 ('python') (since the kernel file was imported)"]
    verdict = performance_verdict(spec, run, runs, settings)
    assert verdict.fraction == 0 and "timing void" in verdict.message and "new thread 7" in verdict.message


# ---- grades on the CPU (static check off: threading and ctypes are refused by it) ------------------

@pytest.mark.slow
@pytest.mark.parametrize("when", ["import", "first call"])
def test_a_thread_started_by_the_kernel_file_voids_the_task(tmp_path, when):
    result = grade_files(tmp_path, {"w8a8": submission("w8a8_starts_a_thread", when=when)}, ["w8a8"], static=False)
    task = result.tasks[0]
    assert task.score == 0
    flags = " ".join(f["detail"] for f in task.flags)
    assert "started a thread" in flags and "new thread" in flags, flags
    assert ("importing the kernel file" in flags) == (when == "import")


@pytest.mark.slow
def test_a_library_loaded_by_the_kernel_file_voids_the_task(tmp_path):
    result = grade_files(tmp_path, {"w8a8": submission("w8a8_loads_a_library")}, ["w8a8"], static=False)
    task = result.tasks[0]
    flags = " ".join(f["detail"] for f in task.flags)
    assert task.score == 0 and "importing the kernel file" in flags, flags
    assert "new library " in flags and "lib-dynload" in flags or "kB more executable memory" in flags


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["solutions", "tests/fixtures/from_the_handout"])
@pytest.mark.parametrize("task", ["w8a8", "w4a16", "dds"])
def test_honest_kernel_files_start_nothing(folder, task):
    """The worker's warm-up starts what an honest run starts lazily: an honest file's import and
    calls show no new thread, process or library (each task's two smallest CPU cases)."""
    from grader.harness.measure import checked_call
    from grader.harness.session import Session
    from grader.submission import load_submission
    from grader.tasks import get

    cases = [s for s in rubric(tasks=(task,)).tests if s.kind == "correctness"]
    with Session(load_submission(ROOT / folder), f"{task}.py", f"{task}_mm", "cpu",
                 time.monotonic() + 300) as session:
        assert session.hello["ok"], session.hello.get("error")
        assert session.facts_off == ""
        assert session.import_changes() == []
        for i, spec in enumerate(cases):
            shape = spec.shape_on("cpu")
            args, _ = get(task).make_inputs(shape, spec.options, 100 + i, "cpu")
            result = checked_call(session, f"c{i}", args, (shape[0], shape[1]))
            assert result.status == "ok", result.message
            assert result.appeared == []


# ---- GPU: item 7 of issue 40 -------------------------------------------------------------------------

def _gpu_rubric():
    from grader.rubric import parse_rubric
    from tests.fakes import rubric_dict
    data = rubric_dict(tasks=("w8a8",), static=False)
    for t in data["tests"]:
        if t["kind"] == "performance":   # large enough that the product outweighs a copy of its output
            # The control is the tutorial-style kernel (ratio 0.15 on an H100, 2026-12-07): it must earn points.
            t.update(shape=[2048, 4096, 4096], full_ratio=2.0, zero_ratio=0.02)
    data["settings"].update(timed_batch_ms=30.0, timing_rounds=3)
    return parse_rubric(data)


def _graded(tmp_path, name: str, src: str, monkeypatch=None, facts: bool = True):
    from grader.grade import grade
    folder = tmp_path / name
    folder.mkdir()
    (folder / "w8a8.py").write_text(src)
    if not facts:   # the clock as it was before the facts: no worker is found, no rule applies
        monkeypatch.setattr(osfacts.Watch, "find", lambda self: "turned off by the test")
    try:
        return grade(folder, _gpu_rubric(), seed=4321, tasks=["w8a8"], log=lambda *_: None)
    finally:
        if monkeypatch is not None:
            monkeypatch.undo()


def _perf(result):
    return sum(t.score for t in result.tests if t.kind == "performance")


@pytest.mark.gpu
@pytest.mark.slow
@needs_gpu
@pytest.mark.parametrize("start", ["import", "capture"])
def test_a_thread_that_computes_during_the_probes_earns_no_more_than_its_honest_control(
        tmp_path, monkeypatch, start):
    attack_src = submission("w8a8_probe_thread", start=start)
    control = _graded(tmp_path, "control", NAIVE_W8A8)
    attack = _graded(tmp_path, "attack", attack_src)
    unwatched = _graded(tmp_path, "unwatched", attack_src, monkeypatch, facts=False)   # recorded, not judged
    perf = {name: by_name(r)["w8a8/perf"] for name, r in
            (("control", control), ("attack", attack), ("attack, facts off", unwatched))}
    print("\nitem 7 (" + start + "): " + json.dumps(
        {name: {"score": t.score, "ratio": (t.details or {}).get("ratio"), "message": t.message[:300]}
         for name, t in perf.items()}, indent=1))
    assert perf["control"].score > 0, perf["control"].message
    assert "started a thread" not in perf["control"].message
    assert _perf(attack) <= _perf(control)
    assert "started a thread" in perf["attack"].message and "new thread" in perf["attack"].message, \
        perf["attack"].message
    assert ("timing void" in perf["attack"].message) == (start == "capture")
    if start == "capture":   # its checked calls are honest: only the timing is void
        assert by_name(attack)["w8a8/c0"].score > 0
