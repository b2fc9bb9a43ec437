"""make submit SERVER=URL [SUBMISSION=dir] [DISPLAY_NAME=name]: a grade on the course GPU.

    python -m tools.submit --server URL [SUBMISSION] [--display-name NAME] [--out gpu-report]
    python -m tools.submit --server URL --job ID        (wait again for a job already uploaded)
    python -m tools.submit --server URL --list          (your runs, newest first, with scores)

The token is read from the environment (TOKEN) or from a file (TOKEN_FILE,
default ~/.runner-token), never from the command line, where every user of a
shared machine could read it (ps).

Checks the kernel files here first, with the static check ``make grade``
runs and the same message (nothing is uploaded while a file has findings),
uploads them as one zip to the course's runner, shows the place in the
queue and an ETA (one line, redrawn in place on a terminal), says so when
the job has to be graded again (the runner's side failed, not the
student's), waits, then prints the table ``make grade`` prints and writes
gpu-report/<job>/report.md and report.json: one folder per run. The runner
grades the visible tests only: the hidden ones are the TA's, as with ``make
grade``.

Standard library only (urllib) on top of the grader that ships with the
assignment. Exit status: 0 with a report; 1 when the runner refused the
submission or could not be reached (one line: bad token, quota used and when
it renews, too large, ...) or the files did not pass the check; 2 for a
usage error.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 60          # one HTTP request
POLL_S = 5.0            # between two looks at the job
TOKEN_FILE = "~/.runner-token"
UNREACHABLE_S = 120.0   # how long the runner may stay unreachable while we wait
MAX_POLL_BYTES = 32 << 20


class Refused(Exception):
    """One line for the student; the command exits 1."""


def _fail_line(e: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(e.read(65536).decode("utf-8", "replace"))
        message = body.get("error") if isinstance(body, dict) else None
    except (ValueError, OSError):
        body, message = None, None
    message = " ".join(str(message or e.reason or "").split())[:300]
    if e.code == 401:
        return f"refused: bad token ({message})"
    if e.code == 429:
        renews = body.get("renews_at") if isinstance(body, dict) else None
        when = ""
        if isinstance(renews, (int, float)):
            hours, minutes = divmod(int(max(0, renews - time.time()) // 60), 60)
            when = (f"; the next run is possible at {time.strftime('%Y-%m-%d %H:%M', time.localtime(renews))} "
                    f"(in {hours} h {minutes} min)")
        return f"refused: quota used: {message.split(';')[0].removeprefix('quota used: ')}{when}"
    if e.code == 413:
        return f"refused: too large ({message})"
    if e.code == 403:
        return f"refused: {message}"
    return f"refused ({e.code}): {message}"


def request(server: str, path: str, token: str, data: bytes | None = None, query: dict | None = None) -> dict:
    url = server.rstrip("/") + path + (("?" + urllib.parse.urlencode(query)) if query else "")
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/zip"
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            raw = resp.read(MAX_POLL_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise Refused(_fail_line(e)) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise ConnectionError(f"cannot reach the runner at {server}: {reason}") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:
        raise Refused(f"the runner at {server} answered something that is not JSON: is SERVER right?") from None


def check_files(submission: str) -> dict[str, bytes]:
    """The kernel files of ``submission`` (folder or .zip, read as make grade reads it), statically
    checked; Refused with make grade's own lines when one is missing or has findings."""
    from grader.rubric import DEFAULT_RUBRIC, RubricError, load_rubric
    from grader.staticcheck import check_source, forbidden_message
    from grader.submission import SubmissionError, escape_name, kernel_files, load_submission

    if not os.path.exists(submission):
        raise Refused(f"no such submission: {escape_name(submission)}")
    try:
        sub = load_submission(submission)
    except SubmissionError as e:
        raise Refused(str(e)) from None
    try:
        extra = set(load_rubric(DEFAULT_RUBRIC).settings.extra_allowed_imports)
    except RubricError:
        extra = set()
    lines = []
    for name in kernel_files():
        if name not in sub.files:
            why = "; ".join(p for p in sub.problems if name in p) or f"{name} not found in the submission"
            lines.append(f"{name}: {why} (keep the stub of a task you have not done)")
            continue
        found = check_source(sub.files[name], extra)
        syntax = [f for f in found if f.rule == "syntax"]
        rest = [f for f in found if f.rule != "syntax"]
        lines += [f"{name}: {f}" for f in syntax]
        if rest:
            lines.append(forbidden_message(name, rest))
    if lines:
        raise Refused("\n".join(lines) + "\nnot uploaded: fix these first (make grade shows the same)")
    return {name: sub.files[name] for name in kernel_files()}


