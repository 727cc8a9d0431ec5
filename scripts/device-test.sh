#!/usr/bin/env bash
# Builds vfpipe on the GPU machine (CUDA 13, cmake, g++; no OpenCV/GL/packages), runs the
# whole test suite (the GPU tests must run there, not skip), the GPU tests again under
# compute-sanitizer, and the engine benchmark. Results go to $OUT (or ./device-out).
#
# From the development machine, with the `device` tool:
#     scripts/fetch-device-deps.sh            # once: vendored headers into .deps/
#     device run --carry .deps -- bash scripts/device-test.sh
# BENCHES="engine median conv wavelet deflate" (the default) selects the benchmarks to run.
# .gl/ (gl-kit) and .zk/ (scripts/fetch-device-zkit.sh) are used when carried along.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
log() { echo "== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
export PATH=/usr/local/cuda/bin:$PATH
# GL for the headless display tests (EGL on the NVIDIA driver): the kit fetched with
# ../shared/device/gl-kit.sh fetch, carried as .gl/.
if [ -f .gl/gl-kit.sh ]; then
  source .gl/gl-kit.sh install > "$OUT/gl-kit.log" 2>&1 && export VFPIPE_REQUIRE_HEADLESS=1
fi

# zlib, libdeflate, libpng (the DEFLATE references and peers): scripts/fetch-device-zkit.sh, carried as .zk/.
if [ -d .zk/usr ]; then
  export CMAKE_PREFIX_PATH=$PWD/.zk/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export LD_LIBRARY_PATH=$PWD/.zk/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

log configure
cmake --preset device > "$OUT/configure.log" 2>&1 || { tail -50 "$OUT/configure.log"; exit 1; }
log build
# Keep going past a failing target (a benchmark) so that the tests still build and run.
cmake --build --preset device -j "$(nproc)" -- -k 0 > "$OUT/build.log" 2>&1 || {
  grep -E "error|Error" -A3 "$OUT/build.log" | head -60
  [ -x build-device/tests/vfpipe_gpu_tests ] || exit 1
}

log "tests (all labels; GPU tests must not skip here)"
ctest --preset device -j 8 --timeout 240 --output-junit "$OUT/ctest.xml" > "$OUT/ctest.log" 2>&1
rc_tests=$?
tail -25 "$OUT/ctest.log"
if grep -q "Skipped" "$OUT/ctest.log" && grep -E "Gpu\..*Skipped" "$OUT/ctest.log"; then
  echo "GPU tests were skipped on the GPU machine: failing"; rc_tests=1
fi

log "GPU tests under compute-sanitizer (memcheck)"
compute-sanitizer --tool memcheck --error-exitcode 9 build-device/tests/vfpipe_gpu_tests \
  --gtest_filter='-Gpu.CliRuns*:Gpu.OutOfMemory*:GpuMedian.Histogram*:GpuConv.TwoDimensional*:GpuDeflate.LargeInput*:GpuDeflate.LosslessSinks*' > "$OUT/sanitizer.log" 2>&1
rc_san=$?
tail -8 "$OUT/sanitizer.log"

log "wavelet and conv kernels under compute-sanitizer (racecheck: shared-memory tiles, border tables, histograms)"
compute-sanitizer --tool racecheck --error-exitcode 9 build-device/tests/vfpipe_gpu_tests \
  --gtest_filter='GpuWavelet.ForwardAndInverse*:GpuWavelet.NoiseEstimate*:GpuConv.*:-GpuConv.TwoDimensional*' > "$OUT/racecheck.log" 2>&1
rc_race=$?
tail -4 "$OUT/racecheck.log"
log "DEFLATE kernels under compute-sanitizer (racecheck: shared head tables, histograms, staging lines)"
compute-sanitizer --tool racecheck --error-exitcode 9 build-device/tests/vfpipe_gpu_tests \
  --gtest_filter='GpuDeflate.BatchEdges*:GpuDeflate.ChecksumsMatchCpu' > "$OUT/racecheck_deflate.log" 2>&1
rc_race=$(( rc_race | $? ))
tail -4 "$OUT/racecheck_deflate.log"

BENCHES=${BENCHES:-engine median conv wavelet deflate}
want() { [[ " $BENCHES " == *" $1 "* ]]; }
if want engine; then
log "engine benchmark"
build-device/vfpipe-bench-engine --sizes 1920x1080,3840x2160 --frames 1200 --depth 3 \
  --json "$OUT/bench_engine.json" 2>&1 | tee "$OUT/bench_engine.txt"
build-device/vfpipe-bench-engine --sizes 3840x2160 --frames 600 --depth 2 2>&1 | tail -1 | sed 's/^/depth 2: /' | tee -a "$OUT/bench_engine.txt"
build-device/vfpipe-bench-engine --sizes 3840x2160 --frames 600 --depth 4 2>&1 | tail -1 | sed 's/^/depth 4: /' | tee -a "$OUT/bench_engine.txt"
build-device/vfpipe-bench-engine --sizes 3840x2160 --frames 600 --format yuv420p 2>&1 | tail -1 | sed 's/^/yuv420p: /' | tee -a "$OUT/bench_engine.txt"

fi
if want median; then
  log "median benchmark (vs NPP)"
  build-device/vfpipe-bench-median --json "$OUT/bench_median.json" 2>&1 | tee "$OUT/bench_median.txt"
fi
if want conv; then
  log "convolution benchmark (vs NPP)"
  build-device/vfpipe-bench-conv --json "$OUT/bench_conv.json" 2>&1 | tee "$OUT/bench_conv.txt"
fi
if want wavelet; then
  log "wavelet benchmark"
  build-device/vfpipe-bench-wavelet --json "$OUT/bench_wavelet.json" 2>&1 | tee "$OUT/bench_wavelet.txt"
  build-device/vfpipe-bench-wavelet --sizes 3840x2160 --wavelets db4 --method visushrink --cpu-iters 0 2>&1 | tail -1 |
    sed 's/^/visushrink: /' | tee -a "$OUT/bench_wavelet.txt"
  build-device/vfpipe-bench-wavelet --sizes 3840x2160 --wavelets db4 --bits 16 --cpu-iters 0 2>&1 | tail -1 |
    sed 's/^/16-bit: /' | tee -a "$OUT/bench_wavelet.txt"
fi

if want deflate; then
  log "DEFLATE benchmark (vs zlib, libdeflate, libpng)"
  build-device/vfpipe-bench-deflate --levels 1,2,4,6,9 --png-levels 1,2,6 --json "$OUT/bench_deflate.json" 2>&1 |
    tee "$OUT/bench_deflate.txt"
  build-device/vfpipe-bench-deflate --sigma 0 --levels 1,2,4,6,9 --png-levels 1,2,6 --json "$OUT/bench_deflate_clean.json" 2>&1 |
    tee "$OUT/bench_deflate_clean.txt"
fi

echo "tests rc=$rc_tests sanitizer rc=$rc_san racecheck rc=$rc_race"
[ $rc_tests -eq 0 ] && [ $rc_san -eq 0 ] && [ $rc_race -eq 0 ]
