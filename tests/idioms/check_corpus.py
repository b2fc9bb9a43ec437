"""Check the idiom corpus: every ``tests/idioms/<task>_<idiom>.py`` is one complete kernel
file for one task, written as a student who knows Triton's tutorials would write it.

    .venv/bin/python tests/idioms/check_corpus.py [NAME ...] [--seeds 3] [--no-compile]

For each variant, on the CPU (Triton's interpreter):

- correct: imported as the grader stages a submission (a package holding the
  file under its task's name beside the grader's utils.py), called on the
  rubric's CPU shapes of every correctness test of its task, on fresh random
  inputs (``--seeds`` seeds each) in a guarded arena (a read past an input reads
  NaN, an unwritten output element is NaN), each output checked with the
  grader's exact reference and tolerance (``grader.compare.check_task_output``).
  A multi-config ``triton.autotune`` cannot benchmark in the interpreter (no
  driver), and on a GPU it may pick any config: each config is forced in turn
  (the autotuner's config list cut to that one) and must be correct.
- compiles for sm_90: every launch of those calls is recorded and compiled by
  the grader's own compile check (``grader.worker.compile``: Triton's real
  compiler for ``cuda:90``, in a child process without TRITON_INTERPRET).
- static check: the findings of ``grader.staticcheck.check_source`` (evidence
  only: today's check refuses some honest idioms).

Prints one verdict line per variant; exits 1 if a variant is incorrect or
does not compile. ``tests/kernels/test_idioms.py`` asserts the correctness part.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")   # before triton is imported

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from grader.compare import check_task_output  # noqa: E402
from grader.rubric import load_rubric  # noqa: E402
from grader.tasks import TASKS, get  # noqa: E402

IDIOMS = Path(__file__).resolve().parent
TASK_NAMES = ("w8a8", "w4a16", "dds")
_STAGE = Path(tempfile.mkdtemp(prefix="idioms-"))   # the staged packages, importable from sys.path
sys.path.insert(0, str(_STAGE))
atexit.register(shutil.rmtree, _STAGE, True)


def variants() -> list[str]:
    """The corpus: every file named <task>_<idiom>.py, by name."""
    return sorted(p.stem for p in IDIOMS.glob("*_*.py") if p.stem.split("_", 1)[0] in TASK_NAMES)


def task_of(name: str) -> str:
    return name.split("_", 1)[0]


def cases(task: str) -> list[tuple[str, tuple, dict]]:
    """(case, [M, N, K], options) of every correctness test of ``task`` that has a CPU shape."""
    specs = load_rubric().tests_for(task, "correctness")
    out = [(s.name.split("/", 1)[1], s.shape_on("cpu"), s.options) for s in specs]
    return [c for c in out if c[1] is not None]


def load(name: str, folder: Path = IDIOMS):
    """The variant ``folder/<name>.py``, imported as the grader stages a submission:
    package ``idiom_<name>`` holding the file as ``<task>.py`` and the grader's utils.py."""
    package = f"idiom_{name}"
    module = sys.modules.get(f"{package}.{task_of(name)}")
    if module is not None:
        return module
    source, folder = folder, _STAGE / package
    folder.mkdir(exist_ok=True)
    (folder / "__init__.py").write_text("")
    shutil.copy(ROOT / "assignment" / "utils.py", folder / "utils.py")
    shutil.copy(source / f"{name}.py", folder / f"{task_of(name)}.py")
    return importlib.import_module(f"{package}.{task_of(name)}")


def autotuners(module) -> list:
    """The module's triton.autotune objects (decorator or function form), by name."""
    from triton.runtime.autotuner import Autotuner

    return [obj for _, obj in sorted(vars(module).items()) if isinstance(obj, Autotuner)]


def settings(module) -> list[str]:
    """One label per forced configuration: "" when nothing is autotuned, else
    "<kernel>#<i>" for each config of each autotuner (the others keep their first)."""
    out = [f"{getattr(t.base_fn, '__name__', '?')}#{i}" for t in autotuners(module) for i in range(len(t.configs))]
    return out or [""]


@contextlib.contextmanager
def forced(module, setting: str):
    """Every autotuner of ``module`` cut to one config (``setting``'s for its kernel, the
    first for the others): a single-config autotuner runs it without benchmarking."""
    tuners = autotuners(module)
    saved = [(t, t.configs) for t in tuners]
    kernel, _, index = setting.partition("#")
    try:
        for t in tuners:
            pick = int(index) if getattr(t.base_fn, "__name__", "?") == kernel else 0
            t.configs = [t.configs[pick]]
        yield
    finally:
        for t, configs in saved:
            t.configs = configs


