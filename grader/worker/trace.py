"""Which kernels ran on the GPU during a checked call: CUPTI, through PyTorch's profiler.

    why_off = start()                   # before the submission is imported: "" or why there is no trace
    with Window() as w:                 # one checked call
        y = fn(*args); torch.cuda.synchronize()
    w.summary(own_names)                # {"own": n, "copies": n, "torch_ops": [...], "foreign": [...]}

CUPTI sees every kernel, copy and memset of the process on the GPU, whichever
thread or library launched it. PyTorch's profiler links each kernel to the
PyTorch op whose launch it was (by CUPTI's correlation id); a kernel with no
such op was launched outside PyTorch: by Triton, or by anything else. A
checked call may run on the GPU only:

- the submission's own Triton kernels, known by the names their launches
  returned (evidence.LaunchRecorder, ``CompiledKernel.name``);
- copies and memsets, and the kernels of the PyTorch ops a wrapper may use
  (evidence.WRAPPER_OPS: allocation, views, copies and conversions, the index
  helpers; the outermost op counts, so ``torch.diff``'s inner subtraction is
  ``diff``'s).

Anything else (an elementwise PyTorch kernel, cuBLAS, a kernel of some other
library) is named in the summary, and the judge voids the task. What the trace
cannot see is in docs/integrity.md: work on the host (Python or NumPy
arithmetic), and anything the submission does to the profiler itself, which
runs in its own process.

This file runs in the untrusted worker and depends on torch only.
"""

from __future__ import annotations

from collections import Counter

MAX_NAMES = 10
COPY_PREFIXES = ("Memcpy", "Memset")   # how PyTorch's profiler names CUPTI's copy and memset activities
# CUDA's own bookkeeping that CUPTI reports beside the kernels (a module's functions
# loaded at their first launch under CUDA_MODULE_LOADING=LAZY): no arithmetic, and
# named by CUDA, never by the submission. Seen on an H100 with CUDA 13, 2026-11-25.
CUDA_BOOKKEEPING = frozenset({"Lazy Function Loading"})
# A PyTorch kernel the profiler could not tie to its op is known by its name: ATen's kernels
# live in at::native (a Triton kernel's name is an identifier, without "::"); its copies and
# fills are copies, any other is PyTorch computing.
ATEN_KERNEL = "at::native::"
ATEN_COPIES = ("copy", "Fill", "fill")


def _profile():
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])


def start() -> str:
    """Run a first profiler session, so that CUPTI is the worker's before the
    submission is imported, and check that it sees a kernel; "" or why not."""
    try:
        import torch

        with _profile() as prof:
            torch.zeros(1024, device="cuda").fill_(1.0)
            torch.cuda.synchronize()
        kernels = [(name, op) for name, op in device_events(prof.events()) if not name.startswith(COPY_PREFIXES)]
        if not kernels:
            return "PyTorch's profiler saw no GPU kernel (CUPTI is not available to the worker)"
        if all(op is None for _, op in kernels):
            return "PyTorch's profiler does not tie GPU kernels to the PyTorch ops that launched them here"
        return ""
    except Exception as e:  # noqa: BLE001 - no trace is a check off, said so, never a crash
        return f"PyTorch's profiler could not trace the GPU: {type(e).__name__}: {e}"[:300]


def _is_device(event) -> bool:
    device_type = getattr(event, "device_type", None)
    return getattr(device_type, "name", str(device_type)).upper().endswith("CUDA")


def device_events(events) -> list[tuple[str, str | None]]:
    """(name, the outermost PyTorch op that launched it or None) of every GPU
    activity among a profiler's events (``torch.profiler.profile.events()``)."""
    ops = {e.id: e for e in events if not _is_device(e) and not getattr(e, "is_user_annotation", False)}
    found = []
    for e in events:
        if not _is_device(e):
            continue
        op = ops.get(getattr(e, "linked_correlation_id", 0) or 0)
        while op is not None and getattr(op, "cpu_parent", None) is not None \
                and not getattr(op.cpu_parent, "is_user_annotation", False):
            op = op.cpu_parent
        found.append((str(e.name), None if op is None else str(op.name)))
    return found


def classify(events: list[tuple[str, str | None]], own: set[str], wrapper_ops: set[str]) -> dict:
    """What ran: own Triton kernels, copies (memcpy, memset, kernels of the wrapper's
    PyTorch ops), and by name the PyTorch ops and other kernels that computed."""
    counts = {"own": 0, "copies": 0}
    torch_ops: Counter = Counter()
    foreign: Counter = Counter()
    for name, op in events:
        if name in CUDA_BOOKKEEPING:
            continue
        if op in CUDA_BOOKKEEPING:   # not a PyTorch op: the kernel is known by its name alone
            op = None
        if name in own:
            counts["own"] += 1
        elif name.startswith(COPY_PREFIXES):
            counts["copies"] += 1
        elif op is None and ATEN_KERNEL in name:
            if any(word in name for word in ATEN_COPIES):
                counts["copies"] += 1
            else:
                torch_ops[f"a PyTorch kernel of no recorded op: {name[:150]}"] += 1
        elif op is None:
            foreign[name] += 1
        elif op.split("::")[-1] in wrapper_ops:
            counts["copies"] += 1
        else:
            torch_ops[op] += 1
    return {**counts, "torch_ops": sorted(torch_ops)[:MAX_NAMES],
            "foreign": [n[:200] for n in sorted(foreign)[:MAX_NAMES]]}


class Window:
    """A profiler session around one checked call."""

    def __init__(self):
        self.prof = _profile()
        self.error = ""

    def __enter__(self):
        self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self.prof.__exit__(None, None, None)
        except Exception as e:  # noqa: BLE001 - the call's own outcome comes first
            self.error = f"{type(e).__name__}: {e}"[:300]
        return False

    def summary(self, own: set[str], wrapper_ops: set[str]) -> dict:
        """classify() of this window's GPU activity; {"error": why} if the trace failed."""
        if self.error:
            return {"error": self.error}
        try:
            return classify(device_events(self.prof.events()), own, wrapper_ops)
        except Exception as e:  # noqa: BLE001
            return {"error": f"{type(e).__name__}: {e}"[:300]}
