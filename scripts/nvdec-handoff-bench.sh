#!/usr/bin/env bash
# NVDEC's frames handed to the GPU chain in GPU memory (-hwaccel_output_format cuda, the
# CUDA backend's default) against the copy to host memory and the upload back (host): the
# 1080p H.264 and the 4K H.264 / HEVC clips of .bench-data/, the null chain and the 3-stage
# chain, one stream each (vfpipe run to a null sink). The settings alternate ROUNDS times and
# the medians are compared; the rate is the run's own (first frame read to last frame out).
#   VFPIPE=build-device/vfpipe scripts/nvdec-handoff-bench.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
V=${VFPIPE:-build-device/vfpipe}
ROUNDS=${1:-3}
CHAIN3=median=radius=2,conv=gauss:size=5,wavelet=db4:levels=3
fps() {
  "$V" run -i "$1" -f "$2" -o null --hwaccel cuda -hwaccel_output_format "$3" --no-progress 2>&1 |
    grep -Eo '[0-9.]+ fps' | head -1 | cut -d' ' -f1
}
echo "| clip | chain | host memory (fps) | GPU memory (fps) | GPU / host |"
echo "|---|---|---:|---:|---:|"
for clip in .bench-data/h264_1080p_120f.mp4 .bench-data/h264_2160p_120f.mp4 .bench-data/hevc_2160p_120f.mkv; do
  for chain in null "$CHAIN3"; do
    host=() gpu=()
    for _ in $(seq 1 "$ROUNDS"); do
      host+=("$(fps "$clip" "$chain" host)")
      gpu+=("$(fps "$clip" "$chain" cuda)")
    done
    python3 - "$clip" "$chain" "${host[*]}" "${gpu[*]}" <<'PY'
import statistics, sys
clip, chain = sys.argv[1], sys.argv[2]
host, gpu = [float(x) for x in sys.argv[3].split()], [float(x) for x in sys.argv[4].split()]
h, g = statistics.median(host), statistics.median(gpu)
name = "null" if chain == "null" else "3-stage"
print(f"| {clip.split('/')[-1]} | {name} | {h:.1f} ({', '.join(f'{x:.1f}' for x in host)}) | "
      f"{g:.1f} ({', '.join(f'{x:.1f}' for x in gpu)}) | {g / h:.2f}x |")
PY
  done
done