def call_guarded(fn, args: tuple):
    """``fn(*args)`` with the inputs in a guarded arena and NaN in uninitialized memory
    (as tests/kernels/test_variants.py and the grader's harness)."""
    from grader.harness.arena import Arena, Plan

    plan = Plan()
    specs = [plan.arg(a) for a in args]
    arena = Arena(plan, "cpu", name=f"arena{random.randrange(2**32)}")
    guarded = [arena.arg(s) for s in specs]
    torch.use_deterministic_algorithms(True, warn_only=True)  # fills torch.empty with NaN
    try:
        return fn(*guarded)
    finally:
        torch.use_deterministic_algorithms(False)


def failures(name: str, seed: int, seeds: int = 3, folder: Path = IDIOMS) -> list[str]:
    """Every (config, case, seed) on which the variant's output is wrong or its call raises."""
    task = task_of(name)
    module = load(name, folder)
    fn = getattr(module, f"{task}_mm")
    bad = []
    for setting in settings(module):
        with forced(module, setting):
            for case, shape, options in cases(task):
                for s in range(seed, seed + seeds):
                    where = f"{setting + ' ' if setting else ''}{case} {list(shape)} seed {s}"
                    args, _ = get(task).make_inputs(shape, options, s, "cpu")
                    try:
                        out = call_guarded(fn, args)
                    except Exception as e:  # noqa: BLE001 - a verdict, not a crash of the check
                        bad.append(f"{where}: {type(e).__name__}: {str(e)[:300]}")
                        continue
                    check = check_task_output(out, task, args)
                    if not check.passed:
                        bad.append(f"{where}: {check.message[:300]}")
    return bad


@contextlib.contextmanager
def recording():
    """Record every interpreted launch for the grader's compile check (as the worker's hook does)."""
    import triton.runtime.interpreter as interpreter

    from grader.worker.compile import CompileCheck

    cc = CompileCheck("cuda:90")
    original = interpreter.InterpretedFunction.run

    def run(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        cc.record(self, args, kwargs, result)
        return result

    interpreter.InterpretedFunction.run = run
    try:
        yield cc
    finally:
        interpreter.InterpretedFunction.run = original


def compile_errors(name: str, seed: int) -> list[str]:
    """Compile every kernel variant the corpus file launches (every forced config, one
    seed of every case) for sm_90; the errors, or a note if nothing was checked."""
    task = task_of(name)
    module = load(name)
    fn = getattr(module, f"{task}_mm")
    with recording() as cc:
        for setting in settings(module):
            with forced(module, setting):
                for _, shape, options in cases(task):
                    args, _ = get(task).make_inputs(shape, options, seed, "cpu")
                    with contextlib.suppress(Exception):   # a failing call is failures()'s verdict
                        fn(*args)
    rows = cc.check(budget_s=600, jobs=1, root=str(_STAGE / f"idiom_{name}"))
    errors = [f"{r.get('kernel')} {r.get('variant', '')}: {r.get('status')}: {(r.get('error') or '')[:400]}"
              for r in rows if r.get("status") not in ("ok", None)]
    errors += [f"not compiled: {r.get('note')}" for r in rows if r.get("status") == "skipped"]
    if not any(r.get("status") == "ok" for r in rows):
        errors.append("no kernel compiled: " + "; ".join(str(r.get("note") or r.get("error")) for r in rows))
    return errors


def static_findings(name: str) -> list[str]:
    from grader.staticcheck import check_source

    return [str(f) for f in check_source((IDIOMS / f"{name}.py").read_text())]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="variants to check (default: all)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=random.randrange(2**31))
    parser.add_argument("--no-compile", action="store_true", help="skip the sm_90 compile check")
    a = parser.parse_args(argv)
    names = a.names or variants()
    assert set(TASKS) >= set(TASK_NAMES)
    print(f"seed {a.seed}, {a.seeds} seeds per case; CPU shapes in the interpreter")
    ok = True
    for name in names:
        bad = failures(name, a.seed, a.seeds)
        configs = settings(load(name))
        errors = [] if a.no_compile else compile_errors(name, a.seed)
        static = static_findings(name)
        verdict = "correct" if not bad else f"INCORRECT ({len(bad)} failures)"
        built = "skipped" if a.no_compile else ("compiles for sm_90" if not errors else "DOES NOT COMPILE")
        tuned = f", {len(configs)} configs forced" if configs != [""] else ""
        print(f"{name}: {verdict}{tuned}; {built}; static check: {len(static)} finding(s)")
        for line in bad[:5] + errors + static:
            print("    " + line.replace("\n", "\n    "))
        ok = ok and not bad and not errors
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
