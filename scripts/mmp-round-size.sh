#!/usr/bin/env bash
# On the GPU host: what a round of synchronized tiles costs the device by its number of
# blocks. `mmp encode --frames-in-flight 1` of the issue's clip with tiles of each size in
# TILES (a plane's round takes one block from each tile: 256 gives 40 blocks a round at
# 1080p, 128 gives 135, 64 gives 510), for each smallest unit in UNITS; prints the search's
# blocks a launch and a launch's graph time (alone on the GPU). The graph's growth per
# block, once the GPU is full, is the device time a block costs, which bounds the stage's
# rate whatever the latency.
#     bash scripts/device-carried.sh bash scripts/mmp-round-size.sh
# VFP (build-carry/vfpipe) the binary, FRAMES (2) frames of the clip, DATA (.bench-data) the
# folder with mosaic.npz, LAMBDA (25), BLOCKS (12240, a 1080p yuv420p frame's 16x16 blocks)
# for the bound printed after each unit's rows, ENC more `mmp encode` options (e.g. --modes 2).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
VFP=${VFP:-build-carry/vfpipe}
DATA=${DATA:-.bench-data}
FRAMES=${FRAMES:-2}
LAMBDA=${LAMBDA:-25}
TILES=${TILES:-256 128 64}
UNITS=${UNITS:-4 8}
. scripts/device-env.sh
nvidia-smi -L
$PY scripts/mmp-clip.py "$T/clip.y4m" --frames "$FRAMES" --mosaic "$DATA/mosaic.npz" > /dev/null
printf '%-6s %-5s %-12s %-14s %s\n' tile unit blocks/launch "graph us" "frame s"
for u in $UNITS; do
  prev_b='' prev_g='' last_b='' last_g=''
  for t in $TILES; do
    # shellcheck disable=SC2086
    "$VFP" mmp encode -y "$T/clip.y4m" -o "$T/x.mmp" --lambda "$LAMBDA" --tile "$t" --min-unit "$u" \
      --device cuda --frames-in-flight 1 ${ENC:-} > "$T/log" 2>&1 || { tail -3 "$T/log"; continue; }
    line=$(grep -m1 "search on cuda" "$T/log")
    each=$(sed -E 's/.*\(([0-9.]+) blocks each\).*/\1/' <<< "$line")
    graph=$(sed -E 's/.*: the graph ([0-9]+) us.*/\1/' <<< "$line")
    frame=$(grep -m1 -oE '[0-9.]+ s per frame' "$T/log" | cut -d' ' -f1)
    printf '%-6s %-5s %-12s %-14s %s\n' "$t" "$u" "$each" "$graph" "$frame"
    prev_b=$last_b prev_g=$last_g last_b=$each last_g=$graph
  done
  # The growth per block between the last two sizes (the GPU full by then), and the rate
  # that device time alone allows a frame of BLOCKS blocks (12 240: 1080p yuv420p, 16x16).
  [ -n "$prev_b" ] && awk -v b0="$prev_b" -v g0="$prev_g" -v b1="$last_b" -v g1="$last_g" -v n="${BLOCKS:-12240}" \
    -v u="$u" 'BEGIN { if (b1 + 0 > b0 + 0 && g1 + 0 > g0 + 0) { s = (g1 - g0) / (b1 - b0)
      printf "unit %s: %.2f us a block once the GPU is full; %.1f frames/s at most\n", u, s, 1e6 / (s * n) } }'
done
