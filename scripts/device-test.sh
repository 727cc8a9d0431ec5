#!/usr/bin/env bash
# Builds vfpipe on a GPU host without packages (CUDA 13, cmake, g++; no OpenCV/GL/packages), runs the
# whole test suite (the GPU tests must run there, not skip), the GPU tests again under
# compute-sanitizer, and the engine benchmark. Results go to $OUT (or ./device-out).
#
# From the development machine, with the `device` tool:
#     scripts/fetch-device-deps.sh            # once: vendored headers into .deps/
#     device run --carry .deps -- bash scripts/device-test.sh
# BENCHES="engine latency cpu cpuframes median conv wavelet deflate" (the default) selects the benchmarks to run
# ("deep": the 3-stage chain on 16-bit frames against 8-bit ones)
# (BENCHES="" runs none);
# also "batch", "mmp" (MMP_DEVICES, and mmp-bench.sh's variables: TILES, SKIP_UNTILED, ...);
# "batch" adds scripts/batch-bench.sh (vfpipe batch throughput against one run at a time);
# "multigpu" scripts/multi-gpu-bench.sh (vfpipe batch on 1 and 2 GPUs: a machine with several).
# .gl/ (gl-kit) and .zk/ (scripts/fetch-device-zkit.sh: oneTBB, zlib, libdeflate, libpng) are carried along,
# and .ff/ (scripts/fetch-device-ffmpeg.sh: FFmpeg's source, built there with NVDEC).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
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

# oneTBB (the CPU pool), zlib, libdeflate, libpng: scripts/fetch-device-zkit.sh, carried as .zk/.
if [ -d .zk/usr ]; then
  export CMAKE_PREFIX_PATH=$PWD/.zk/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export LD_LIBRARY_PATH=$PWD/.zk/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# FFmpeg with NVDEC (scripts/fetch-device-ffmpeg.sh, carried as .ff/): built once per machine,
# then vfpipe's video I/O and its NVDEC path build against it.
if ls .ff/ffmpeg_*.orig.tar.xz >/dev/null 2>&1; then
  log "FFmpeg with NVDEC (.ff)"
  ff_env=$(bash scripts/build-device-ffmpeg.sh 2>&1 | tee "$OUT/ffmpeg-build.log" | tail -1)
  case "$ff_env" in export*) eval "$ff_env" ;; *) echo "FFmpeg build failed: $OUT/ffmpeg-build.log" ;; esac
fi

log configure
cmake --preset device > "$OUT/configure.log" 2>&1 || { tail -50 "$OUT/configure.log"; exit 1; }
log build
# Keep going past a failing target (a benchmark) so that the tests still build and run.
cmake --build --preset device -j "$(nproc)" -- -k 0 > "$OUT/build.log" 2>&1 || {
  grep -E "error|Error" -A3 "$OUT/build.log" | head -60
  [ -x build-device/tests/vfpipe_gpu_tests ] || exit 1
}

rc_tests=0 rc_san=0 rc_race=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then  # SKIP_TESTS=1: benchmarks only (a build already tested)
log "tests (all labels; GPU tests must not skip here)"
ctest --preset device -j 8 --timeout 240 --output-junit "$OUT/ctest.xml" > "$OUT/ctest.log" 2>&1
rc_tests=$?
tail -25 "$OUT/ctest.log"
# MultiGpu.* need two GPUs: they may skip on a machine with one.
gpus=$(nvidia-smi -L | grep -c "^GPU")
skip_ok='^$'
[ "$gpus" -lt 2 ] && skip_ok='MultiGpu\.'
if grep -E "Gpu\..*Skipped" "$OUT/ctest.log" | grep -vE "$skip_ok"; then
  echo "GPU tests were skipped on the GPU host: failing"; rc_tests=1
fi

