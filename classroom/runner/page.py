"""The status page, GET /: the queue and the leaderboard, as plain HTML (no script; it reloads itself).

Nothing on it names a student or a job: the queue is places and ETAs, the
running jobs are slots and times, the board shows only the display names
that students chose when they submitted. Every text from outside (display
names) is escaped. Elements carry ids and ``data-`` attributes for tests.
"""

from __future__ import annotations

from html import escape

REFRESH_S = 15


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes / 60:.1f} h"


def kernel_time(ms: float | None) -> str:
    if ms is None:
        return "&ndash;"
    return f"{ms * 1000:.1f} &micro;s" if ms < 1 else f"{ms:.3f} ms"


def _points(x: float) -> str:
    return f"{x:g}"


def render(status: dict) -> str:
    queue, running, board = status["queue"], status["running"], status["leaderboard"]
    tasks, perf = status["tasks"], status["performance_tests"]
    device = "GPU" if status["device"] == "cuda" else "CPU (Triton interpreter)"
    rows_q = "".join(
        f'<tr class="queued" data-position="{q["position"]}" data-eta-s="{q["eta_s"]}">'
        f'<td>{q["position"]}</td><td>waiting</td><td>{duration(q["eta_s"])}</td></tr>' for q in queue)
    rows_r = "".join(
        f'<tr class="running" data-eta-s="{r["eta_s"]}"><td>{escape(str(r["slot"]))}</td>'
        f'<td>{duration(r["elapsed_s"])}</td><td>{duration(r["eta_s"])}</td></tr>' for r in running)
    head_b = "".join(f"<th>{escape(t)} points</th>" for t in tasks) + "".join(
        f"<th>{escape(t)}</th>" for t in perf)
    rows_b = "".join(
        f'<tr class="board-row" data-name="{escape(b["name"], quote=True)}" data-total="{_points(b["total"])}">'
        f'<td>{i}</td><td class="name">{escape(b["name"])}</td><td>{_points(b["total"])}</td>'
        + "".join(f'<td data-task="{escape(t, quote=True)}">{_points(b["points"].get(t, 0))}</td>' for t in tasks)
        + "".join(f'<td data-test="{escape(t, quote=True)}">{kernel_time(b["times_ms"].get(t))}</td>' for t in perf)
        + "</tr>" for i, b in enumerate(board, 1))
    empty_q = '<tr><td colspan="3">nothing waiting</td></tr>' if not queue else ""
    empty_r = '<tr><td colspan="3">no job running</td></tr>' if not running else ""
    empty_b = (f'<tr><td colspan="{3 + len(tasks) + len(perf)}">nobody yet: '
               "<code>make submit ... DISPLAY_NAME=&quot;your name&quot;</code> puts your runs here</td></tr>"
               if not board else "")
    hidden = ("Hidden tests are not run here: the runner grades the visible tests only."
              if status.get("tests") == "visible" else "")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_S}">
<title>Course GPU runner</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 70em; }}
table {{ border-collapse: collapse; margin-bottom: 2em; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; }}
td.name, th {{ text-align: left; }}
</style>
</head>
<body>
<h1>Course GPU runner</h1>
<p id="summary" data-queued="{len(queue)}" data-running="{len(running)}" data-workers="{status["workers"]}">
{len(queue)} waiting, {len(running)} running on {status["workers"]} worker(s), {device}.
{hidden} This page reloads every {REFRESH_S} s.</p>
<h2>Queue</h2>
<table id="queue"><thead><tr><th>place</th><th>state</th><th>report in about</th></tr></thead>
<tbody>{rows_q}{empty_q}</tbody></table>
<h2>Running</h2>
<table id="running"><thead><tr><th>worker</th><th>running for</th><th>done in about</th></tr></thead>
<tbody>{rows_r}{empty_r}</tbody></table>
<h2>Leaderboard</h2>
<p>Students who chose to show their runs: performance points per task (the best of their runs) and the
best kernel time per performance test (correct runs only).</p>
<table id="leaderboard"><thead><tr><th>#</th><th>name</th><th>performance points</th>{head_b}</tr></thead>
<tbody>{rows_b}{empty_b}</tbody></table>
</body>
</html>
"""
