"""The grading toolchain: torch, Triton and numpy as the grading GPU runs them, and this run's.

toolchain.txt (the repository's root; every copy of the grader ships it) pins
the versions, as pip constraints that every installation uses (``make
setup``, ``make test`` and CI, the Docker image, Gradescope's setup.sh). A
grade still meets other environments (``NO_VENV=1``, a conda env, a TA's own
Python), so:

    activate(device)   before anything imports triton (grader/cli.py): on a CPU run
                       whose environment holds another Triton, the grading Triton,
                       installed by ``make setup`` in .toolchain/triton-<version>
                       (GRADER_TOOLCHAIN_DIR elsewhere), goes first on sys.path and
                       PYTHONPATH; the worker, its compile check and every process
                       they start get it too (grader/harness/session.py mounts the
                       folder read-only in the sandbox). The student's kernels are
                       then interpreted and compiled for sm_90 by the grading Triton.
    report_lines(...)  the report's first lines when a run's toolchain is not the
                       grading one: on a CPU run that could not get the grading
                       Triton, that the compile table and the speed estimate
                       describe another compiler's code; on a GPU, that its
                       versions are not those the rubric was calibrated with.

    python -m grader.toolchain --check      exit 1, one line per difference, when this
                                            environment is not toolchain.txt's
    python -m grader.toolchain --pin NAME   the pinned version of NAME

torch and numpy are not swapped in this way (torch is a multi-GB binary, numpy
is imported by torch): ``make setup`` refuses an environment that differs in
them unless told otherwise, and every report says so.

This module imports neither torch nor Triton.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILE = ROOT / "toolchain.txt"
PINNED = ("torch", "triton", "numpy")
DIR_ENV = "GRADER_TOOLCHAIN_DIR"     # where `make setup` puts the grading Triton (default: .toolchain/)
_LINE = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)\s*==\s*(?P<version>[0-9][0-9A-Za-z.!+-]*)\s*(?:;.*)?$")


class ToolchainError(ValueError):
    """toolchain.txt is missing or does not pin each of PINNED exactly once."""


def pins(path: Path = FILE) -> dict[str, str]:
    """{name: version} of toolchain.txt: each of PINNED pinned with ``==``, nothing else."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ToolchainError(f"{path}: cannot read the grading toolchain ({e})") from None
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _LINE.match(line)
        name = m["name"].lower() if m else None
        if m is None or name not in PINNED or name in found:
            raise ToolchainError(f"{path}:{number}: expected one 'name==version' for each of "
                                 f"{', '.join(PINNED)}, got {line!r}")
        found[name] = m["version"]
    missing = [n for n in PINNED if n not in found]
    if missing:
        raise ToolchainError(f"{path}: pins no {', '.join(missing)}")
    return found


def public(version: str | None) -> str | None:
    """A version without its local label: "2.11.0+cpu" -> "2.11.0" (pip's == matches both)."""
    return None if version is None else version.split("+", 1)[0]


def same(version: str | None, pin: str) -> bool:
    """Whether ``version`` satisfies ``==pin`` as pip reads it (a local label is ignored)."""
    return version is not None and (version == pin or public(version) == public(pin))


def installed(name: str) -> str | None:
    """The version of ``name`` that ``import name`` finds first on sys.path, or None, without importing it."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def side_dir(version: str) -> Path:
    """The folder ``make setup`` installs Triton ``version`` in (pip install --target)."""
    return Path(os.environ.get(DIR_ENV) or ROOT / ".toolchain") / f"triton-{version}"


def version_in(folder: Path, name: str) -> str | None:
    """The version of ``name`` installed in ``folder`` (its dist-info), or None."""
    if not (folder / name).is_dir():
        return None
    for dist in importlib.metadata.distributions(path=[str(folder)]):
        if (dist.metadata["Name"] or "").lower() == name:
            return dist.version
    return None


@dataclass
class Activation:
    """What ``activate`` found and did."""
    device: str
    own: dict = field(default_factory=dict)   # this environment's versions, before anything was put first
    pins: dict = field(default_factory=dict)
    side: str | None = None                  # the folder put first on the path, when one was
    why: str = ""                            # why the grading Triton is not this run's, when it is not


_ACTIVE: Activation | None = None


def activate(device: str) -> Activation:
    """Give this process (and what it starts) the grading Triton on a CPU run; see the module
    docstring. Never raises: what it could not do is in the result's ``why``."""
    global _ACTIVE
    act = Activation(device=device, own={n: installed(n) for n in PINNED})
    try:
        act.pins = pins()
    except ToolchainError as e:
        act.why = str(e)
        _ACTIVE = act
        return act
    pin = act.pins["triton"]
    if device != "cpu" or same(act.own["triton"], pin):
        _ACTIVE = act
        return act
    folder = side_dir(pin)
    found = version_in(folder, "triton")
    if "triton" in sys.modules:
        act.why = "Triton was imported before the grader could put the grading Triton first"
    elif found is None:
        act.why = f"No grading Triton in {_shown(folder)}: make setup installs Triton {pin} there"
    elif not same(found, pin):
        act.why = f"{_shown(folder)} holds Triton {found}, not {pin}: make setup installs Triton {pin} there"
    else:
        sys.path.insert(0, str(folder))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH"))
                                                   if p)
        importlib.invalidate_caches()
        act.side = str(folder)
    _ACTIVE = act
    return act