def pack(files: dict[str, bytes]) -> bytes:
    """The upload: one zip, the kernel files at its top (deflate; fixed dates)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(files):
            zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), files[name],
                        compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


def _minutes(seconds) -> str:
    if not isinstance(seconds, (int, float)):
        return "?"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _where(state: dict) -> str:
    if state.get("state") == "running":
        return f"being graded; report in about {_minutes(state.get('eta_s'))}"
    return (f"place {state.get('position')} in the queue; report in about {_minutes(state.get('eta_s'))}")


class Progress:
    """Where the job is, one line: redrawn in place on a terminal, else a new line per change."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.shown: str | None = None
        self.drawn = False

    def show(self, line: str) -> None:
        if line == self.shown:
            return
        if self.tty:
            self.stream.write(f"\r\033[K  {line}")
            self.drawn = True
        else:
            self.stream.write(f"  {line}\n")
        self.stream.flush()
        self.shown = line

    def say(self, line: str) -> None:
        """A line that stays (a notice), above the redrawn one."""
        self.end()
        self.stream.write(f"  {line}\n")
        self.stream.flush()
        self.shown = None

    def end(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.drawn = False


def wait(server: str, token: str, job: str, poll_s: float = POLL_S, progress: Progress | None = None,
         retries_seen: int = 0) -> dict:
    """Poll the job until it is done; its final state (with the report). Its place as it changes,
    and a notice each time the runner has to grade it again."""
    progress = progress or Progress()
    down_since = None
    while True:
        try:
            state = request(server, f"/api/submissions/{urllib.parse.quote(job, safe='')}", token)
            down_since = None
        except ConnectionError:
            down_since = down_since or time.monotonic()
            if time.monotonic() - down_since > UNREACHABLE_S:
                raise
            time.sleep(poll_s)
            continue
        retries = state.get("retries") if isinstance(state.get("retries"), list) else []
        for r in retries[retries_seen:]:
            why = " ".join(str(r.get("why", "") if isinstance(r, dict) else "").split())[:300]
            progress.say(f"notice: the runner grades your job again from the start: {why} (not your "
                         "code's fault)")
        retries_seen = max(retries_seen, len(retries))
        if state.get("state") == "done":
            progress.end()
            return state
        if state.get("state") == "replaced":
            progress.end()
            raise Refused(f"submission {job} was replaced by a later upload of yours before it ran")
        progress.show(_where(state))
        time.sleep(poll_s)


def write_report(state: dict, out_dir: Path, submission: str = "assignment") -> Path:
    """Print the table make grade prints, write report.md and report.json in ``out_dir``/<job>/;
    the reproduce line names the student's own folder (``submission``). Returns that folder."""
    from grader.report import result_from_json, terminal_table
    report, report_md = state.get("report"), str(state.get("report_md") or "")
    if isinstance(report, dict) and report.get("submission") == "submission":
        report["submission"] = submission   # the runner's folder name, not one the student has
    report_md = report_md.replace("make grade SUBMISSION=submission ",
                                  f"make grade SUBMISSION={shlex.quote(submission)} ")
    try:
        result = result_from_json(report)
    except ValueError as e:
        raise Refused(f"the runner sent a report this grader cannot read ({e}): update the assignment "
                      "bundle?") from None
    job = "".join(c for c in str(state.get("job") or "job") if c.isalnum() or c in "-_")[:64] or "job"
    out_dir = out_dir / job
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (out_dir / "report.md").write_text(report_md, encoding="utf-8")
    print()
    print(terminal_table(result))
    if result.hidden_points:
        print(f"out of {result.max_score + result.hidden_points:g} in all: {result.hidden_points:g} points are in "
              "hidden tests only the TA runs")
    if isinstance(report, dict) and report.get("grader_error"):
        print(f"\ngrader error: {report['grader_error']}")
    runner = report.get("runner") if isinstance(report, dict) and isinstance(report.get("runner"), dict) else {}
    when = f", uploaded {runner.get('uploaded')}, graded {runner.get('graded')}" if runner else ""
    print(f"\njob {job}{when}")
    print(f"reports: {out_dir}/report.md, report.json (the course GPU; hidden tests are not run there)")
    return out_dir


def list_runs(server: str, token: str) -> None:
    """The student's runs, newest first, with their scores."""
    answer = request(server, "/api/submissions", token)
    runs = answer.get("runs") if isinstance(answer, dict) and isinstance(answer.get("runs"), list) else []
    if not runs:
        print("no runs yet")
    for r in runs:
        if not isinstance(r, dict):
            continue
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["uploaded"])) \
            if isinstance(r.get("uploaded"), (int, float)) else "?"
        if r.get("error"):
            score = f"not graded: {' '.join(str(r['error']).split())[:120]} (not counted)"
        elif isinstance(r.get("score"), (int, float)) and isinstance(r.get("max_score"), (int, float)):
            score = f"{r['score']:g}/{r['max_score']:g}"
        else:
            score = str(r.get("state", "?"))
        print(f"{str(r.get('job', '?')):18s} {when}  {score}")
    quota = answer.get("quota") if isinstance(answer, dict) and isinstance(answer.get("quota"), dict) else {}
    if quota.get("limit"):
        print(f"runs left: {quota.get('left')} of {quota.get('limit')} in {quota.get('window_h'):g} h")
    print("a report again: make submit JOB=<job>")