log "GPU tests under compute-sanitizer (memcheck)"
# Left out: tests that run vfpipe as a child process (the sanitizer follows children, and a
# child under it crashed where the same test passes without it), NVDEC, and the slowest.
compute-sanitizer --tool memcheck --error-exitcode 9 build-device/tests/vfpipe_gpu_tests \
  --gtest_filter='-Gpu.CliRuns*:Gpu.MmpStage*:Gpu.Batch*:Gpu.Nvdec*:Gpu.CliDecodes*:Gpu.OutOfMemory*:Gpu.LatencyIs*:GpuMedian.Histogram*:GpuConv.TwoDimensional*:GpuDeflate.LargeInput*:GpuDeflate.LosslessSinks*:Gpu.MmpFrames*:Gpu.MmpSearchOnTheGpu*:Gpu.MmpUnitSearchBuffers*' > "$OUT/sanitizer.log" 2>&1
rc_san=$?
tail -8 "$OUT/sanitizer.log"

log "wavelet, conv and MMP kernels under compute-sanitizer (racecheck: shared-memory tiles, border tables, histograms)"
compute-sanitizer --tool racecheck --error-exitcode 9 build-device/tests/vfpipe_gpu_tests \
  --gtest_filter='GpuWavelet.ForwardAndInverse*:GpuWavelet.NoiseEstimate*:GpuConv.*:Gpu.MmpLeafSearchKernel*:Gpu.MmpBlockSearch*:Gpu.MmpPostFilter*:-GpuConv.TwoDimensional*' > "$OUT/racecheck.log" 2>&1
rc_race=$?
tail -4 "$OUT/racecheck.log"
log "DEFLATE kernels under compute-sanitizer (racecheck: shared head tables, histograms, staging lines)"
compute-sanitizer --tool racecheck --error-exitcode 9 build-device/tests/vfpipe_gpu_tests \
  --gtest_filter='GpuDeflate.BatchEdges*:GpuDeflate.ChecksumsMatchCpu' > "$OUT/racecheck_deflate.log" 2>&1
rc_race=$(( rc_race | $? ))
tail -4 "$OUT/racecheck_deflate.log"
fi

BENCHES=${BENCHES-engine latency cpu cpuframes median conv wavelet deflate}
want() { [[ " $BENCHES " == *" $1 "* ]]; }
if want engine; then
log "engine benchmark"
build-device/vfpipe-bench-engine --sizes 1920x1080,3840x2160 --frames 1200 --depth 3 \
  --json "$OUT/bench_engine.json" 2>&1 | tee "$OUT/bench_engine.txt"
build-device/vfpipe-bench-engine --sizes 3840x2160 --frames 600 --depth 2 2>&1 | tail -1 | sed 's/^/depth 2: /' | tee -a "$OUT/bench_engine.txt"
build-device/vfpipe-bench-engine --sizes 3840x2160 --frames 600 --depth 4 2>&1 | tail -1 | sed 's/^/depth 4: /' | tee -a "$OUT/bench_engine.txt"
build-device/vfpipe-bench-engine --sizes 3840x2160 --frames 600 --format yuv420p 2>&1 | tail -1 | sed 's/^/yuv420p: /' | tee -a "$OUT/bench_engine.txt"
build-device/vfpipe-bench-engine --sizes 1920x1080,3840x2160 --frames 1200 --depth 3 --completion hostfunc \
  --json "$OUT/bench_engine_hostfunc.json" 2>&1 | tail -2 | sed 's/^/hostfunc: /' | tee -a "$OUT/bench_engine.txt"

