#!/usr/bin/env bash
# Batch throughput: N clips through a filter chain to null outputs with `vfpipe batch`,
# for several --jobs-per-gpu (or --jobs on the CPU), against one `vfpipe run` at a time
# over the same clips, all in one run. The clips are Y4M written first (no decoder in the
# way: this measures the pipelines, not a codec). Prints a table and writes DIR/batch-bench.json.
#
#   VFPIPE=build-device/vfpipe scripts/batch-bench.sh DIR [N] [WxH] [FRAMES]
#   DEVICE=cpu JOBS="1 2 4" scripts/batch-bench.sh /tmp/bb 8 1280x720 30
# CLIP=file.mp4 copies that clip N times instead (a decoder in the loop: NVDEC with
# EXTRA="--hwaccel cuda"); EXTRA adds options to every run; SKIP_SINGLE=1 leaves out the
# one-at-a-time baseline; CHAIN=null measures decoding alone; OUTPUT=mp4 writes real
# outputs (with EXTRA="-c:v libx264 -preset ultrafast", say). "cores busy" is the batch's
# CPU time over its wall time.
set -euo pipefail
V=${VFPIPE:-build/vfpipe}
DIR=${1:?usage: $0 DIR [N] [WxH] [FRAMES]}
N=${2:-24}
SIZE=${3:-1920x1080}
FRAMES=${4:-60}
DEVICE=${DEVICE:-cuda}
CHAIN=${CHAIN:-median=radius=2,conv=gauss:size=5,wavelet=db4:levels=3}
JOBS=${JOBS:-1 2 3 4 6}
EXTRA=${EXTRA:-}  # more batch options, e.g. --depth 2
mkdir -p "$DIR/clips"
for i in $(seq 0 $((N - 1))); do
  if [ -n "${CLIP:-}" ]; then  # a compressed clip (e.g. H.264 for NVDEC), copied N times
    f=$DIR/clips/clip$(printf %03d "$i").${CLIP##*.}
    [ -s "$f" ] || cp "$CLIP" "$f"
    continue
  fi
  f=$DIR/clips/clip$(printf %03d "$i").y4m
  [ -s "$f" ] || "$V" run -q --device cpu -i "synthetic=size=$SIZE:frames=$FRAMES:noise=gauss:sigma=8:seed=$i" -o "$f"
done
cat "$DIR"/clips/* >/dev/null  # into the page cache: every run reads from memory

results=()
# One `vfpipe run` at a time over the same clips (SKIP_SINGLE=1: not).
if [ "${SKIP_SINGLE:-0}" != 1 ]; then
  t0=$(date +%s.%N)
  for f in "$DIR"/clips/*; do "$V" run -q --device "$DEVICE" -i "$f" -f "$CHAIN" -o null $EXTRA; done
  t1=$(date +%s.%N)
  results+=("{\"mode\": \"run, one at a time\", \"jobs\": 1, \"seconds\": $(python3 -c "print($t1 - $t0)")}")
fi
for j in $JOBS; do
  rm -rf "$DIR/ledger-$j"
  opt=(--jobs-per-gpu "$j")
  [ "$DEVICE" = cpu ] && opt=(--jobs "$j")
  out=null
  if [ -n "${OUTPUT:-}" ]; then  # real outputs, e.g. OUTPUT=mp4 EXTRA="-c:v libx264 -preset ultrafast"
    rm -rf "$DIR/out-$j"
    out="$DIR/out-$j/{stem}.$OUTPUT"
  fi
  TIMEFORMAT='%R %U %S'
  { time "$V" batch "$DIR/clips" -f "$CHAIN" -o "$out" --device "$DEVICE" "${opt[@]}" --ledger-dir "$DIR/ledger-$j" \
    --progress none -q $EXTRA || { echo "batch with $j pipelines failed: $DIR/ledger-$j"; exit 1; }; } 2>"$DIR/time-$j"
  read -r wall user sys <"$DIR/time-$j"
  results+=("{\"mode\": \"batch\", \"jobs\": $j, \"seconds\": $wall, \"cpu_seconds\": $(python3 -c "print($user + $sys)")}")
done
printf '%s\n' "${results[@]}" >"$DIR/batch-bench.rows"
python3 - "$DIR" "$N" "$SIZE" "$FRAMES" "$DEVICE" "$CHAIN" <<'PY'
import json, sys
d, n, size, frames, device, chain = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
rows = [json.loads(l) for l in open(d + "/batch-bench.rows") if l.strip()]
total = n * frames
base = rows[0]["seconds"] if rows[0]["mode"].startswith("run") else None
import os
extra = os.environ.get("EXTRA", "")
src = os.environ.get("CLIP") or "Y4M"
print(f"{n} clips of {size} x {frames} frames ({src}), chain {chain}, device {device} {extra}")
print(f"{'mode':<22}{'pipelines':>10}{'wall s':>10}{'frames/s':>12}{'vs one run':>12}{'cores busy':>12}")
for r in rows:
    r["fps"] = total / r["seconds"]
    r["speedup"] = base / r["seconds"] if base else 0
    per = "per GPU" if device == "cuda" and r["mode"] == "batch" else ""
    busy = f"{r['cpu_seconds'] / r['seconds']:>12.1f}" if "cpu_seconds" in r else ""
    print(f"{r['mode']:<22}{r['jobs']:>6} {per:<4}{r['seconds']:>9.2f}{r['fps']:>12.0f}{r['speedup']:>11.2f}x{busy}")
json.dump({"clips": n, "size": size, "frames": frames, "device": device, "chain": chain, "rows": rows},
          open(d + "/batch-bench.json", "w"), indent=1)
PY
