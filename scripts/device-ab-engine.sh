#!/usr/bin/env bash
# Engine throughput, before against after, in one run on a GPU host: the pass-through
# benchmark of a baseline tree (.baseline/, e.g. `git archive <commit> | tar -x -C .baseline`
# and a .deps link) and of this tree, alternating, so that the shared machine's drift hits
# both. Needs build-device/ from scripts/device-test.sh.
#   device run --carry .deps .zk .baseline -- bash scripts/device-ab-engine.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
(cd .baseline && cmake --preset device > "$OUT/baseline-configure.log" 2>&1 &&
  cmake --build --preset device -j "$(nproc)" --target vfpipe-bench-engine > "$OUT/baseline-build.log" 2>&1) ||
  { tail -30 "$OUT/baseline-build.log"; exit 1; }
ROUNDS=${ROUNDS:-3}
for r in $(seq 1 "$ROUNDS"); do
  for side in baseline this; do
    bin=build-device/vfpipe-bench-engine
    [ $side = baseline ] && bin=.baseline/build-device/vfpipe-bench-engine
    $bin --sizes 1920x1080,3840x2160 --frames 1200 --repeat 3 --json "$OUT/ab_${side}_$r.json" 2>&1 | tail -2 |
      sed "s/^/round $r $side: /" | tee -a "$OUT/ab_engine.txt"
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, sys, statistics
out, rounds = sys.argv[1], int(sys.argv[2])
for size in ("1920x1080", "3840x2160"):
    for side in ("baseline", "this"):
        rows = [r for i in range(1, rounds + 1) for r in json.load(open(f"{out}/ab_{side}_{i}.json")) if r["size"] == size]
        fps = [r["fps"] for r in rows]; frac = [r["fraction_of_bound"] for r in rows]
        print("%-9s %-8s fps median %7.1f (%.1f..%.1f)  of bound median %5.1f%% (%.1f..%.1f)" % (size, side,
              statistics.median(fps), min(fps), max(fps), 100 * statistics.median(frac), 100 * min(frac), 100 * max(frac)))
PY
