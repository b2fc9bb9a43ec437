"""A roofline plot per task: where each performance test's kernel stands against the GPU's limits.

    draw(task_result, tests, target, path) -> path or None   (None: nothing to draw)

One point per performance test and implementation, at the test's arithmetic
intensity (the product's FLOPs over the fewest bytes it must move: every input
read once, the output written once) and the throughput a time gives (FLOPs /
time): fp16 ``torch.matmul`` and the reference solution as graded on that GPU
(grader/targets.toml), and the submission's kernel, measured on a GPU run or
predicted on a CPU run (its predicted range as a bar). The lines are the
floor of the time, the roof of the throughput: memory bandwidth times
intensity, and the tensor cores' peak. matplotlib draws it (its Agg backend,
no display); without matplotlib there is no plot and the report says so.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

DPI = 72
SIZE = (6.4, 4.2)


def _mma_dtype(task: str) -> str:
    """The type the task's product runs in on the tensor cores (its roof)."""
    try:
        from .tasks import get
        return get(task).mma_dtype
    except KeyError:
        return "fp16"


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def points(task_result, tests: list, target) -> list[dict]:
    """The plot's data: per performance test of the task (``tests``: the result's
    TestResults), its FLOPs and fewest bytes, and each implementation's time in
    microseconds (the submission's measured, or predicted with its range)."""
    out = []
    estimate = task_result.estimate or {}
    predicted = estimate.get("tests", {})
    for t in tests:
        if t.task != task_result.task or t.kind != "performance":
            continue
        details = t.details or {}
        row = {"test": t.name, "flops": details.get("flops"), "min_bytes": details.get("min_bytes")}
        gpu = next((g for g in (predicted.get(t.name) or {}).get("gpus", [])
                    if target is not None and g["gpu"] == target.name), None)
        if details.get("kernel_ms"):
            row["yours_us"] = details["kernel_ms"] * 1e3
            row["fp16_us"] = details.get("baseline_ms", 0) * 1e3 or None
        elif gpu and gpu.get("us") and gpu["us"] != float("inf"):
            row["yours_us"] = gpu["us"]
            row["yours_range"] = gpu["us_range"]
            row["fp16_us"] = gpu.get("baseline_us")
        if target is not None:
            key = "x".join(str(v) for v in details.get("shape") or [])
            if not row.get("fp16_us") and key in target.baseline_ms:
                row["fp16_us"] = target.baseline_ms[key] * 1e3
            row["reference_us"] = (target.reference_ms.get(t.name) or 0) * 1e3 or None
        out.append(row)
    return out


def draw(task_result, tests: list, target, path: Path) -> Path | None:
    """Write the task's roofline plot as a PNG at ``path``; None when there is
    nothing to plot or matplotlib is missing."""
    rows = [r for r in points(task_result, tests, target) if r.get("flops") and r.get("min_bytes")]
    if not rows or target is None or not available():
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    bw = target.copy_gbs * 1e9
    kind = _mma_dtype(task_result.task)
    peak = target.tensor_peak(kind) * 1e12
    xs = [r["flops"] / r["min_bytes"] for r in rows]
    lo, hi = min(xs) / 3, max(xs) * 3
    grid = [lo * (hi / lo) ** (i / 50) for i in range(51)]
    ax.plot(grid, [min(peak, bw * x) / 1e12 for x in grid], color="0.3", lw=1.5,
            label=f"floor: {target.copy_gbs / 1e3:.1f} TB/s, {peak / 1e12:.0f} {kind} TFLOP/s")
    styles = (("fp16_us", "fp16 torch.matmul", "s", "tab:blue"), ("reference_us", "reference", "^", "tab:green"),
              ("yours_us", "your kernel", "o", "tab:red"))
    for key, label, marker, color in styles:
        pts = [(x, r) for x, r in zip(xs, rows) if r.get(key)]
        if not pts:
            continue
        ys = [r["flops"] / (r[key] * 1e-6) / 1e12 for _, r in pts]
        ax.scatter([x for x, _ in pts], ys, marker=marker, color=color, label=label, zorder=3)
        if key == "yours_us":
            for x, r in pts:
                if r.get("yours_range"):
                    top, bottom = (r["flops"] / (t * 1e-6) / 1e12 for t in r["yours_range"])
                    ax.plot([x, x], [bottom, top], color=color, lw=2, alpha=0.5)
    for x, r in zip(xs, rows):
        ax.annotate(r["test"].split("/", 1)[-1], (x, min(peak, bw * x) / 1e12), textcoords="offset points",
                    xytext=(0, 6), ha="center", fontsize=7, color="0.3")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOPs per byte that must move")
    ax.set_ylabel("TFLOP/s (the product's FLOPs / time)")
    predicted = any(r.get("yours_range") for r in rows)
    ax.set_title(f"{task_result.task} on {target.name}" + (" (yours: predicted, a range)" if predicted else ""),
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".png")  # as the reports: 0600
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, dpi=DPI, format="png")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
