#!/usr/bin/env bash
# vfpipe's video path against ffmpeg's on the same machine: a 1080p H.264 clip decoded and
# re-encoded with libx264 at the same preset and CRF, with no filter (vfpipe: the null chain,
# CPU backend; ffmpeg: -vf null). Both are run alternately ROUNDS times; the median wall
# times and their ratio are printed. Needs ffmpeg and a vfpipe build with FFmpeg's libraries.
#     bash scripts/video-vs-ffmpeg.sh [build/vfpipe]     PRESET=veryfast CRF=23 SECONDS_=10 ROUNDS=3
set -euo pipefail
VFP=$(realpath "${1:-build/vfpipe}")
PRESET=${PRESET:-veryfast} CRF=${CRF:-23} SECS=${SECONDS_:-10} ROUNDS=${ROUNDS:-3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ffmpeg -v error -f lavfi -i "testsrc2=size=1920x1080:rate=25:duration=$SECS" -f lavfi -i "sine=duration=$SECS" \
  -c:v libx264 -preset medium -crf 20 -pix_fmt yuv420p -c:a aac "$T/in.mp4"
time_of() { local s e; s=$(date +%s.%N); "$@" > /dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }
ff=() vf=()
for r in $(seq 1 "$ROUNDS"); do
  ff+=("$(time_of ffmpeg -v error -y -i "$T/in.mp4" -vf null -c:v libx264 -preset "$PRESET" -crf "$CRF" -c:a copy "$T/ff.mp4")")
  vf+=("$(time_of "$VFP" run -q -y --device cpu -i "$T/in.mp4" -f null -c:v libx264 -preset "$PRESET" -crf "$CRF" -o "$T/vf.mp4")")
done
python3 - "$SECS" "${ff[*]}" "${vf[*]}" "$PRESET" "$CRF" "$(nproc)" <<'PY'
import statistics, sys
secs, ff, vf, preset, crf, cores = sys.argv[1:7]
ff = [float(x) for x in ff.split()]; vf = [float(x) for x in vf.split()]
n = int(secs) * 25
mf, mv = statistics.median(ff), statistics.median(vf)
print("1080p25 H.264 -> libx264 -preset %s -crf %s, %d frames, %s cores" % (preset, crf, n, cores))
print("  ffmpeg -vf null   median %.2f s (%.1f fps)  runs %s" % (mf, n / mf, " ".join("%.2f" % x for x in ff)))
print("  vfpipe -f null    median %.2f s (%.1f fps)  runs %s" % (mv, n / mv, " ".join("%.2f" % x for x in vf)))
print("  vfpipe / ffmpeg time: %.3f" % (mv / mf))
PY
