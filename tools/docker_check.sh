#!/usr/bin/env bash
# Build the grading image and check, inside it, that student code runs as its own
# unprivileged user in the sandbox. Run on a machine with Docker, from the repository root:
#     bash tools/docker_check.sh            (add --gpus all through GPU_FLAGS="--gpus all")
# RUN_FLAGS: extra docker run options, e.g. docs/classroom.md's --security-opt options, with which
# the worker also gets bwrap's namespaces (the check then requires them).
# Prints one line per check and exits non-zero if any failed.
set -uo pipefail
IMAGE=${IMAGE:-quant-grader-check}
GPU_FLAGS=${GPU_FLAGS:-}
# BUILD_FLAGS: extra docker build options (a local base image: "--build-arg BASE_IMAGE=...")
# shellcheck disable=SC2086
docker build -q ${BUILD_FLAGS:-} -t "$IMAGE" . >/dev/null || { echo "FAIL docker build"; exit 1; }

# shellcheck disable=SC2086
docker run -i --rm --network none --tmpfs /submissions:mode=1777 $GPU_FLAGS ${RUN_FLAGS:-} -e EXPECT_NAMESPACES="${RUN_FLAGS:+1}" \
  --entrypoint python "$IMAGE" - <<'PY'
import os, pwd, subprocess, sys, textwrap, time
from pathlib import Path
sys.path.insert(0, "/grader")
from grader.harness import sandbox

fails = 0
def check(name, ok, detail=""):
    global fails
    fails += not ok
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)

me = pwd.getpwuid(os.getuid()).pw_name
check("grader runs as a non-root user", os.getuid() != 0, f"{me} ({os.getuid()})")
b = sandbox.backend()
check("sandbox switches to another user", b.separate_user and b.uid not in (0, os.getuid()),
      b.summary())
if os.environ.get("EXPECT_NAMESPACES"):
    check("the worker gets bwrap's namespaces", b.name == "bwrap" and b.isolated, b.summary())
classmate = Path("/submissions/classmate-w8a8.py")   # a submission readable by every user
classmate.write_text("CLASSMATE"); classmate.chmod(0o644)
writable = [str(p) for p in Path("/grader").rglob("*") if os.access(p, os.W_OK)]
check("grader files read-only to the grader", not writable and os.access("/grader", os.W_OK) is False,
      ", ".join(writable[:3]))
st = Path("/grader/grader/rubric.toml").stat()
check("grader files owned by grader, unreadable to others",
      pwd.getpwuid(st.st_uid).pw_name == "grader" and not st.st_mode & 0o077, oct(st.st_mode))

