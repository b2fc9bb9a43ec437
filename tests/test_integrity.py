"""Adversarial submissions, one per attack: each gets exactly the score it deserves.

Most attacks are stopped twice: by the static check of the kernel file (in the
trusted parent) and, with that check switched off, by what happens at run time
(the parent judges outputs it recomputes itself; the child records launches and
PyTorch ops). Both layers are tested.
"""

import time
from pathlib import Path

import pytest

from tests.fakes import SOLUTION, by_name, grade_files, wrap_entry
from tests.helpers import HAS_CUDA, needs_gpu

HEADER = "from __future__ import annotations"


def _with_imports(src: str, *lines: str) -> str:
    return src.replace(HEADER, HEADER + "\n" + "\n".join(lines), 1)


def _flags(task) -> str:
    return " ".join(f["detail"] for f in task.flags)


def _task(result, name="w8a8"):
    return {t.task: t for t in result.tasks}[name]


TORCH_FALLBACK = wrap_entry("w8a8", """
x, wt, sx, sw = args
xq = torch.clamp(torch.round(x.float() / sx), -128, 127)
return ((xq @ wt.float()) * sx * sw.t()).half()
""")


@pytest.mark.parametrize("static", [True, False])
def test_torch_fallback_gets_nothing(tmp_path, static):
    result = grade_files(tmp_path, {"w8a8": TORCH_FALLBACK}, ["w8a8"], static=static)
    task = _task(result)
    assert result.score == 0
    assert ("forbidden code" if static else "library matmul") in _flags(task)


def test_broadcast_product_with_a_token_triton_copy_gets_nothing(tmp_path):
    # The product as multiply-and-sum in PyTorch, then a Triton launch just to look busy.
    src = wrap_entry("w8a8", """
x, wt, sx, sw = args
xq = torch.clamp(torch.round(x.float() / sx), -128, 127)
prod = (xq[:, :, None] * wt.float()[None, :, :]).sum(1)
y = (prod * sx * sw.t()).half()
_real(*args)
return y
""")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False)
    assert result.score == 0 and "computed outside Triton" in _flags(_task(result))


def test_output_caching_that_skips_the_kernel_voids_the_task(tmp_path):
    src = wrap_entry("w8a8", """
key = tuple(args[0].shape)
if key not in _CACHE:
    _CACHE[key] = _real(*args)
return _CACHE[key]
""") + "\n_CACHE = {}\n"
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], same_shape_twice=True)
    assert result.score == 0 and "no Triton kernel" in _flags(_task(result))


def test_output_caching_fails_on_fresh_inputs(tmp_path):
    # Launches the kernel every time (so it looks busy) but returns the first answer.
    # Every case is called twice on fresh draws: the second call gets the cached answer.
    src = wrap_entry("w8a8", """
y = _real(*args)
return _CACHE.setdefault(tuple(args[0].shape), y)
""") + "\n_CACHE = {}\n"
    result = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"]))
    for name in ("w8a8/c0", "w8a8/c1"):
        assert result[name].score == 0 and "keep state between calls" in result[name].message


def test_writing_into_inputs_voids_the_task(tmp_path):
    src = wrap_entry("w8a8", "y = _real(*args)\nargs[0].mul_(0)\nreturn y")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    assert result.score == 0 and "inputs modified" in _flags(_task(result))


MONKEYPATCHES = {
    "torch.allclose": "torch.allclose = lambda *a, **k: True",
    "torch.testing": "torch.testing.assert_close = lambda *a, **k: None",
    "torch.equal": "torch.equal = lambda *a, **k: True",
    "cuda events": "torch.cuda.Event.elapsed_time = lambda self, other: 1e-6",
    "grader worker": "import _grader_worker.evidence as ev\nev.OpRecorder.library_matmuls = lambda self: []",
}


@pytest.mark.parametrize("name", MONKEYPATCHES)
def test_monkeypatching_is_flagged(tmp_path, name):
    src = _with_imports(TORCH_FALLBACK, MONKEYPATCHES[name])
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    assert result.score == 0 and "forbidden code" in _flags(_task(result))


def test_monkeypatched_checks_cannot_pass_a_wrong_kernel(tmp_path):
    # Static check off: the patches run in the child, but judging happens in the parent.
    patches = "\n".join(v for k, v in MONKEYPATCHES.items() if k != "grader worker")
    src = _with_imports(wrap_entry("w8a8", "return torch.zeros(args[0].shape[0], args[1].shape[1], "
                                           "dtype=torch.float16)\n_real(*args)"), patches)
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False)
    assert result.score == 0