def side_path() -> str | None:
    """The grading Triton's folder this process put first on its path, or None."""
    return _ACTIVE.side if _ACTIVE is not None else None


def worker_pythonpath(*first: str) -> str:
    """The whole PYTHONPATH of a grading worker (grader/harness/session.py): ``first``
    (its staged packages), then the grading Triton's folder if this process has one.
    Nothing of this process's own PYTHONPATH reaches a worker."""
    return os.pathsep.join([*first, *filter(None, [side_path()])])


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def summary(act: Activation | None = None) -> str:
    """One line for the report's versions: where this run's Triton came from."""
    act = act or _ACTIVE
    try:
        pinned = pins()
    except ToolchainError as e:
        return f"unknown ({e})"
    text = "pinned " + ", ".join(f"{n}=={v}" for n, v in pinned.items())
    if act is not None and act.side:
        text = (f"the grading Triton put first (this environment's own: {act.own.get('triton') or 'none'}), "
                f"from {_shown(Path(act.side))}; {text}")
    return text


def _differences(have: dict, want: dict, names) -> list[tuple[str, str | None, str]]:
    return [(n, have.get(n), want[n]) for n in names if n in want and not same(have.get(n), want[n])]


def report_lines(device: str, versions: dict, calibrated_with: dict | None = None,
                 act: Activation | None = None) -> list[str]:
    """The report's first lines: how this run's toolchain (``versions``: torch, triton, numpy as
    imported) differs from the grading one; [] when it does not.

    CPU: Triton other than toolchain.txt's (the compile table and the estimate describe another
    compiler's code, and why the grading Triton could not be used), torch or numpy other than
    toolchain.txt's (the interpreter may judge otherwise). GPU: versions other than those the
    rubric's thresholds were calibrated with (``calibrated_with``), and a Triton other than
    toolchain.txt's (what students' CPU runs compile with)."""
    act = act or _ACTIVE
    try:
        pinned = act.pins if act is not None and act.pins else pins()
    except ToolchainError as e:
        return [f"Toolchain unknown: {e}; this run's versions cannot be checked against the grading GPU's."]
    lines = []
    if device == "cpu":
        triton = _differences(versions, pinned, ("triton",))
        if triton:
            why = act.why if act is not None and act.why else "make setup installs the grading Triton"
            lines.append(f"Compiled with Triton {triton[0][1] or 'none'}, not the grading GPU's Triton "
                         f"{triton[0][2]} (toolchain.txt): the compile table and the speed estimate describe "
                         f"another compiler's code. {why}.")
        other = _differences(versions, pinned, ("torch", "numpy"))
        if other:
            lines.append("This environment runs " + ", ".join(f"{n} {h or 'none'}" for n, h, _ in other)
                         + ", not the grading toolchain's " + ", ".join(f"{n} {w}" for n, _, w in other)
                         + " (toolchain.txt): the interpreter may judge your kernels otherwise than the grading "
                         "run does.")
        return lines
    if calibrated_with:
        off = _differences(versions, calibrated_with, PINNED)
        if off:
            lines.append("This GPU runs " + ", ".join(f"{n} {h or 'none'}" for n, h, _ in off)
                         + "; the rubric's performance thresholds were calibrated with "
                         + ", ".join(f"{n} {w}" for n, _, w in off)
                         + ": the generated code, and so the ratios, may differ (make calibrate places them "
                         "again with this toolchain).")
    triton = _differences(versions, pinned, ("triton",))
    if triton:
        lines.append(f"This GPU compiles with Triton {triton[0][1]}; toolchain.txt pins Triton {triton[0][2]}, "
                     "which students' CPU runs compile with: their compile tables and estimates describe other "
                     "code than this run's.")
    return lines


def check(names=PINNED) -> list[str]:
    """One line per package of ``names`` this environment holds in another version than toolchain.txt."""
    want = pins()
    return [f"{n} {installed(n) or 'not installed'}, toolchain.txt pins {n}=={want[n]}"
            for n in names if not same(installed(n), want[n])]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.toolchain", description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", nargs="*", metavar="NAME", choices=PINNED,
                   help="exit 1 when this environment's versions (of NAME..., default all) differ from toolchain.txt")
    g.add_argument("--pin", choices=PINNED, help="print the pinned version of one package")
    args = p.parse_args(argv)
    try:
        if args.pin:
            print(pins()[args.pin])
            return 0
        off = check(args.check or PINNED)
    except ToolchainError as e:
        print(f"toolchain: {e}", file=sys.stderr)
        return 2
    for line in off:
        print(f"toolchain: {line}", file=sys.stderr)
    return 1 if off else 0


if __name__ == "__main__":
    sys.exit(main())