fi
CHAIN="median=radius=2,conv=gauss:size=5,wavelet=db4:levels=3"
# p50/p99 of a run's end-to-end latency and of its work (sum of step times), from --report.
lat_line() {
  python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
fr = r["frames"][r["warmup"] if r.get("warmup_applied", True) else 0:]
e2e = sorted((f["output_ns"] - f["capture_ns"]) / 1e6 for f in fr)
work = sorted(sum(f["step_ms"]) for f in fr)
q = lambda v, p: v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
print("%-34s frames %4d dropped %3d  end-to-end p50 %7.3f p99 %7.3f ms   work p50 %7.3f p99 %7.3f ms" %
      (sys.argv[2], len(fr), r["dropped"], q(e2e, 50), q(e2e, 99), q(work, 50), q(work, 99)))
# Where the rest goes: capture -> submit (input queue), submit -> done (launch + GPU work +
# completion), done -> output (output queue + sink), and each step's p50/p99.
for a, b in (("capture_ns", "submit_ns"), ("submit_ns", "done_ns"), ("done_ns", "output_ns")):
    v = sorted((f[b] - f[a]) / 1e6 for f in fr)
    print("    %-22s p50 %7.3f p99 %7.3f max %7.3f ms" % (a[:-3] + "->" + b[:-3], q(v, 50), q(v, 99), v[-1]))
for i, name in enumerate(r["steps_ms"]):
    v = sorted(f["step_ms"][i] for f in fr)
    print("    %-22s p50 %7.3f p99 %7.3f max %7.3f ms" % (name["name"][:22], q(v, 50), q(v, 99), v[-1]))
PY
}
if want latency; then
  log "latency: paced 60 fps source, 3-stage chain, live policy (first 60 frames left out)"
  for size in 1920x1080 3840x2160; do
    for comp in event hostfunc; do
      build-device/vfpipe run -q -i "synthetic=size=$size:rate=60:realtime=1:frames=660" -f "$CHAIN" --policy live \
        --device cuda --completion $comp --warmup 60 --report "$OUT/latency_${size}_$comp.json" --report-frames
      lat_line "$OUT/latency_${size}_$comp.json" "cuda $size $comp" | tee -a "$OUT/latency.txt"
    done
  done
  for t in 16 1; do
    build-device/vfpipe --threads $t run -q -i "synthetic=size=1920x1080:rate=5:realtime=1:frames=40" -f "$CHAIN" \
      --policy live --device cpu --warmup 5 --report "$OUT/latency_cpu_t$t.json" --report-frames
    lat_line "$OUT/latency_cpu_t$t.json" "cpu 1920x1080 5 fps, $t threads" | tee -a "$OUT/latency.txt"
  done
fi
if want cpu; then
  log "CPU backend scaling: the 3-stage chain at 1080p (pre-rendered source, null sink)"
  for t in 1 2 4 8 16; do
    n=60; r=3; [ $t -le 2 ] && { n=16; r=1; }
    build-device/vfpipe-bench-engine --device cpu --threads $t --sizes 1920x1080,3840x2160 --format yuv420p \
      --filters "$CHAIN" --frames $n --repeat $r --json "$OUT/bench_cpu_t$t.json" 2>&1 | tail -2 | sed "s/^/threads $t: /" |
      tee -a "$OUT/bench_cpu.txt"
  done
fi
if want cpuframes; then
  # The other way to use every core: whole frames in parallel, one single-threaded pipeline
  # per core. Its aggregate throughput is the ceiling of frame-level parallelism; each
  # frame still takes one thread's time (latency).
  log "CPU: 16 single-threaded pipelines at once (frame-level parallelism ceiling)"
  for i in $(seq 1 16); do
    build-device/vfpipe-bench-engine --device cpu --threads 1 --sizes 1920x1080 --format yuv420p \
      --filters "$CHAIN" --frames 24 --repeat 1 --json "$OUT/cpuframes_$i.json" > /dev/null 2>&1 &
  done
  wait
  python3 - "$OUT" <<'PY' | tee -a "$OUT/bench_cpu.txt"
import glob, json, sys
runs = [json.load(open(f))[0] for f in sorted(glob.glob(sys.argv[1] + "/cpuframes_*.json"))]
fps = [r["fps"] for r in runs]
lat = [s["p50_ms"] for r in runs for s in r["steps"]]
print("16 pipelines x 1 thread, 1080p: aggregate %.1f fps (each %.2f..%.2f); per frame %.0f ms of stage work" %
      (sum(fps), min(fps), max(fps), sum(lat) / len(runs)))