os.environ["GRADER_SECRET"] = "s3cr3t-of-the-grader"   # must not reach the child
top = sandbox.task_dir("check-")
scratch = top / "scratch"; scratch.mkdir()
code = textwrap.dedent("""
    import os, socket, subprocess, sys
    def say(*a): print(*a, flush=True)
    say("UID", os.getuid(), os.getgroups())
    say("NNP", open("/proc/self/status").read().split("NoNewPrivs:")[1].split()[0])
    for path in ("/grader/grader/rubric.toml", "/proc/1/environ", f"/proc/{os.getppid()}/environ",
                 "/submissions/classmate-w8a8.py"):
        try:
            data = open(path, "rb").read(); say("READ", path, data[:4000])
        except OSError:
            say("DENIED", path)
    for path in ("/grader/evil.py", "/grader/grader/tests/conftest.py", "/reports/evil.json",
                 "/home/grader/.local/evil.pth"):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").write("x-planted"); say("WROTE", path)
        except OSError:
            say("DENIED", path)
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2); say("NET ON")
    except OSError:
        say("NET OFF")
    try:
        bytearray(64 << 30); say("ALLOC OK")
    except MemoryError:
        say("ALLOC FAILED")
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "DOCKERMARK"],
                     start_new_session=True)
    if os.fork() == 0:
        os.setsid(); os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", "DOCKERMARK"])
    say("READY")
    import time; time.sleep(300)
""")
p = sandbox.spawn([sys.executable, "-c", code], sandbox.Jail(scratch=scratch, env={"PATH": "/usr/bin:/bin"}),
                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
lines = []
for raw in p._proc.stdout:
    lines.append(raw.decode().strip())
    if lines[-1] == "READY":
        break
out = "\n".join(lines)
check("child runs as the student user", f"UID {b.uid} " in out, out.splitlines()[0] if out else "no output")
check("child has no_new_privs", "NNP 1" in out)
# In bwrap /proc/1 is the jail's own first process: reading it is harmless; the grader's secret is not.
check("child cannot read the rubric or the grader's environment",
      not any(l.startswith("READ /grader") for l in lines) and "s3cr3t" not in out,
      "; ".join(l[:80] for l in lines if l.startswith("READ ")))
check("child cannot read a classmate's world-readable file" if b.isolated else
      "(info) without namespaces a world-readable classmate's file is readable",
      not b.isolated or "READ /submissions/classmate-w8a8.py" not in out,
      "; ".join(l for l in lines if "classmate" in l))
# A write may land in the jail's own throwaway root; what counts is the real file system.
def planted_in(p):
    try:
        return b"x-planted" in open(p, "rb").read()
    except OSError:
        return False
planted = [p for p in ("/grader/evil.py", "/grader/grader/tests/conftest.py", "/reports/evil.json",
                       "/home/grader/.local/evil.pth") if planted_in(p)]
check("child cannot write the grader, reports or HOME", not planted,
      ", ".join(planted) + " (in the jail: " + "; ".join(l for l in lines if l.startswith("WROTE")) + ")")
check("child has no network (docker --network none)", "NET OFF" in out)
check("child memory is bounded", "ALLOC FAILED" in out)
p.kill()
time.sleep(0.5)
left = subprocess.run(["pgrep", "-f", "-u", str(b.uid), "DOCKERMARK"], capture_output=True, text=True).stdout.split()
check("no process outlives kill()", not left, " ".join(left))
subprocess.run(["rm", "-rf", str(top)])
check("grader removes the child's scratch", not top.exists())
sys.exit(1 if fails else 0)
PY
rc=$?

# The grader itself still grades in the image (stub kernels of assignment/: 0 points, a report).
# shellcheck disable=SC2086
if docker run --rm --network none $GPU_FLAGS ${RUN_FLAGS:-} "$IMAGE" grader grade /grader/assignment \
     --report-dir /tmp/report --device cpu --tasks dds >/dev/null 2>&1; then
  echo "PASS make grade runs in the image"
else
  echo "FAIL make grade runs in the image"; rc=1
fi
# The reference (mounted: the image has none) graded in the image while a classmate whose files
# raise on import is graded again and again beside it, both under the one `student` user: the
# reference keeps every correctness point (a task's clean-up kills its own processes only), and
# it gets them at all (the worker's pipes survive the sudo switch).
# shellcheck disable=SC2086,SC2016
if docker run --rm --network none $GPU_FLAGS ${RUN_FLAGS:-} -v "$PWD/solutions:/ref:ro" \
     --entrypoint bash "$IMAGE" -c '
  mkdir -p /tmp/bob
  for t in w8a8 w4a16 dds; do echo "raise RuntimeError(\"raises on import\")" > /tmp/bob/$t.py; done
  python -m grader grade /ref --device cpu --tasks dds --report-dir /tmp/alice >/dev/null 2>&1 &
  alice=$!
  n=0
  while kill -0 "$alice" 2>/dev/null; do
    python -m grader grade /tmp/bob --device cpu --report-dir /tmp/bob-report >/dev/null 2>&1
    n=$((n + 1))
  done
  wait "$alice"
  python -c "
import json, sys
tests = [t for t in json.load(open(\"/tmp/alice/report.json\"))[\"tests\"] if t[\"kind\"] == \"correctness\"]
print(\"the reference:\", sum(t[\"score\"] for t in tests), \"of\", sum(t[\"max_score\"] for t in tests),
      \"correctness points beside\", sys.argv[1], \"grades of a file that raises on import\")
sys.exit(0 if int(sys.argv[1]) >= 1 and all(t[\"score\"] == t[\"max_score\"] for t in tests) else 1)
" "$n"'; then
  echo "PASS the reference keeps every point beside another student graded at once"
else
  echo "FAIL the reference keeps every point beside another student graded at once"; rc=1
fi
# shellcheck disable=SC2086
if docker run --rm --network none ${RUN_FLAGS:-} "$IMAGE" classroom --help >/dev/null 2>&1; then
  echo "PASS the classroom runs in the image"
else
  echo "FAIL the classroom runs in the image"; rc=1
fi
exit $rc
