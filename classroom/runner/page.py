"""The status page, GET /: the leaderboard, the queue, the running jobs, the jobs finished in the last
hour and the median grade time, as plain HTML (no script; it reloads itself). Readable from a
phone to a wide screen: long names are cut with an ellipsis (the whole name in their title),
wide tables scroll on their own. The board holds timed runs only: on the CPU nothing is timed,
and the page says so instead of a board of zeros.

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


def _board(status: dict) -> str:
    """The leaderboard's part of the page: the table where timings exist, else why there is none."""
    board, tasks, perf = status["leaderboard"], status["tasks"], status["performance_tests"]
    if not board and status["device"] != "cuda":
        return ('<p id="board-empty" class="hint">No leaderboard: this runner grades on the CPU, where no '
                "kernel is timed, and the board shows timed runs only.</p>")
    if not board:
        return ('<p id="board-empty" class="hint">Nobody yet: <code>make submit ... DISPLAY_NAME=&quot;your '
                "name&quot;</code> puts your timed runs here.</p>")
    head = "".join(f"<th>{escape(t)} points</th>" for t in tasks) + "".join(f"<th>{escape(t)}</th>" for t in perf)
    rows = "".join(
        f'<tr class="board-row" data-rank="{b["rank"]}" data-name="{escape(b["name"], quote=True)}" '
        f'data-total="{_points(b["total"])}"><td>{b["rank"]}</td>'
        f'<td class="name" title="{escape(b["name"], quote=True)}">{escape(b["name"])}</td>'
        f'<td>{_points(b["total"])}</td><td class="correctness">{_points(b["correctness"])}</td>'
        + "".join(f'<td data-task="{escape(t, quote=True)}">{_points(b["points"].get(t, 0))}</td>' for t in tasks)
        + "".join(f'<td data-test="{escape(t, quote=True)}">{kernel_time(b["times_ms"].get(t))}</td>' for t in perf)
        + "</tr>" for b in board)
    return ("<p>Students who chose to show their runs: performance points per task (the best of their runs), "
            "correctness points, and the best kernel time per performance test (correct runs whose time the "
            "judge trusted). Equal points share a rank.</p>"
            '<div class="wrap"><table id="leaderboard"><thead><tr><th>#</th><th>name</th><th>performance points'
            f"</th><th>correctness</th>{head}</tr></thead><tbody>{rows}</tbody></table></div>")


def render(status: dict) -> str:
    queue, running, finished = status["queue"], status["running"], status.get("finished", [])
    device = "GPU" if status["device"] == "cuda" else "CPU (Triton interpreter)"
    rows_q = "".join(
        f'<tr class="queued" data-position="{q["position"]}" data-eta-s="{q["eta_s"]}">'
        f'<td>{q["position"]}</td><td>waiting</td><td>{duration(q["eta_s"])}</td></tr>' for q in queue)
    rows_r = "".join(
        f'<tr class="running" data-eta-s="{r["eta_s"]}"><td>{escape(str(r["slot"]))}</td>'
        f'<td>{duration(r["elapsed_s"])}</td><td>{duration(r["eta_s"])}</td></tr>' for r in running)
    rows_f = "".join(
        f'<tr class="finished" data-ago-s="{f["ago_s"]}"><td>{duration(f["ago_s"])} ago</td>'
        f'<td>{"&ndash;" if f["took_s"] is None else duration(f["took_s"])}</td></tr>' for f in finished)
    empty_q = '<tr><td colspan="3">nothing waiting</td></tr>' if not queue else ""
    empty_r = '<tr><td colspan="3">no job running</td></tr>' if not running else ""
    empty_f = '<tr><td colspan="2">none in the last hour</td></tr>' if not finished else ""
    median = status.get("median_grade_s")
    typical = f"A grade takes about {duration(median)} here (the median)." if median else ""
    hidden = ("Hidden tests are not run here: the runner grades the visible tests only."
              if status.get("tests") == "visible" else "")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{REFRESH_S}">
<title>Course GPU runner</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1em auto; padding: 0 1em; max-width: 80em; }}
.wrap {{ overflow-x: auto; max-width: 100%; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; white-space: nowrap; }}
td.name, th {{ text-align: left; }}
td.name {{ max-width: 14em; overflow: hidden; text-overflow: ellipsis; }}
.hint {{ background: #f4f4f4; padding: 0.5em 0.8em; }}
.row {{ display: flex; flex-wrap: wrap; gap: 0 2em; }}
</style>
</head>
<body>
<h1>Course GPU runner</h1>
<p id="summary" data-queued="{len(queue)}" data-running="{len(running)}" data-workers="{status["workers"]}"
 data-finished="{len(finished)}" data-median-s="{median if median else ""}">
{len(queue)} waiting, {len(running)} running on {status["workers"]} worker(s), {device};
{len(finished)} finished in the last hour. {typical}
{hidden} This page reloads every {REFRESH_S} s.</p>
<h2>Leaderboard</h2>
{_board(status)}
<div class="row">
<section><h2>Queue</h2>
<table id="queue"><thead><tr><th>place</th><th>state</th><th>report in about</th></tr></thead>
<tbody>{rows_q}{empty_q}</tbody></table></section>
<section><h2>Running</h2>
<table id="running"><thead><tr><th>worker</th><th>running for</th><th>done in about</th></tr></thead>
<tbody>{rows_r}{empty_r}</tbody></table></section>
<section><h2>Finished in the last hour</h2>
<table id="finished"><thead><tr><th>finished</th><th>took</th></tr></thead>
<tbody>{rows_f}{empty_f}</tbody></table></section>
</div>
</body>
</html>
"""