def test_patching_the_child_recorders_does_not_hide_a_fallback_from_the_static_check(tmp_path):
    src = _with_imports(TORCH_FALLBACK, MONKEYPATCHES["grader worker"],
                        "ev.LaunchRecorder.own = lambda self: 1")
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=True)
    assert result.score == 0


def test_fake_report_is_overwritten(tmp_path):
    report_dir = tmp_path / "report"
    fake = f"open({str(report_dir / 'report.json')!r}, 'w').write('{{\"score\": 100}}')"
    src = _with_imports(SOLUTION["w8a8"], "import os", f"os.makedirs({str(report_dir)!r}, exist_ok=True)", fake)
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    assert result.score == 0 and "forbidden code" in _flags(_task(result))
    from grader.report import write_reports
    write_reports(result, report_dir)
    assert '"score": 0' in (report_dir / "report.json").read_text()


@pytest.mark.parametrize("how", ["sys.exit(0)", "os._exit(0)"])
def test_exit_mid_test_loses_only_the_cases_it_stopped(tmp_path, how):
    # Calls 1 and 2 are the two draws of c0; the exit comes in c1's first call.
    body = f"_CALLS.append(1)\nif len(_CALLS) == 3:\n    {how}\nreturn _real(*args)"
    src = _with_imports(wrap_entry("w8a8", body), "import os, sys") + "\n_CALLS = []\n"
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


@pytest.mark.parametrize("how", ["fork", "setsid", "double-fork"])
def test_forked_process_does_not_outlive_the_task(tmp_path, how):
    marker = f"{12345 + hash(str(tmp_path)) % 1000}.{len(how)}7"   # a unique sleep length
    sleep = f'os.execvp("sleep", ["sleep", "{marker}"])'
    escape = {
        "fork": f"if os.fork() == 0:\n        {sleep}",
        "setsid": f"if os.fork() == 0:\n        os.setsid()\n        {sleep}",
        "double-fork": (f"if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n"
                        f"            {sleep}\n        os._exit(0)"),
    }[how]
    body = f"""
if not _DONE:
    _DONE.append(1)
    {escape}
return _real(*args)
"""
    src = _with_imports(wrap_entry("w8a8", body), "import os") + "\n_DONE = []\n"
    result = _graded_untouched(tmp_path, src)
    assert _task(result).score > 0  # the kernel itself is right
    time.sleep(0.5)
    assert _survivors(marker) == [], f"a process started by the submission outlived its task ({how})"
    assert grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=True).score == 0


def test_printing_100mb_is_harmless(tmp_path):
    src = wrap_entry("w8a8", "print('x' * (100 * 1024 * 1024))\nreturn _real(*args)")
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
    solution = Path(__file__).resolve().parent.parent / "solutions" / "w8a8.py"
    src = f"exec(open({str(solution)!r}).read().replace('from .utils', 'from submission.utils'))\n"
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"])
    assert result.score == 0 and "forbidden code" in _flags(_task(result))


@needs_gpu
def test_side_stream_work_is_timed(tmp_path):
    # The clock is the harness's (host time around the whole batch, after the
    # worker's device-wide synchronize): work moved to another stream is timed.
    src = wrap_entry("w8a8", """
s = _STREAM.setdefault("s", torch.cuda.Stream())
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    y = _real(*args)
return y
""") + "\n_STREAM = {}\n"
    hidden = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False))["w8a8/perf"]
    honest = by_name(grade_files(tmp_path, {"w8a8": SOLUTION["w8a8"]}, ["w8a8"]))["w8a8/perf"]
    assert hidden.details["kernel_ms"] > 0.8 * honest.details["kernel_ms"], (hidden.message, honest.message)


@needs_gpu
def test_forged_event_clock_changes_nothing(tmp_path):
    patch = "\ntorch.cuda.Event.elapsed_time = lambda self, other: 1e-6\n"
    src = wrap_entry("w8a8", "return _real(*args)") + patch
    forged = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False))["w8a8/perf"]
    honest = by_name(grade_files(tmp_path, {"w8a8": SOLUTION["w8a8"]}, ["w8a8"]))["w8a8/perf"]
    assert forged.details["kernel_ms"] > 0.8 * honest.details["kernel_ms"], (forged.message, honest.message)


