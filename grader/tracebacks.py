"""Point a student at their own line: the innermost frame of a traceback that is in their file.

The worker sends a traceback as text (untrusted, only ever shown). Triton's
interpreter and compiler wrap a kernel's error in their own frames, so the
last lines of a traceback are rarely the student's; this finds the frame in
the submission's package (staged as ``.../submission/<file>``) nearest the
error and shows it with its source line and the final exception.
"""

from __future__ import annotations

import re

_FRAME = re.compile(r'^\s*File "(?P<path>[^"\n]+)", line (?P<line>\d+)(?:, in (?P<func>[^\n]+))?\n'
                    r'(?P<src>(?:(?![ \t]*File ")[ \t]+[^\n]*\n){0,3})', re.M)
_PACKAGE = "/submission/"
_CHAINED = re.compile(r"^(The above exception was the direct cause of the following exception:|"
                      r"During handling of the above exception, another exception occurred:)$", re.M)


# Errors whose own words point the wrong way, and what they mean: (every string the
# traceback holds, the hint). The first match wins. Triton's interpreter raises "Did you
# forget to add @triton.jit ?" for a function that exists only in compiled code (a helper
# without @triton.jit runs fine there); the compiler refuses that helper in other words.
KNOWN_ERRORS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("Did you forget to add @triton.jit", "InterpreterError", "libdevice"),
     "likely cause: libdevice (tl.extra.cuda.libdevice) does not run in Triton's CPU interpreter, so a CPU "
     "grade cannot check this kernel; plain float32 arithmetic can round (the handout's \"Rounding\" "
     "paragraph)"),
    (("Did you forget to add @triton.jit", "InterpreterError"),
     "likely cause: this function exists only in compiled code (tl.extra.cuda.*) and does not run in "
     "Triton's CPU interpreter; a CPU grade can check only what tl.* builds"),
    (("Unsupported function referenced",),
     "likely cause: a kernel calls a Python function that has no @triton.jit; Triton's CPU interpreter runs "
     "it, but compiled code (the GPU) needs @triton.jit on every function a kernel calls"),
    # The same helper under the CPU grade's gate, which builds the file's kernels alone (worker/kernels_only.py).
    (("does not compile for the GPU", "NameError", "is not defined"),
     "likely cause: a kernel uses a name of your file that the GPU's compiler cannot use: a Python function "
     "without @triton.jit (compiled code needs @triton.jit on every function a kernel calls) or a global that "
     "is not a constant (write it as NAME = tl.constexpr(value) with a literal value)"),
    # The same helper on the GPU's second call (Triton has cached the kernel), or a plain constant.
    (("Cannot access global variable", "from within @jit'ed function"),
     "likely cause: a kernel uses a module-level name that is neither a @triton.jit function nor a "
     "tl.constexpr(...) value: put @triton.jit on a helper function; write a constant as NAME = tl.constexpr(value)"),
)


def known_error(text: str) -> str | None:
    """The hint for an error whose own words mislead (KNOWN_ERRORS), or None."""
    return next((hint for needles, hint in KNOWN_ERRORS if all(n in text for n in needles)), None)


def explain_error(text: str, max_lines: int = 8) -> str:
    """``file, line N, in f:`` + source line(s) + the final exception, or the text's last lines.

    In a chained traceback (Triton's interpreter re-raises a kernel's error as
    its own) the root cause comes first: its innermost frame in the
    submission is the line to show.
    """
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return "(no error text)"
    for segment in _CHAINED.split(text):
        mine = [m for m in _FRAME.finditer(segment + "\n") if _mine(m["path"])]
        if mine:
            break
    else:
        return "\n".join(lines[-max_lines:])
    final = _final_exception([ln for ln in segment.splitlines() if ln.strip()] or lines)
    frame = mine[-1]
    where = f'{frame["path"].rsplit(_PACKAGE, 1)[-1]}, line {frame["line"]}'
    if frame["func"] and frame["func"] != "<module>":
        where += f', in {frame["func"]}'
    src = [ln for ln in frame["src"].splitlines() if ln.strip() and not set(ln.strip()) <= set("^~")][:2]
    caret = [ln for ln in frame["src"].splitlines() if ln.strip() and set(ln.strip()) <= set("^~")]
    body = [where + ":"] + ["    " + s.strip() for s in src]
    if caret and src and final.startswith("SyntaxError"):
        body.append(caret[0].rstrip())
    return "\n".join(body + [final])


def _mine(path: str) -> bool:
    """A frame in the submission: staged under .../submission/, or named by its file alone (the GPU
    compiler's messages, grader/worker/compile.py, name the student's file so)."""
    return _PACKAGE in path or ("/" not in path and path.endswith(".py"))


def final_exception(text: str) -> str:
    """The exception a traceback ends with (its root cause's, in a chained one), in one line."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return "(no error text)"
    first = [ln for ln in _CHAINED.split(text)[0].splitlines() if ln.strip()]
    return _final_exception(first or lines)


def _final_exception(lines: list[str]) -> str:
    """The last line that names an exception (Triton adds notes after it at times)."""
    for line in reversed(lines):
        # The grader's own refusals (HostComputeRefused, ValuesUnavailable: grader/worker/shapes.py;
        # NotCompiledPath: grader/worker/compiled_sites.py) too.
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning|Refused|Unavailable|Path)\b", line):
            # Triton's error classes and the grader's own (the worker's package) by their names alone.
            return re.sub(r"^(triton\.(runtime|compiler)\.errors|_grader_worker\.\w+)\.", "", line.strip())[:500]
    return lines[-1].strip()[:500]
