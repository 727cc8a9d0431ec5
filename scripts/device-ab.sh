#!/usr/bin/env bash
# Before against after on a GPU host, in one run: a baseline tree (.baseline/: `git archive
# <commit> | tar -x -C .baseline`, with a copy of .deps/) and this tree are built, then their
# engine throughput (pass-through benchmark) and end-to-end latency (paced 60 fps source,
# 3-stage chain, live policy) are measured alternately, ROUNDS times, so that the shared
# machine's drift hits both sides. Results: $OUT/ab.txt. ENGINE=0 leaves out the throughput
# runs; FRAMES sets the paced runs' length (default 420).
#   device run --carry .deps .zk .baseline -- bash scripts/device-ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
if [ -d .zk/usr ]; then  # oneTBB, libdeflate (scripts/fetch-device-zkit.sh)
  export CMAKE_PREFIX_PATH=$PWD/.zk/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export LD_LIBRARY_PATH=$PWD/.zk/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
TARGETS=(vfpipe vfpipe-bench-engine ${EXTRA_TARGETS:-})
for side in . .baseline; do
  (cd $side && cmake --preset device > "$OUT/configure-${side#.}.log" 2>&1 &&
    cmake --build --preset device -j "$(nproc)" --target "${TARGETS[@]}" > "$OUT/build-${side#.}.log" 2>&1) ||
    { tail -30 "$OUT/build-${side#.}.log"; exit 1; }
done
CHAIN="median=radius=2,conv=gauss:size=5,wavelet=db4:levels=3"
ROUNDS=${ROUNDS:-3}
for r in $(seq 1 "$ROUNDS"); do
  for side in baseline this; do
    dir=.; [ $side = baseline ] && dir=.baseline
    [ "${ENGINE:-1}" = 1 ] && $dir/build-device/vfpipe-bench-engine --sizes 1920x1080,3840x2160 --frames 1200 \
      --repeat 3 --json "$OUT/engine_${side}_$r.json" > /dev/null 2>&1
    for size in 1920x1080 3840x2160; do
      $dir/build-device/vfpipe run -q -i "synthetic=size=$size:rate=60:realtime=1:frames=${FRAMES:-420}" -f "$CHAIN" \
        --policy live --device cuda --warmup 60 --report "$OUT/lat_${side}_${size}_$r.json" --report-frames
    done
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/ab.txt"
import json, os, sys, statistics as st
out, rounds = sys.argv[1], int(sys.argv[2])
q = lambda v, p: sorted(v)[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
for size in ("1920x1080", "3840x2160"):
    for side in ("baseline", "this"):
        if not os.path.exists(f"{out}/engine_{side}_1.json"): continue
        rows = [r for i in range(1, rounds + 1) for r in json.load(open(f"{out}/engine_{side}_{i}.json")) if r["size"] == size]
        fps = [r["fps"] for r in rows]; frac = [r["fraction_of_bound"] for r in rows]
        print("engine  %-9s %-8s fps median %7.1f (%.1f..%.1f)  of bound median %5.1f%% (%.1f..%.1f)" % (size, side,
              st.median(fps), min(fps), max(fps), 100 * st.median(frac), 100 * min(frac), 100 * max(frac)))
for size in ("1920x1080", "3840x2160"):
    for side in ("baseline", "this"):
        p50, p99, w99, late = [], [], [], []
        for i in range(1, rounds + 1):
            r = json.load(open(f"{out}/lat_{side}_{size}_{i}.json"))
            fr = r["frames"][r["warmup"] if r.get("warmup_applied", True) else 0:]
            e2e = [(f["output_ns"] - f["capture_ns"]) / 1e6 for f in fr]
            p50.append(q(e2e, 50)); p99.append(q(e2e, 99)); w99.append(q([sum(f["step_ms"]) for f in fr], 99))
            # Frames that waited more than 1 ms beyond their own work: the machine's jitter.
            late.append(sum(1 for f, e in zip(fr, e2e) if e > sum(f["step_ms"]) + 1.0) / len(fr))
        print("latency %-9s %-8s end-to-end p50 %s  p99 %s  work p99 %s ms; late > work+1ms %s (rounds)" % (size, side,
              " ".join("%.3f" % v for v in p50), " ".join("%.3f" % v for v in p99), " ".join("%.3f" % v for v in w99),
              " ".join("%.2f%%" % (100 * v) for v in late)))
PY
