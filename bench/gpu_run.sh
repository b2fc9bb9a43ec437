#!/usr/bin/env bash
# One device session's worth of GPU checks (developer tool; the device has no network).
#   bash bench/gpu_run.sh MODE...   (MODE: grade grade-naive bench profile quant w4a16-mid
#                                    w4a16-large dds-grouped
#                                    w4a16-tall dds-dense pdl w8a8-m256 w4a16-decode
#                                    decode-device w4a16-tma w4a16-unpack
#                                    w4a16-decode-tma w4a16-dequant w4a16-decode-long w4a16-m768 ncu ncu-w8a8 smoke solution-tests batch-test tests; WHEELS=dir, default .wheels)
# Writes logs and JSON under $OUT (default ./gpu-out).
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
WHEELS=${WHEELS:-.wheels}
export PYTHONUNBUFFERED=1
if [ -d "$WHEELS" ]; then
  python3 -m pip install -q --no-index --find-links "$WHEELS" pytest-json-report tabulate tqdm \
    pytest-timeout pytest-xdist 2>&1 | grep -v -i warning
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
for mode in "$@"; do
case "$mode" in
  grade)
    /usr/bin/time -f "grade wall %e s" python3 -m grader grade solutions --report-dir "$OUT/grade-solutions" 2>&1 \
      | tee "$OUT/grade-solutions.log" | tail -45
    python3 -m grader grade assignment --report-dir "$OUT/grade-stubs" --tasks dds 2>&1 | tail -4 ;;
  grade-naive)
    python3 -m grader grade calibration/naive --report-dir "$OUT/grade-naive" 2>&1 | tee "$OUT/grade-naive.log" | tail -45 ;;
  bench)
    python3 -m bench.bench --json "$OUT/bench.json" 2>&1 | grep -v Warning > "$OUT/bench.log"
    tail -60 "$OUT/bench.log" ;;
  profile)
    python3 -m bench.profile_small_m 2>&1 | grep -v Warning | tee "$OUT/profile.log" ;;
  quant)
    python3 -m bench.quant_variants 2>&1 | grep -v Warning | tee "$OUT/quant.log" ;;
  w4a16-mid|w4a16-large|dds-grouped|w4a16-tall|dds-dense|pdl|w8a8-m256|w4a16-decode|decode-device|w4a16-tma|w4a16-unpack|w4a16-decode-tma|w4a16-dequant|w4a16-decode-long|w4a16-m768)
    python3 -m bench.sweep "${mode//-/_}" 2>&1 | grep -v -e Warning -e "  skip" | tee "$OUT/sweep-$mode.log" ;;
  ncu)
    ncu --clock-control none --profile-from-start off --section SpeedOfLight --section Occupancy \
      --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
      python3 -m bench.ncu_decode > "$OUT/ncu-decode.txt" 2>&1; tail -5 "$OUT/ncu-decode.txt" ;;
  ncu-w8a8)
    ncu --clock-control none --profile-from-start off -k regex:gemm \
      --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
      python3 -m bench.ncu_decode w8a8-configs > "$OUT/ncu-w8a8-configs.txt" 2>&1
    grep -E "CONFIG|gpu__time|dram__|warps_active" "$OUT/ncu-w8a8-configs.txt" | tail -130 ;;
  smoke)
    python3 -c "from bench.sweep import smoke_check; smoke_check()" 2>&1 | grep -v Warning | tee "$OUT/smoke.log" ;;
  solution-tests)
    python3 -m pytest tests/test_solutions.py tests/test_layers.py -q -p no:cacheprovider -rs 2>&1 \
      | tee "$OUT/solution-tests.log" | tail -8 ;;
  batch-test)
    python3 -m pytest tests/test_batch.py -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/batch-test.log" | tail -5 ;;
  tests)
    python3 -m pytest tests -q -p no:cacheprovider -n 4 --dist loadfile -rs 2>&1 | tee "$OUT/tests.log" | tail -30 ;;
esac
done