@needs_gpu
def test_timed_calls_that_skip_the_work_fail(tmp_path):
    # Honest for the checked calls (the first 40), then computing only one timed
    # call in five: every timed output is checked.
    src = wrap_entry("w8a8", """
_N.append(1)
if len(_N) > 40 and len(_N) % 5:
    return torch.empty(args[0].shape[0], args[1].shape[1], dtype=torch.float16, device=args[0].device)
return _real(*args)
""") + "\n_N = []\n"
    tests = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False))
    assert tests["w8a8/perf"].score == 0 and "wrong" in tests["w8a8/perf"].message


@needs_gpu
@pytest.mark.parametrize("static", [True, False])
def test_cublas_while_captured_gets_nothing(tmp_path, static):
    # Phase switch: the honest kernel when called eagerly (checked), cuBLAS while
    # the timed batch is captured in a CUDA graph.
    # cuBLAS is warmed up at import, so that it can be captured.
    src = wrap_entry("w8a8", """
if torch.cuda.is_current_stream_capturing():
    x, wt, sx, sw = args
    return (torch.matmul(x, wt.half()) * 0 + _real(*args))
return _real(*args)
""") + "\n_W = torch.ones(8, 8, device='cuda', dtype=torch.float16)\n_W @ _W\n"
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=static)
    task = _task(result)
    assert task.score == 0
    assert ("forbidden code" if static else "library matmul") in _flags(task)


# ---- The reply channel: the only thing the worker can say, parsed defensively.

def _write_reply(line_expr: str) -> str:
    """A W8A8 entry that writes its own line on the worker's reply pipe, then returns zeros."""
    return _with_imports(wrap_entry("w8a8", f"""
os.write(int(sys.argv[2]), {line_expr})
return torch.zeros(args[0].shape[0], args[1].shape[1], dtype=torch.float16)
"""), "import os, sys")


@pytest.mark.parametrize("line", [
    'b\'{"ok": true}\\n\' * 50',                      # forged "done" replies
    'b"[" * 200000 + b"\\n"',                         # nesting deep enough to break a recursive parser
    'b\'{"ok": "yes", "evidence": []}\\n\'',          # wrong field types
    'b\'{"ok": true, "evidence": {"own_launches": "lots"}}\\n\'',
    'b"x" * (4 << 20)',                               # an endless line
], ids=["forged-ok", "deep-nesting", "wrong-types", "wrong-evidence", "huge-line"])
def test_poisoned_replies_cost_the_task_only(tmp_path, line):
    naive = (Path(__file__).resolve().parent.parent / "calibration" / "naive" / "dds.py").read_text()
    result = _graded_untouched(tmp_path, {"w8a8": _write_reply(line), "dds": naive})
    tasks = {t.task: t for t in result.tasks}
    assert tasks["w8a8"].score == 0
    assert tasks["dds"].score == tasks["dds"].max_score > 0   # the next task is untouched


def test_output_on_the_meta_device_is_a_failed_case(tmp_path):
    src = wrap_entry("w8a8", "return torch.empty(args[0].shape[0], args[1].shape[1], "
                             "dtype=torch.float16, device='meta')")
    result = by_name(grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=False))
    assert result["w8a8/c0"].score == 0 and "output is on meta" in result["w8a8/c0"].message


# ---- The sandbox: what a submission can reach with allowed modules and known paths.
# Each attack below runs with the static check off (so its code really runs),
# and each test asserts the score, that nothing outside the worker's scratch
# folder changed, and that a report exists.

ROOT = Path(__file__).resolve().parent.parent


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


ZEROS = "return torch.zeros(args[0].shape[0], args[1].shape[1], dtype=torch.float16)"


def test_writing_the_graders_conftest_and_tree_fails(tmp_path):
    # With the grader's real paths known, write a conftest that passes every test,
    # and try the parent's folder through /proc too. Then return zeros.
    targets = [ROOT / "grader" / "tests" / "conftest.py", ROOT / "grader" / "rubric.toml",
               ROOT / "conftest.py"]
    body = "\n".join(f"_try({str(t)!r})" for t in targets) + f"""
for pid in os.listdir("/proc"):
    if pid.isdigit():
        _try("/proc/" + pid + "/cwd/grader/tests/conftest.py")
{ZEROS}
"""
    helper = '''
def _try(path):
    try:
        with open(path, "w") as f:
            f.write("import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport():\\n    yield\\n")
    except OSError:
        pass
'''
    src = _with_imports(wrap_entry("w8a8", body), "import os") + helper
    result = _graded_untouched(tmp_path, src)
    assert result.score == 0


