#!/usr/bin/env bash
# Soak benchmark: a paced 1080p live chain for a long time, with RSS, GPU memory and the
# end-to-end latency percentiles sampled every 30 s (vfpipe run --stats-every). The run keeps
# the newest 1000 per-frame timing records (--profile-frames; 100000 by default, ~25 MB,
# which a 60 fps run fills in 28 minutes), so memory is at its bound after the first window.
# Passes when resident and GPU memory stay flat within 2% after the first window (warm-up) and no
# window's p99 latency is more than twice the median window's.
#   bash scripts/soak.sh MINUTES [cuda|cpu] [OUT_DIR]
#   (cuda: 1920x1080 at 60 fps; cpu: 1920x1080 at 10 fps, within the CPU backend's rate on
#   16 cores; RATE=N overrides)
set -uo pipefail
cd "$(dirname "$0")/.."
min=${1:?minutes}
dev=${2:-cuda}
out=${3:-soak-out}
mkdir -p "$out"
bin=${VFPIPE:-build/vfpipe}
[ -x "$bin" ] || bin=build-device/vfpipe
rate=${RATE:-60}
[ "$dev" = cpu ] && [ -z "${RATE:-}" ] && rate=10
frames=$(( min * 60 * rate ))
chain="median=radius=2,conv=gauss:size=5,wavelet=db4:levels=3"
log="$out/soak-$dev.log"
echo "soak: $min min, $dev, 1920x1080 at $rate fps, chain $chain"
"$bin" run -q -i "synthetic=size=1920x1080:rate=$rate:realtime=1:frames=$frames:noise=gauss" -f "$chain" \
  --policy live --device "$dev" --stats-every 30 --profile-frames 1000 -o null 2> "$log"
rc=$?
cat "$log"
python3 - "$log" "$out/soak-$dev.json" "$min" "$dev" <<'PY'
import json, re, statistics, sys
rows = []
for line in open(sys.argv[1]):
    if line.startswith("stats: "):
        rows.append({k: float(v.rstrip("s")) for k, v in re.findall(r"(\w+)=([0-9.]+s?)", line)})
full = [r for r in rows if r["frames"] > 0][:-1] or rows  # the last window is partial
if len(full) < 3:
    print("soak: too few windows"); sys.exit(1)
steady = full[1:]  # after warm-up
def spread(key):
    v = [r[key] for r in steady if key in r]
    return (max(v) - min(v)) / max(min(v), 1e-9) if v else 0.0, (min(v) if v else 0), (max(v) if v else 0)
rss = spread("rss_mb"); gpu = spread("gpu_mb")
p99 = [r["p99"] for r in steady]
med = statistics.median(p99)
ok = rss[0] <= 0.02 and gpu[0] <= 0.02 and max(p99) <= 2 * med
res = {"minutes": float(sys.argv[3]), "device": sys.argv[4], "windows": len(full),
       "rss_mb": {"min": rss[1], "max": rss[2], "spread": rss[0]},
       "gpu_mb": {"min": gpu[1], "max": gpu[2], "spread": gpu[0]},
       "p99_ms": {"median": med, "max": max(p99)}, "p50_ms_median": statistics.median(r["p50"] for r in steady),
       "dropped": sum(r["dropped"] for r in full), "flat": ok}
json.dump({"summary": res, "windows": rows}, open(sys.argv[2], "w"), indent=1)
print("soak %s: %d windows; RSS %.1f-%.1f MB (%.2f%%), GPU %.1f-%.1f MB (%.2f%%); p99 median %.3f ms, max %.3f ms; "
      "dropped %d: %s" % (sys.argv[4], len(full), rss[1], rss[2], 100 * rss[0], gpu[1], gpu[2], 100 * gpu[0], med,
                          max(p99), res["dropped"], "FLAT" if ok else "NOT FLAT"))
sys.exit(0 if ok else 1)
PY
prc=$?
[ $rc -ne 0 ] && echo "vfpipe exited with $rc"
exit $(( rc | prc ))
