#!/usr/bin/env bash
# CPU speed of the MMP encoder and decoder, untiled and in tiles, on this machine's cores:
# scikit-image's camera (512x512 gray) and one frame of the 1080p test clip
# (scripts/mmp-clip.py), with the default settings (--modes 4, --block 16, post-filter on).
#     scripts/mmp-bench.sh [VFPIPE] [DATA_DIR]
# DATA_DIR holds camera.y4m and mosaic.npz (scripts/mmp-bench.sh --prepare DIR makes them,
# with scikit-image); a machine without scikit-image only needs numpy for the clip.
# LAMBDA (60), TILES ("128 64"), FRAMES (1), UNTILED_1080P=1 (slow), SKIP_UNTILED=1,
# SKIP_ONE_THREAD=1 and SKIP_CLIP=1 tune the run; DEVICES ("cpu"; "cpu cuda" on a GPU host)
# says where the encoder's leaf search runs (`mmp encode --device`), each in turn, and
# SAME_BYTES=1 checks that every device wrote the same file.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --prepare ]; then
  mkdir -p "$2"
  /usr/bin/python3 - "$2" <<'PY'
import sys
from skimage import data
d = sys.argv[1]
with open(d + "/camera.y4m", "wb") as f:
    f.write(b"YUV4MPEG2 W512 H512 F25:1 Ip A1:1 Cmono\nFRAME\n" + data.camera().tobytes())
PY
  /usr/bin/python3 scripts/mmp-clip.py --save-mosaic "$2/mosaic.npz"
  exit 0
fi
VFP=${1:-build/vfpipe}
DATA=${2:-.bench-data}
LAMBDA=${LAMBDA:-60}
TILES=${TILES:-128 64}
FRAMES=${FRAMES:-1}
. scripts/device-env.sh
$PY scripts/mmp-clip.py "$T/clip.y4m" --frames "$FRAMES" --mosaic "$DATA/mosaic.npz"
echo "cores: $(nproc)   lambda $LAMBDA   $(date -u +%F)"
DEVICES=${DEVICES:-cpu}
printf '%-34s %-7s %-12s %8s %8s %10s %10s\n' input search tiling bpp PSNR encode_s decode_s
bench() {  # bench NAME INPUT THREADS TILE-ARGS...
  local name=$1 in=$2 threads=$3
  shift 3
  local dev
  for dev in $DEVICES; do bench_on "$dev" "$name" "$in" "$threads" "$@"; done
}
bench_on() {  # bench_on DEVICE NAME INPUT THREADS TILE-ARGS...
  local dev=$1 name=$2 in=$3 threads=$4
  shift 4
  local t0 t1 t2 line
  t0=$(date +%s%N)
  line=$("$VFP" mmp encode -y "$in" -o "$T/o.mmp" --lambda "$LAMBDA" --threads "$threads" --device "$dev" "$@" 2>&1 |
    tail -1)
  t1=$(date +%s%N)
  "$VFP" mmp decode -y "$T/o.mmp" -o "$T/o.y4m" --threads "$threads" > /dev/null 2>&1
  t2=$(date +%s%N)
  local bpp psnr
  bpp=$(sed -E 's/.*: ([0-9.]+) bpp.*/\1/' <<< "$line")
  psnr=$(sed -E 's/.*PSNR ([0-9.]+) dB.*/\1/' <<< "$line")
  if [ "${SAME_BYTES:-0}" = 1 ]; then
    if [ "$dev" = "${DEVICES%% *}" ]; then cp "$T/o.mmp" "$T/first.mmp"; elif ! cmp -s "$T/o.mmp" "$T/first.mmp"; then
      echo "DIFFERENT BYTES: $name $* on $dev" >&2
      exit 1
    fi
  fi
  printf '%-34s %-7s %-12s %8s %8s %6d.%03d %6d.%03d\n' "$name ($threads threads)" "$dev" "${*:-untiled}" "$bpp" "$psnr" \
    $(((t1 - t0) / 1000000000)) $(((t1 - t0) / 1000000 % 1000)) $(((t2 - t1) / 1000000000)) $(((t2 - t1) / 1000000 % 1000))
}
N=$(nproc)
[ "${SKIP_UNTILED:-0}" = 1 ] || bench "camera 512x512" "$DATA/camera.y4m" 1
for t in $TILES; do
  [ "${SKIP_ONE_THREAD:-0}" = 1 ] || bench "camera 512x512" "$DATA/camera.y4m" 1 --tile "$t"
  bench "camera 512x512" "$DATA/camera.y4m" "$N" --tile "$t"
done
[ "${SKIP_CLIP:-0}" = 1 ] || for t in $TILES; do
  bench "clip 1920x1080 x$FRAMES" "$T/clip.y4m" "$N" --tile "$t"
done
if [ "${UNTILED_1080P:-0}" = 1 ]; then bench "clip 1920x1080 x$FRAMES" "$T/clip.y4m" "$N"; fi
