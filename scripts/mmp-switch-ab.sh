#!/usr/bin/env bash
# On the GPU host: an MMP search switch (an environment variable the CUDA search reads when
# it is made) checked and measured in one call, with one binary. Runs the GPU MMP tests and
# memcheck / racecheck on the block search, then the issue's stage command on the 1080p
# test clip with the switch on and off (twice each, and at depth 2), and compares the bytes
# `mmp encode` writes with it on, off and on the CPU. TRACE=1 also traces the kernels of 24
# frames through the stage with the switch on and off (scripts/kernel-trace/, built here
# against the device's CUPTI) and writes each summary to OUT; QUICK=1 leaves the tests and
# sanitizers out.
#     bash scripts/device-carried.sh bash scripts/mmp-switch-ab.sh [VAR [ON [OFF]]]
# VAR defaults to VFP_MMP_SUM_ORDER, ON to 1, OFF to 0. VFP (build-carry/vfpipe) and TESTS
# (build-carry/tests/vfpipe_gpu_tests) name the binaries, DATA (.bench-data) the folder
# with mosaic.npz and camera.y4m (scripts/mmp-bench.sh --prepare DIR), OUT the results.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
VAR=${1:-VFP_MMP_SUM_ORDER}
ON=${2:-1}
OFF=${3:-0}
VFP=${VFP:-build-carry/vfpipe}
TESTS=${TESTS:-build-carry/tests/vfpipe_gpu_tests}
DATA=${DATA:-.bench-data}
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
. scripts/device-env.sh
nvidia-smi -L
rc=0
step() {  # step NAME LOG COMMAND...: runs it, prints its status and time
  local name=$1 log=$2 s
  shift 2
  s=$(date +%s)
  "$@" > "$OUT/$log" 2>&1
  local r=$?
  echo "$name: rc=$r, $(($(date +%s) - s)) s"
  [ $r -eq 0 ] || rc=1
  return $r
}
if [ "${QUICK:-0}" != 1 ]; then
step "GPU MMP tests" gtest.log "$TESTS" --gtest_filter='Gpu.Mmp*' ||
  grep -E "FAILED|Failure|Expected|Which is" "$OUT/gtest.log" | head -20
for tool in memcheck racecheck; do
  step "$tool, block search" "$tool.log" compute-sanitizer --tool $tool --error-exitcode 9 "$TESTS" \
    --gtest_filter='Gpu.MmpBlockSearch*' || tail -20 "$OUT/$tool.log"
done
fi
$PY scripts/mmp-clip.py "$T/clip.y4m" --frames 60 --mosaic "$DATA/mosaic.npz" > /dev/null
$PY scripts/mmp-clip.py "$T/clip4.y4m" --frames 4 --mosaic "$DATA/mosaic.npz" > /dev/null
stage() {  # stage VALUE ARGS...: the stage's frames/s line
  env "$VAR=$1" "$VFP" run -i "$T/clip.y4m" "${@:2}" -f mmp=lambda=25:tile=256x256 --device cuda -o null 2>&1 |
    grep -E 'frames in' | sed "s/^/$VAR=$1 ${*:2}: /"
}
for _ in 1 2; do
  for v in "$ON" "$OFF"; do stage "$v"; done
done
for v in "$ON" "$OFF"; do stage "$v" -n 20 --depth 2; done
for v in "$ON" "$OFF"; do
  env "$VAR=$v" "$VFP" mmp encode -y "$T/clip4.y4m" -o "$T/clip-$v.mmp" --lambda 25 --tile 256 --device cuda 2>&1 |
    tee "$OUT/encode-$v.log" | tail -1 | sed "s/^/$VAR=$v: /"
done
"$VFP" mmp encode -y "$T/clip4.y4m" -o "$T/clip-cpu.mmp" --lambda 25 --tile 256 --device cpu 2>&1 | tail -1 |
  sed "s/^/cpu: /"
if cmp "$T/clip-$ON.mmp" "$T/clip-cpu.mmp" && cmp "$T/clip-$OFF.mmp" "$T/clip-cpu.mmp"; then
  echo "same bytes: $VAR=$ON, $VAR=$OFF and the CPU (4 frames of the clip)"
else
  echo "DIFFERENT BYTES"
  rc=1
fi
if [ "${TRACE:-0}" = 1 ]; then
  if build_kernel_tracer; then
    $PY scripts/mmp-clip.py "$T/clip24.y4m" --frames 24 --mosaic "$DATA/mosaic.npz" > /dev/null
    for v in "$ON" "$OFF"; do
      env "$VAR=$v" KERNEL_TRACE_OUT="$T/trace-$v.csv" CUDA_INJECTION64_PATH="$T/libkernel_trace.so" \
        LD_LIBRARY_PATH="$TRACE_LIBS:${LD_LIBRARY_PATH:-}" \
        "$VFP" run -i "$T/clip24.y4m" -f mmp=lambda=25:tile=256x256 --device cuda -o null 2>&1 | grep -E 'frames in' |
        sed "s/^/traced $VAR=$v: /"
      $PY scripts/kernel-trace/kernel_trace.py "$T/trace-$v.csv" > "$OUT/trace-$v.txt" 2>&1
      echo "== $VAR=$v"
      head -30 "$OUT/trace-$v.txt"
    done
  else
    echo "kernel tracer did not build"
    rc=1
  fi
fi
exit $rc
