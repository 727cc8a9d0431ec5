#!/usr/bin/env bash
# vfpipe batch over several GPUs: N copies of a 1080p H.264 clip, decoded on NVDEC, through
# the 3-stage chain to null outputs, with --gpus 0, --gpus 0,1 and (on a machine with more)
# every GPU, alternated REPEAT times. Prints aggregate frames/s, each GPU's SM and decoder
# utilisation while the batch ran (nvidia-smi dmon, one sample a second), the host's cores
# busy, and the scaling efficiency fps(G) / (G x fps(1)). Writes DIR/multi-gpu-bench.json.
#
#   scripts/multi-gpu-bench.sh --prepare        # here, once: the clip, with ffmpeg and libx264
#   VFPIPE=build-device/vfpipe scripts/multi-gpu-bench.sh [N] [REPEAT] [DIR]
# CLIP (.bench-data/h264_1080p_120f.mp4), CHAIN (the 3-stage chain), JOBS (--jobs-per-gpu, 4)
# and EXTRA (more batch options) tune the run. MAKE_FRAMES=N makes a longer clip instead, with
# vfpipe itself (its synthetic scene with noise, libx264 veryfast CRF 26, GOP 50: a vfpipe
# built with libx264, as on the GPU host with scripts/build-device-ffmpeg.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
CLIP=${CLIP:-.bench-data/h264_1080p_120f.mp4}
if [ "${1:-}" = --prepare ]; then
  # ffmpeg's testsrc2 with temporal noise (so that every frame costs the decoder), 1080p30,
  # 120 frames, libx264 medium CRF 23, GOP 50: about 5 MB, like the clip of the one-GPU NVDEC runs in docs/perf.md.
  mkdir -p "$(dirname "$CLIP")"
  ffmpeg -v error -y -f lavfi -i testsrc2=size=1920x1080:rate=30 -vf noise=alls=6:allf=t -frames:v 120 \
    -c:v libx264 -preset medium -crf 23 -g 50 -pix_fmt yuv420p "$CLIP"
  ls -l "$CLIP"
  exit 0
fi
V=${VFPIPE:-build-device/vfpipe}
N=${1:-48}
REPEAT=${2:-2}
DIR=${3:-/tmp/vfpipe-multi-gpu-bench}
CHAIN=${CHAIN:-median=radius=2,conv=gauss:size=5,wavelet=db4:levels=3}
JOBS=${JOBS:-4}
EXTRA=${EXTRA:-}
if [ -n "${MAKE_FRAMES:-}" ]; then
  CLIP=$DIR/made_1080p_${MAKE_FRAMES}f.mp4
  mkdir -p "$DIR"
  [ -s "$CLIP" ] || "$V" run -q --device cpu -i "synthetic=size=1920x1080:rate=30:frames=$MAKE_FRAMES:noise=gauss:sigma=2:seed=1" \
    -c:v libx264 -preset veryfast -crf 26 -g 50 -o "$CLIP"
  DIR=$DIR/$MAKE_FRAMES