def test_earlier_reports_cannot_be_rewritten(tmp_path):
    earlier = tmp_path / "batch" / "students" / "alice"
    earlier.mkdir(parents=True)
    report = earlier / "report.json"
    report.write_text('{"score": 0}')
    body = f"""
for name in ("report.json", "report.md", "results.json"):
    try:
        with open({str(earlier)!r} + "/" + name, "w") as f:
            f.write('{{"score": 100}}')
    except OSError:
        pass
return _real(*args)
"""
    _graded_untouched(tmp_path, wrap_entry("w8a8", body), report)
    assert report.read_text() == '{"score": 0}'


def test_pth_file_in_the_graders_home_is_not_planted(tmp_path):
    site = Path.home() / ".local" / "lib" / "python3.11" / "site-packages"
    body = f"""
for home in ({str(Path.home())!r}, os.path.expanduser("~")):
    try:
        os.makedirs(home + "/.local/lib/python3.11/site-packages", exist_ok=True)
        with open(home + "/.local/lib/python3.11/site-packages/zz_grader_attack.pth", "w") as f:
            f.write("import os; os.environ['FORGED'] = '1'\\n")
    except OSError:
        pass
return _real(*args)
"""
    result = _graded_untouched(tmp_path, _with_imports(wrap_entry("w8a8", body), "import os"))
    assert not (site / "zz_grader_attack.pth").exists()
    assert _task(result).score > 0   # the kernel itself is honest


def test_hidden_cases_do_not_leak_into_visible_messages(tmp_path):
    # Everything the worker can read goes into an exception message.
    body = """
seen = [repr(sys.argv), repr(dict(os.environ))]
for path in ("/proc/1/cmdline", "/proc/1/environ", os.getcwd()):
    try:
        seen.append(repr(os.listdir(path)) if os.path.isdir(path) else open(path, "rb").read().decode(errors="replace"))
    except OSError as e:
        seen.append(repr(e))
raise RuntimeError(" | ".join(seen))
"""
    src = _with_imports(wrap_entry("w8a8", body), "import os, sys")
    from tests.fakes import rubric_dict
    from grader.rubric import parse_rubric
    from grader.grade import grade
    data = rubric_dict(tasks=("w8a8",), static=False)
    data["tests"].append(dict(name="w8a8/secret_case_xyz", task="w8a8", kind="correctness", points=1,
                              shape=[7, 32, 72], cpu_shape=[7, 32, 72], hidden=True))
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "w8a8.py").write_text(src)
    result = grade(sub, parse_rubric(data), seed=99, tasks=["w8a8"], log=lambda *_: None)
    visible = " ".join(t.message for t in result.tests if "secret" not in t.name) + _task(result).log_tail
    for secret in ("secret_case_xyz", "[7, 32, 72]", "72", "rubric", str(99)):
        assert secret not in visible.replace(str(tmp_path), ""), f"{secret!r} leaked into a visible message"


@pytest.mark.skipif(HAS_CUDA, reason="with a GPU the sandbox does not bound the worker's memory (CUDA "
                    "reserves huge address ranges): docker --memory does, docs/integrity.md")
def test_memory_hog_dies_alone(tmp_path):
    body = """
_HOG.append(torch.ones(64 << 30, dtype=torch.uint8))
return _real(*args)
"""
    result = _graded_untouched(tmp_path, wrap_entry("w8a8", body) + "\n_HOG = []\n")
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
    body = f"""
s = socket.socket()
s.settimeout(2)
s.connect(("127.0.0.1", {port}))
return _real(*args)
"""
    result = _graded_untouched(tmp_path, _with_imports(wrap_entry("w8a8", body), "import socket"))
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
    src = wrap_entry("w8a8", "return _real(*args)") + """
import sys as _s
_w = _s.modules["_grader_worker.main"]
def _call(self, msg):
    args, out = self._call(self.arenas[msg["arena"]], msg)
    x, wt, sx, sw = args
    q = torch.clamp(torch.round(x.float() / sx), -128, 127)
    out.copy_(((q @ wt.float()) * sx * sw.t()).half())
    return {"ok": True, "evidence": {"own_launches": 1}}
_w.Worker.call = _call
"""
    result = grade_files(tmp_path, {"w8a8": src}, ["w8a8"], static=True)
    assert result.score == 0 and "forbidden code" in _flags(_task(result))
