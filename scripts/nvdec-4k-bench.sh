#!/usr/bin/env bash
# NVDEC at 4K: a 4K H.264 and a 4K HEVC clip through the 3-stage GPU chain to a null sink,
# against decoding alone (the null chain), both on NVDEC, in one run: the two alternate
# ROUNDS times and the medians are compared. The rate is the run's own (first frame read to
# last frame out: vfpipe's summary), so the process start is not in it.
#   VFPIPE=build-device/vfpipe scripts/nvdec-4k-bench.sh [ROUNDS]
# The clips (.bench-data/, made with ffmpeg here, see docs/perf.md) are carried to the device.
set -euo pipefail
cd "$(dirname "$0")/.."
V=${VFPIPE:-build-device/vfpipe}
ROUNDS=${1:-3}
CHAIN=median=radius=2,conv=gauss:size=5,wavelet=db4:levels=3
fps() { "$V" run -i "$1" -f "$2" -o null --hwaccel cuda --no-progress 2>&1 | grep -Eo '[0-9.]+ fps' | head -1 | cut -d' ' -f1; }
for clip in .bench-data/h264_2160p_120f.mp4 .bench-data/hevc_2160p_120f.mkv; do
  dec=() chain=()
  for _ in $(seq 1 "$ROUNDS"); do
    dec+=("$(fps "$clip" null)")
    chain+=("$(fps "$clip" "$CHAIN")")
  done
  python3 - "$clip" "${dec[*]}" "${chain[*]}" <<'PY'
import statistics, sys
clip, dec, chain = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
d, c = statistics.median(dec), statistics.median(chain)
print(f"{clip}: NVDEC decoding alone {d:.1f} fps (runs {dec}), 3-stage chain {c:.1f} fps (runs {chain}): {100 * c / d:.1f}%")
PY
done