fi
[ -s "$CLIP" ] || { echo "no clip $CLIP: run $0 --prepare where ffmpeg is" >&2; exit 1; }
GPUS=$(nvidia-smi -L | grep -c "^GPU")
mkdir -p "$DIR/clips"
for i in $(seq 0 $((N - 1))); do
  f=$DIR/clips/clip$(printf %03d "$i").${CLIP##*.}
  [ -s "$f" ] || ln -f "$CLIP" "$f" 2>/dev/null || cp "$CLIP" "$f"
done
cat "$DIR"/clips/* > /dev/null  # into the page cache
"$V" run -q -i "$CLIP" -o null --device cpu --report "$DIR/probe.json" > /dev/null 2>&1 ||
  { echo "cannot read $CLIP" >&2; exit 1; }
frames=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['frames_out'])" "$DIR/probe.json")
spec=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['input']['spec'])" "$DIR/probe.json")
configs=("0")
[ "$GPUS" -ge 2 ] && configs+=("0,1")
[ "$GPUS" -gt 2 ] && configs+=("all")
: > "$DIR/rows.jsonl"
for r in $(seq 1 "$REPEAT"); do
  for g in "${configs[@]}"; do
    rm -rf "$DIR/ledger"
    nvidia-smi dmon -s u -d 1 > "$DIR/dmon.txt" 2>&1 &
    dmon=$!
    sleep 1.5  # dmon's first sample is before the run
    TIMEFORMAT='%R %U %S'
    { time "$V" batch "$DIR/clips" -f "$CHAIN" -o null --device cuda --hwaccel cuda --gpus "$g" \
      --jobs-per-gpu "$JOBS" --ledger-dir "$DIR/ledger" --progress none -q $EXTRA ||
      { echo "batch --gpus $g failed: $DIR/ledger" >&2; kill $dmon; exit 1; }; } 2> "$DIR/time.txt"
    kill $dmon 2> /dev/null || true
    wait $dmon 2> /dev/null || true
    read -r wall user sys < "$DIR/time.txt"
    python3 - "$DIR" "$g" "$wall" "$user" "$sys" "$N" "$frames" "$r" <<'PY' >> "$DIR/rows.jsonl"
import json, sys
d, g, wall, user, sys_s, n, frames, rep = sys.argv[1:]
wall, user, sys_s = float(wall), float(user), float(sys_s)
# dmon: "# gpu sm mem enc dec ..." then one line per GPU per second; the run's samples are
# those after the first second (started 1.5 s before the batch).
cols, util = None, {}
for line in open(d + "/dmon.txt"):
    if line.startswith("# gpu"):
        cols = line[1:].split()
        continue
    if line.startswith("#") or not cols:
        continue
    v = line.split()
    if len(v) != len(cols):
        continue
    row = dict(zip(cols, v))
    util.setdefault(row["gpu"], []).append(row)
per_gpu = {}
for gpu, rows in util.items():
    rows = rows[1:]  # the sample before the batch started
    def mean(k):
        vals = [float(r[k]) for r in rows if r.get(k, "-") not in ("-", "")]
        return round(sum(vals) / len(vals), 1) if vals else None
    per_gpu[gpu] = {"sm_pct": mean("sm"), "dec_pct": mean("dec"), "samples": len(rows)}
# Each item's time on its lane (the ledger): opening, the engine (its setup, the frames,
# draining) and closing (the chain and output, then the input and its decoder), against
# the frames alone.
items = [json.loads(l) for l in open(d + "/ledger/vfpipe-batch.jsonl") if l.strip()]
mean = lambda v: round(sum(v) / len(v), 4) if v else None
det = [r.get("details", {}) for r in items]
item = {"frames_s": mean([r["seconds"] for r in items]), "lane_s": mean([r.get("lane_seconds", 0) for r in items]),
        "open_s": mean([x.get("open_s", 0) for x in det]), "run_s": mean([x.get("run_s", 0) for x in det]),
        "close_output_s": mean([x.get("close_output_s", 0) for x in det]),
        "close_input_s": mean([x.get("close_input_s", 0) for x in det]),
        "engine_start_s": mean([x.get("engine_start_s", 0) for x in det]),
        "engine_finish_s": mean([x.get("engine_finish_s", 0) for x in det]),
        "decoders": {k: sum(1 for x in det if x.get("decoder") == k) for k in sorted({x.get("decoder", "") for x in det})}}
# The process's timeline: its setup before the lanes (of which the GPUs' preparation), the
# items from the first start to the last end, and what is left (loading, the last items'
# wait for the batch's end, exit).
rep_json = json.load(open(d + "/ledger/vfpipe-batch.report.json"))
starts = [r["start_s"] for r in items if "start_s" in r]
ends = [r["start_s"] + r.get("lane_seconds", 0) for r in items if "start_s" in r]
timeline = {"setup_s": rep_json.get("setup_s"), "gpu_prepare_s": rep_json.get("gpu_prepare_s"),
            "batch_s": rep_json.get("wall_seconds"),
            "first_item_s": round(min(starts), 3) if starts else None,
            "items_end_s": round(max(ends), 3) if ends else None}
if timeline["setup_s"] is not None and timeline["batch_s"] is not None:
    timeline["outside_s"] = round(wall - timeline["setup_s"] - timeline["batch_s"], 3)
print(json.dumps({"gpus": g, "repeat": int(rep), "seconds": wall, "cpu_seconds": user + sys_s, "sys_seconds": sys_s,
                  "fps": int(n) * int(frames) / wall, "per_gpu": per_gpu, "item_mean": item,
                  "timeline": timeline}))
PY
    tail -1 "$DIR/rows.jsonl"
  done
done
python3 - "$DIR" "$N" "$frames" "$CHAIN" "$JOBS" "$GPUS" "$(basename "$CLIP") ($spec)" <<'PY'
import json, os, statistics, sys
d, n, frames, chain, jobs, gpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
clip = sys.argv[7]
rows = [json.loads(l) for l in open(d + "/rows.jsonl") if l.strip()]
count = lambda g: gpus if g == "all" else len(g.split(","))
print(f"{n} copies of {clip} x {frames} frames, NVDEC, chain {chain}, -o null, "
      f"--jobs-per-gpu {jobs}, {gpus} GPUs, {os.cpu_count()} cores")
print(f"{'--gpus':<8}{'frames/s (median; runs)':<34}{'efficiency':>11}{'cores busy':>12}{'sys':>6}"
      f"  item: frames / lane s  per GPU: SM % / NVDEC %")
base = None
summary = []
for g in dict.fromkeys(r["gpus"] for r in rows):
    rs = [r for r in rows if r["gpus"] == g]
    fps = statistics.median(r["fps"] for r in rs)
    if base is None:
        base = fps
    eff = fps / (count(g) * base)
    busy = statistics.median(r["cpu_seconds"] / r["seconds"] for r in rs)
    last = rs[-1]["per_gpu"]
    util = ", ".join(f"{k}: {v['sm_pct']}/{v['dec_pct']}" for k, v in sorted(last.items())
                     if g == "all" or k in g.split(","))
    runs = ", ".join(f"{r['fps']:.0f}" for r in rs)
    sys_busy = statistics.median(r["sys_seconds"] / r["seconds"] for r in rs)
    it = rs[-1]["item_mean"]
    print(f"{g:<8}{fps:>8.0f} ({runs}){'':<{max(0, 24 - len(runs))}}{eff:>11.2f}{busy:>12.1f}{sys_busy:>6.1f}"
          f"  {it['frames_s']:.3f} / {it['lane_s']:.3f}  {util}")
    summary.append({"gpus": g, "fps_median": fps, "efficiency": eff, "cores_busy": busy, "sys_cores_busy": sys_busy,
                    "item_mean": it})
json.dump({"clips": n, "clip": clip, "frames": frames, "chain": chain, "jobs_per_gpu": jobs, "machine_gpus": gpus,
           "rows": rows, "summary": summary}, open(d + "/multi-gpu-bench.json", "w"), indent=1)
PY