PY
fi
if want median; then
  log "median benchmark (vs NPP)"
  build-device/vfpipe-bench-median --json "$OUT/bench_median.json" 2>&1 | tee "$OUT/bench_median.txt"
  for content in random video; do
    build-device/vfpipe-bench-median --depth 16 --content $content --windows 3,5,7,9,11,21,51 \
      --json "$OUT/bench_median16_$content.json" 2>&1 | tee -a "$OUT/bench_median16.txt"
  done
  build-device/vfpipe-bench-median --content video --windows 3,5,7,9,11,21,51 --npp-max 0 2>&1 |
    tee -a "$OUT/bench_median16.txt"
fi
if want deep; then
  # The 3-stage chain on 10-bit video's frames (16-bit planes) against the same at 8 bits.
  log "16-bit frames: the 3-stage chain at 16 and 8 bits (pre-rendered source, null sink)"
  # The synthetic source makes 8-bit frames: a conversion on the GPU first, in both runs.
  for fmt in yuv420p16le yuv420p; do
    build-device/vfpipe-bench-engine --sizes 1920x1080,3840x2160 --format yuv420p --filters "format=$fmt,$CHAIN" \
      --frames 600 --depth 3 --json "$OUT/bench_deep_$fmt.json" 2>&1 | tee -a "$OUT/bench_deep.txt"
    # Each stage's GPU time a frame (the run's summary).
    build-device/vfpipe run -i "synthetic=size=3840x2160:frames=300" -f "format=$fmt,$CHAIN" --device cuda \
      -o null 2>&1 | tee -a "$OUT/bench_deep.txt"
  done
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

if want batch; then
  log "batch throughput: 24 1080p clips, 3-stage chain, --jobs-per-gpu 1..6 vs one run at a time"
  VFPIPE=build-device/vfpipe bash scripts/batch-bench.sh /tmp/vfpipe-batch-bench 24 1920x1080 60 2>&1 |
    tee "$OUT/bench_batch.txt"
  cp /tmp/vfpipe-batch-bench/batch-bench.json "$OUT/bench_batch.json" 2>/dev/null
  DEVICE=cpu JOBS="1 2 4" VFPIPE=build-device/vfpipe bash scripts/batch-bench.sh /tmp/vfpipe-batch-bench-cpu 12 640x360 30 \
    2>&1 | tee "$OUT/bench_batch_cpu.txt"
fi

if want multigpu; then
  log "batch over the machine's GPUs: 48 1080p H.264 clips on NVDEC, --gpus 0 against 0,1 (and all)"
  VFPIPE=build-device/vfpipe bash scripts/multi-gpu-bench.sh 48 3 2>&1 | tee "$OUT/bench_multigpu.txt"
  cp /tmp/vfpipe-multi-gpu-bench/multi-gpu-bench.json "$OUT/bench_multigpu.json" 2>/dev/null
fi

if want mmp; then
  log "MMP encoder: leaf search on the GPU against the CPU (same bytes checked), camera and the 1080p clip"
  DEVICES="${MMP_DEVICES:-cuda cpu}" SAME_BYTES=1 bash scripts/mmp-bench.sh build-device/vfpipe .bench-data 2>&1 |
    tee "$OUT/bench_mmp.txt"
  log "MMP search's critical path: a step's synchronisation by CUDA graph, cooperative kernel and flags"
  build-device/vfpipe-bench-mmp-sync --wide 132,176,264 2>&1 | tee "$OUT/bench_mmp_sync.txt"
fi

echo "tests rc=$rc_tests sanitizer rc=$rc_san racecheck rc=$rc_race"
[ $rc_tests -eq 0 ] && [ $rc_san -eq 0 ] && [ $rc_race -eq 0 ]
