#!/usr/bin/env bash
# Run the course's own benchmark scripts, unmodified, on a GPU against a
# package's kernels through its course_compat module (assignment/course_compat.py).
#
#   OUT=dir tools/run_course_scripts.sh [SCRIPTS_DIR] [PACKAGE]
#
# SCRIPTS_DIR holds benchmark_w8a8.py, benchmark_w4a16.py and benchmark_sparse.py
# as the course ships them (a public copy: GitHub sandytruant/aiarch-lab2, commit
# 4978935); their code is not part of this repository. Default: course-scripts/.
# PACKAGE is solutions (the reference, default) or assignment (your kernels).
# Writes OUT (default course-scripts-out/): <script>.log, everything the script
# printed, and course_scripts.json, the record for the GPU's results file
# (results/<date>-<gpu>.json, key "course_scripts"): each script's sha256 next
# to the course's, exit code, seconds, "Test passed" lines, timing lines and its
# whole output. Exits 1 unless every script ran unmodified and passed all its cases.
set -uo pipefail
cd "$(dirname "$0")/.."
SCRIPTS_DIR=${1:-course-scripts}
PACKAGE=${2:-solutions}
OUT=${OUT:-course-scripts-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
unset TRITON_INTERPRET

if ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "run_course_scripts: the course's scripts put their tensors on cuda; no CUDA GPU here" >&2
    exit 1
fi
for name in benchmark_w8a8 benchmark_w4a16 benchmark_sparse; do
    script="$SCRIPTS_DIR/$name.py"
    [ -f "$script" ] || { echo "run_course_scripts: $script not found" >&2; exit 1; }
    echo "== $name ($PACKAGE)"
    start=$(date +%s.%N)
    timeout 240 "$PY" -m "$PACKAGE.course_compat" "$script" >"$OUT/$name.log" 2>&1
    echo "$? $start $(date +%s.%N)" >"$OUT/$name.rc"
    cat "$OUT/$name.log"
done

"$PY" - "$SCRIPTS_DIR" "$PACKAGE" "$OUT" <<'EOF'
import hashlib, json, re, sys
from pathlib import Path

sys.path.insert(0, ".")
from tools.gpu_session import session_record

scripts_dir, package, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
# The course's files at commit 4978935 of sandytruant/aiarch-lab2, and the cases each checks.
COURSE = {"benchmark_w8a8": ("b343c73c548bac565f28d446677bc225583442199b9a83ce0622f9e43402d8f3", 3),
          "benchmark_w4a16": ("1acaa742c38acea04acde7a086ba86f3c45a570372954f24af2e2510ed3dead0", 1),
          "benchmark_sparse": ("5283ac4e2d53b2c2e719122bc1ee48128dc3662159247a73a90f96503e48d33d", 3)}
record = {**session_record(), "package": package, "upstream": "github.com/sandytruant/aiarch-lab2@4978935",
          "scripts": {}}
ok = True
for name, (sha, cases) in COURSE.items():
    text = (out / f"{name}.log").read_text(errors="replace")
    rc, start, end = (out / f"{name}.rc").read_text().split()
    got = hashlib.sha256((scripts_dir / f"{name}.py").read_bytes()).hexdigest()
    passed = [l for l in text.splitlines() if l.startswith("Test passed")]
    timings = {m[1]: float(m[2]) for m in re.finditer(r"^(.+ avg) (\S+)$", text, re.M)}
    entry = {"sha256": got, "unmodified": got == sha, "exit_code": int(rc),
             "seconds": round(float(end) - float(start), 1), "cases": cases, "passed": passed,
             "timings_ms": timings, "finished": "finish profiling" in text, "output": text[-20000:]}
    record["scripts"][name] = entry
    good = entry["unmodified"] and entry["exit_code"] == 0 and len(passed) == cases and entry["finished"]
    ok &= good
    print(f"{name}: {'OK' if good else 'FAILED'}  unmodified={entry['unmodified']} exit={rc} "
          f"passed {len(passed)}/{cases}  timings_ms={timings}")
(out / "course_scripts.json").write_text(json.dumps({"course_scripts": record}, indent=1) + "\n")
print(f"{record['gpu']}: {'all three scripts passed' if ok else 'NOT all passed'}; record: {out / 'course_scripts.json'}")
sys.exit(0 if ok else 1)
EOF