def read_token(token_file: str | None) -> str:
    """TOKEN from the environment, else the first line of the token file."""
    token = os.environ.get("TOKEN", "").strip()
    if token:
        return token
    path = Path(os.path.expanduser(token_file or os.environ.get("TOKEN_FILE") or TOKEN_FILE))
    try:
        return path.read_text(encoding="utf-8").strip().splitlines()[0].strip() if path.is_file() else ""
    except (OSError, UnicodeDecodeError, IndexError):
        return ""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.submit", description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("submission", nargs="?", default="assignment", help="folder or .zip (default: assignment/)")
    p.add_argument("--server", default=os.environ.get("SERVER", ""), help="the runner's address (SERVER=)")
    p.add_argument("--token-file", default=None, metavar="FILE",
                   help=f"the file holding your token (TOKEN_FILE=; default {TOKEN_FILE}); or set TOKEN in the "
                        "environment")
    p.add_argument("--list", action="store_true", help="list your runs, newest first, with their scores")
    p.add_argument("--display-name", default="", help="show this run on the leaderboard under this name")
    p.add_argument("--out", default="gpu-report", help="where the reports go, one folder per job "
                                                       "(default: gpu-report/<job>/)")
    p.add_argument("--job", default=None, help="wait again for a job already uploaded")
    args = p.parse_args(argv)
    args.server, args.token = args.server.strip(), read_token(args.token_file)
    if not args.server or not args.token:
        print("usage: make submit SERVER=https://... [SUBMISSION=dir] [DISPLAY_NAME=name] [LIST=1] [JOB=id], "
              f"your token in {TOKEN_FILE} (or TOKEN_FILE=file, or TOKEN in the environment)", file=sys.stderr)
        return 2
    if not args.server.startswith(("http://", "https://")):
        print(f"SERVER={args.server}: expected an address such as https://gpu.example.edu", file=sys.stderr)
        return 2
    if not all(33 <= ord(c) < 127 for c in args.token):
        print("TOKEN: expected the token as the TA sent it (letters and digits, no spaces)", file=sys.stderr)
        return 2
    progress = Progress()
    try:
        if args.list:
            list_runs(args.server, args.token)
            return 0
        if args.job:
            job = args.job
        else:
            files = check_files(args.submission)
            query = {"display_name": args.display_name} if args.display_name else None
            answer = request(args.server, "/api/submissions", args.token, pack(files), query)
            job = answer["job"]
            quota = answer.get("quota") or {}
            used = f"run {quota.get('used')} of {quota.get('limit')} in {quota.get('window_h'):g} h; " \
                if quota.get("limit") else ""
            replaced = f"; it replaces your queued {answer['replaced']}" if answer.get("replaced") else ""
            print(f"uploaded {', '.join(sorted(files))}: job {job} ({used}hidden tests are not run){replaced}")
            print(f"  (Ctrl-C stops waiting, not the job: make submit ... JOB={job} waits again)")
            progress.show(_where(answer))
        state = wait(args.server, args.token, job, progress=progress)
        write_report(state, Path(args.out), args.submission)
        return 0
    except Refused as e:
        print(e, file=sys.stderr)
        return 1
    except ConnectionError as e:
        print(e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        progress.end()
        print("\nstopped waiting; the job goes on", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
