#!/usr/bin/env bash
# On the GPU host: runs GPU tests again and again in several processes at once until a time
# limit, so that ordering bugs between streams (which show only when other work keeps the
# GPU and the host busy) get their chances. Each process loops over FILTER; the summary
# counts passing and failing runs, and a failing run's log is kept in $OUT.
#     device run: bash scripts/device-carried.sh bash scripts/gpu-stress.sh
# PROCS (6) processes run FILTER, NOISE (2) more run NOISE_FILTER beside them; SECONDS_LIMIT
# (420) bounds the whole; BIN is the test binary (build-carry/tests/vfpipe_gpu_tests).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-build-carry/tests/vfpipe_gpu_tests}
OUT=${OUT:-$PWD/stress-out}
PROCS=${PROCS:-6}
NOISE=${NOISE:-2}
SECONDS_LIMIT=${SECONDS_LIMIT:-420}
FILTER=${FILTER:-'Gpu.MmpSearchOnTheGpu*:Gpu.MmpUnitSearch*:Gpu.MmpRounds*:Gpu.MmpFrames*:Gpu.MmpMirror*:Gpu.MmpBlockSearch*'}
NOISE_FILTER=${NOISE_FILTER:-'GpuMedian.*:GpuConv.*:GpuDeflate.*'}
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "no test binary at $BIN" >&2; exit 1; }
end=$(($(date +%s) + SECONDS_LIMIT))

# One worker: runs its filter until the deadline, a line per run in its tally.
worker() {
  local id=$1 filter=$2 run=0 log
  while [ "$(date +%s)" -lt "$end" ]; do
    run=$((run + 1))
    log="$OUT/w$id-run$run.log"
    if timeout $((end - $(date +%s) + 5)) "$BIN" --gtest_filter="$filter" --gtest_shuffle > "$log" 2>&1; then
      echo pass >> "$OUT/w$id.tally"
      rm -f "$log"
    else
      rc=$?
      # A run cut by the deadline is neither a pass nor a failure.
      if [ "$(date +%s)" -ge "$end" ] && [ "$rc" -eq 124 ]; then rm -f "$log"; break; fi
      echo "fail rc=$rc" >> "$OUT/w$id.tally"
    fi
  done
}

for i in $(seq 1 "$PROCS"); do worker "$i" "$FILTER" & done
for i in $(seq 1 "$NOISE"); do worker "n$i" "$NOISE_FILTER" & done
wait

pass=$(cat "$OUT"/w[0-9]*.tally 2>/dev/null | grep -c '^pass')
fail=$(cat "$OUT"/w[0-9]*.tally 2>/dev/null | grep -c '^fail')
npass=$(cat "$OUT"/wn*.tally 2>/dev/null | grep -c '^pass')
nfail=$(cat "$OUT"/wn*.tally 2>/dev/null | grep -c '^fail')
echo "stress: $PROCS x '$FILTER' for ${SECONDS_LIMIT} s: $pass runs passed, $fail failed"
echo "noise: $NOISE x '$NOISE_FILTER': $npass passed, $nfail failed"
for f in "$OUT"/w*-run*.log; do
  [ -e "$f" ] || continue
  echo "== $f"
  grep -E "^\[  FAILED  \]|Failure|error|Segmentation" "$f" | head -20
done
[ "$fail" -eq 0 ] && [ "$nfail" -eq 0 ]
