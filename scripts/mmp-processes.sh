#!/usr/bin/env bash
# On the GPU host: the mmp stage in PROCS (2) vfpipe processes at once on one GPU, each on
# the issue's clip, against one process alone: the frames a second all of them manage
# together. More together than alone means something one process shares among its frames
# in flight (its CUDA context, the search's lock, its CPU pool) bounds the stage, not the
# GPU or the machine's cores.
#     bash scripts/device-carried.sh bash scripts/mmp-processes.sh
# VFP (build-carry/vfpipe) the binary, FRAMES (60) frames of the clip, DATA (.bench-data)
# the folder with mosaic.npz, FILTER (mmp=lambda=25:tile=256x256) the stage, ARGS more
# options of `vfpipe run` for every process (e.g. `--threads 4`). MPS=1 runs every process
# (the one alone too) as a client of an MPS server started here and stopped at the end, so
# that the processes' kernels share the GPU at once instead of taking turns.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
VFP=${VFP:-build-carry/vfpipe}
DATA=${DATA:-.bench-data}
FRAMES=${FRAMES:-60}
PROCS=${PROCS:-2}
FILTER=${FILTER:-mmp=lambda=25:tile=256x256}
ARGS=${ARGS:-}
. scripts/device-env.sh
nvidia-smi -L
if [ "${MPS:-0}" = 1 ]; then
  export CUDA_MPS_PIPE_DIRECTORY=$T/mps-pipe CUDA_MPS_LOG_DIRECTORY=$T/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "cannot start MPS (nvidia-cuda-mps-control)" >&2; exit 1; }
  trap 'echo quit | nvidia-cuda-mps-control; sleep 1; rm -rf "$T"' EXIT
  echo "under MPS"
fi
$PY scripts/mmp-clip.py "$T/clip.y4m" --frames "$FRAMES" --mosaic "$DATA/mosaic.npz" > /dev/null
run() {  # $1: a log; the stage on the clip
  # shellcheck disable=SC2086
  "$VFP" run -i "$T/clip.y4m" -f "$FILTER" $ARGS --device cuda -o null > "$1" 2>&1
}
run "$T/alone.log"
echo "alone: $(grep -m1 'frames in' "$T/alone.log")"
start=$(date +%s.%N)
for ((i = 0; i < PROCS; ++i)); do run "$T/p$i.log" & done
wait
end=$(date +%s.%N)
for ((i = 0; i < PROCS; ++i)); do echo "process $i: $(grep -m1 'frames in' "$T/p$i.log")"; done
awk -v s="$start" -v e="$end" -v n="$FRAMES" -v p="$PROCS" \
  'BEGIN { printf "%d processes together: %d frames in %.2f s: %.1f frames/s\n", p, n * p, e - s, n * p / (e - s) }'
