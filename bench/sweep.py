"""Time every declared config of one kernel on given shapes (GPU; --list runs anywhere).

    python -m bench.sweep w4a16 --shapes 1x4096x4096,256x11008x4096 [--option group_size=128]
    python -m bench.sweep dds --shapes 4096x1024x1024,65536x1024x1024 --option density=0.25,1.0
    python -m bench.sweep w8a8 --shapes 16x4096x4096 --configs '16x*' --json sweep.json
    python -m bench.sweep w8a8 --shapes 200x4096x4096 --list    # the space and today's choice, no timing

The tasks, their inputs and their case options come from the task registry
(grader/tasks/): ``--option NAME=V[,V...]`` sets any option of the task, and
each combination of the values given is a case. The search space is the
kernel file's CONFIGS (solutions/<its file>), or the
configs there whose names match --configs (fnmatch patterns, comma-separated).
Each is forced in turn through the file's FORCE_CONFIG, checked against the
grader's reference on its first call, and timed with the benchmark's clock
(grader/harness/timing.py: CUDA events, L2 flush, median), next to fp16
torch.matmul and the task's library anchors (grader/tasks/: tinygemm for
W4A16, torch._int_mm for W8A8, ...) timed in the same run. Per shape the
configs are ranked fastest first, with their speed-up over fp16 and over the
first anchor, and the fraction of the copy bandwidth (measured once per run)
that their time means for the problem's minimum bytes (every input read once,
the output written once; the benchmark's "util" of memory-bound rows); the
one _select_config picks today is marked with *. A config that fails to
compile or launch, or gives a wrong answer, is listed with the reason.

Retuning (MAINTAINING.md): declare a candidate in CONFIGS, sweep it against
the others on the shapes it is for, change _select_config, run the GPU tests.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import itertools
import json
import sys
from pathlib import Path

import torch
from tabulate import tabulate

from grader.tasks import TASKS, get


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """"1x4096x4096,256x11008x4096" -> [(1, 4096, 4096), (256, 11008, 4096)]."""
    shapes = []
    for item in text.split(","):
        dims = tuple(int(d) for d in item.strip().lower().split("x"))
        if len(dims) != 3 or min(dims) < 1:
            raise argparse.ArgumentTypeError(f"shape {item!r}: expected MxNxK with positive integers")
        shapes.append(dims)
    return shapes


def solution(task: str):
    """The reference kernel file of ``task`` (solutions/<its file>), as a module."""
    return importlib.import_module(f"solutions.{Path(get(task).file).stem}")


def parse_options(task: str, items: list[str]) -> dict[str, list]:
    """["density=0.25,1.0"] -> {"density": [0.25, 1.0]}, each value checked against the task's option."""
    spec, out = get(task), {}
    for item in items:
        name, _, values = item.partition("=")
        option = spec.options.get(name.strip())
        if option is None or not values:
            raise SystemExit(f"--option {item!r}: expected NAME=V[,V...] with NAME one of "
                             f"{', '.join(spec.options)} ({task})")
        cast = {"int": int, "number": float, "bool": lambda v: v.lower() in ("1", "true", "yes"),
                "choice": str}[option.kind]
        try:
            out[name.strip()] = [cast(v.strip()) for v in values.split(",")]
        except ValueError:
            raise SystemExit(f"--option {item!r}: {name} takes {option.kind} values") from None
    return out


def space(task: str, patterns: str | None = None) -> dict:
    """name -> triton.Config: the task's declared configs, or those matching ``patterns``."""
    configs = solution(task).CONFIGS
    if not patterns:
        return dict(configs)
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    chosen = {n: c for n, c in configs.items() if any(fnmatch.fnmatchcase(n, p) for p in wanted)}
    if not chosen:
        raise SystemExit(f"no config of {task} matches {patterns!r}; declared: {', '.join(configs)}")
    return chosen


def cases(task: str, shapes, options: dict[str, list]) -> list[tuple[tuple, dict]]:
    """(shape, case options) to sweep: every shape with every combination of the options' values."""
    names = list(options)
    combos = [dict(zip(names, values)) for values in itertools.product(*(options[n] for n in names))]
    return [(s, combo) for s in shapes for combo in combos]


def _stored_blocks(args) -> list[int]:
    """The number of stored blocks of each sparse (BSR) argument: a selection input."""
    return [a.values().shape[0] for a in args if getattr(a, "layout", None) == torch.sparse_bsr]


def choice(task: str, shape, args) -> str:
    """The name of the config the kernel file picks today for these arguments."""
    return solution(task)._select_config(*shape, *_stored_blocks(args))


def describe(cfg) -> str:
    """A config as its constexprs and launch options: "SPLIT_K=1, ..., num_warps=4, num_stages=3"."""
    return ", ".join([f"{k}={v}" for k, v in cfg.kwargs.items()]
                     + [f"num_warps={cfg.num_warps}", f"num_stages={cfg.num_stages}"])


