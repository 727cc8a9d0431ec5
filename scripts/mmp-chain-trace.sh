#!/usr/bin/env bash
# On the GPU host: where a round's graph spends its time, alone and with frames in flight.
# Traces the kernels (scripts/kernel-trace/, built here against the device's CUPTI) of
# `mmp encode --frames-in-flight 1` on 6 frames of the issue's clip and of the stage on 24
# frames (8 in flight), then for each configuration given, and prints
# scripts/kernel-trace/chain_gaps.py's summary of each.
#     bash scripts/device-carried.sh bash scripts/mmp-chain-trace.sh ['LABEL|VAR=V,...' ...]
# VFP (build-carry/vfpipe) the binary, DATA (.bench-data) the folder with mosaic.npz, OUT
# the results (each trace's summaries). API=1 also traces the runtime calls (the graph
# launch call's end to the graph's start; the tracer slows the calls). FILTER
# (mmp=lambda=25:tile=256x256) is the stage's filter, ENCODE (empty) more options of the
# `mmp encode` run (e.g. `--dict 64 --modes 1` to match a FILTER with dict=64:modes=1), TILES
# (--tile 256) its tiling (e.g. `--tile 512 --tile-scan wavefront`).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
VFP=${VFP:-build-carry/vfpipe}
FILTER=${FILTER:-mmp=lambda=25:tile=256x256}
ENCODE=${ENCODE:-}
TILES=${TILES:---tile 256}
DATA=${DATA:-.bench-data}
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
. scripts/device-env.sh
build_kernel_tracer || exit 1
$PY scripts/mmp-clip.py "$T/clip6.y4m" --frames 6 --mosaic "$DATA/mosaic.npz" > /dev/null
$PY scripts/mmp-clip.py "$T/clip24.y4m" --frames 24 --mosaic "$DATA/mosaic.npz" > /dev/null
traced() {  # traced LABEL ENVS COMMAND...: runs it traced, prints the summaries
  local label=$1 ev
  mapfile -t ev < <(envs_of "$2")
  shift 2
  env "${ev[@]}" KERNEL_TRACE_COPIES=1 KERNEL_TRACE_API="${API:-0}" KERNEL_TRACE_OUT="$T/$label.csv" \
    CUDA_INJECTION64_PATH="$T/libkernel_trace.so" LD_LIBRARY_PATH="$TRACE_LIBS:${LD_LIBRARY_PATH:-}" "$@" 2>&1 |
    grep -E 'frames in|[0-9] s per frame' | head -1 | sed "s/^/$label: /"
  $PY scripts/kernel-trace/chain_gaps.py "$T/$label.csv" | tee "$OUT/$label-chain.txt"
  $PY scripts/kernel-trace/kernel_trace.py "$T/$label.csv" > "$OUT/$label-kernels.txt" 2>&1
  head -3 "$OUT/$label-kernels.txt"
  rm -f "$T/$label.csv"
}
# shellcheck disable=SC2086
traced alone "" "$VFP" mmp encode -y "$T/clip6.y4m" -o "$T/a.mmp" --lambda 25 $TILES --device cuda \
  --frames-in-flight 1 $ENCODE
traced stage "" "$VFP" run -i "$T/clip24.y4m" -f "$FILTER" --device cuda -o null
for c in "$@"; do
  IFS='|' read -r label envs <<< "$c"
  traced "stage-$label" "$envs" "$VFP" run -i "$T/clip24.y4m" -f "$FILTER" --device cuda -o null
done