def sweep_case(task: str, shape, options: dict, configs: dict, reps: int = 30, device: str = "cuda",
               clock=None) -> dict:
    """Time each config on one case; the record that --json writes. ``clock(fn, reps)``
    is the benchmark's (median_ms) unless given (the tests run this in the interpreter)."""
    from grader.compare import check_task_output, reference_and_slack

    if clock is None:
        from grader.harness.timing import median_ms as clock
    module = solution(task)
    entry = getattr(module, get(task).entry)
    args, extras = get(task).make_inputs(shape, options, int(torch.randint(2**31 - 1, ())), device)
    x, w = args[0], extras["weight"]
    record = dict(task=task, shape=list(shape), options=options, selected=choice(task, shape, args),
                  fp16_ms=clock(lambda: x @ w.t(), reps=reps), anchors_ms={},
                  floor_bytes=get(task).minimum_bytes(shape, options), configs=[])
    for name, anchor in get(task).anchors.items():
        try:  # None where this PyTorch build lacks the op or rejects the shape
            record["anchors_ms"][name] = clock(anchor(args, extras), reps=reps)
        except (RuntimeError, NotImplementedError, AttributeError, TypeError):
            record["anchors_ms"][name] = None
    ref_slack = reference_and_slack(task, args)
    for name, cfg in configs.items():
        row = dict(name=name, ms=None, error="")
        module.FORCE_CONFIG = cfg
        try:
            check = check_task_output(entry(*args), task, args, ref_slack)
            if check.passed:
                row["ms"] = clock(lambda: entry(*args), reps=reps)
            else:
                row["error"] = "wrong: " + check.message.splitlines()[0]
        except Exception as e:  # noqa: BLE001 - out of shared memory, a bad layout: a row, not the end
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
        finally:
            module.FORCE_CONFIG = None
        record["configs"].append(row)
    return record


def _label(record: dict) -> str:
    M, N, K = record["shape"]
    opts = ", ".join(f"{k} {v}" for k, v in record["options"].items())
    return f"{record['task']} {M}x{N}x{K}" + (f" ({opts})" if opts else "")


def table(record: dict, copy_gbs: float | None = None) -> str:
    """The ranking of one case: fastest first, failures last; * marks today's choice.
    With ``copy_gbs`` (the copy bandwidth, GB/s), a column says what fraction of it
    each time means for the problem's minimum bytes."""
    base = record["fp16_ms"]
    anchors = record.get("anchors_ms", {})
    first = next(iter(anchors), None)
    chosen = next((r["ms"] for r in record["configs"] if r["name"] == record["selected"]), None)
    floor_ms = record["floor_bytes"] / (copy_gbs * 1e9) * 1e3 if copy_gbs and record.get("floor_bytes") else None
    rows = sorted(record["configs"], key=lambda r: (r["ms"] is None, r["ms"] or 0.0))
    out = []
    for rank, r in enumerate(rows, 1):
        mark = "*" if r["name"] == record["selected"] else ""
        if r["ms"] is None:
            out.append(["-", mark + r["name"], None, None, None, None, None, r["error"]])
        else:
            out.append([rank, mark + r["name"], r["ms"] * 1e3, base / r["ms"],
                        anchors[first] / r["ms"] if first and anchors[first] else None,
                        chosen / r["ms"] if chosen else None,
                        f"{floor_ms / r['ms']:.0%}" if floor_ms else None, ""])
    head = f"{_label(record)}: fp16 torch.matmul {base * 1e3:.2f} us" + "".join(
        f"; {name} {ms * 1e3:.2f} us" if ms else f"; {name} n/a" for name, ms in anchors.items())
    if floor_ms:
        head += f"; memory floor {floor_ms * 1e3:.2f} us at {copy_gbs:.0f} GB/s"
    head += "; * = _select_config's choice"
    return head + "\n" + tabulate(out, headers=["rank", "config", "us", "x fp16", f"x {first or 'anchor'}",
                                                "x chosen", "% copy BW", "failed"],
                                  floatfmt=".2f", missingval="")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("task", choices=list(TASKS))
    ap.add_argument("--shapes", type=parse_shapes, required=True, help="MxNxK[,MxNxK...]")
    ap.add_argument("--option", action="append", default=[], metavar="NAME=V[,V...]",
                    help="a case option of the task (grader/tasks/), e.g. density=0.25,1.0 or group_size=128")
    ap.add_argument("--configs", default=None, help="fnmatch patterns of config names, comma-separated (default: all)")
    ap.add_argument("--reps", type=int, default=30, help="timed calls per config (median)")
    ap.add_argument("--json", default=None, help="also write every number to this file")
    ap.add_argument("--list", action="store_true", help="list the configs and today's choice per shape; time nothing")
    args = ap.parse_args(argv)
    configs = space(args.task, args.configs)
    todo = cases(args.task, args.shapes, parse_options(args.task, args.option))
    if args.list:
        for name, cfg in configs.items():
            print(f"{name}: {describe(cfg)}")
        for shape, options in todo:
            inputs, _ = get(args.task).make_inputs(shape, options, 0, "cpu")
            print(_label(dict(task=args.task, shape=list(shape), options=options))
                  + f": {choice(args.task, shape, inputs)}")
        return 0
    if not torch.cuda.is_available():
        print("bench.sweep times on a CUDA GPU (none found); --list shows the configs without one.")
        return 1
    import triton

    from grader.harness.timing import copy_bandwidth_gbs
    bw = copy_bandwidth_gbs()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"copy {bw:.0f} GB/s", flush=True)
    records = []
    for shape, options in todo:
        records.append(sweep_case(args.task, shape, options, configs, args.reps))
        print(table(records[-1], bw) + "\n", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                           copy_gbs=bw, results=records), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
