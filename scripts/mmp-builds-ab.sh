#!/usr/bin/env bash
# On the GPU host: several builds of vfpipe (compile-time variants of the MMP search) measured
# in one call on the issue's stage command, runs interleaved so that a machine's drift hits
# every build alike, and each build's `mmp encode` bytes compared with the first's.
#     bash scripts/device-carried.sh bash scripts/mmp-builds-ab.sh build-carry/var/*.xz
# Each argument is a vfpipe binary, or one compressed with xz (unpacked next to the first
# argument's folder). RUNS (2) runs each; FRAMES (60) frames of the clip; DATA (.bench-data)
# holds mosaic.npz; OUT the results; FILTER (mmp=lambda=25:tile=256x256) the stage, ARGS more
# options of `vfpipe run` (e.g. `--depth 3`). Extra environment for every run goes in the caller's.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
DATA=${DATA:-.bench-data}
OUT=${OUT:-$PWD/device-out}
RUNS=${RUNS:-2}
FRAMES=${FRAMES:-60}
FILTER=${FILTER:-mmp=lambda=25:tile=256x256}
ARGS=${ARGS:-}
mkdir -p "$OUT"
. scripts/device-env.sh
nvidia-smi -L
bins=()
for b in "$@"; do
  if [[ $b == *.xz ]]; then
    u=$T/$(basename "${b%.xz}")
    xz -dc "$b" > "$u" && chmod +x "$u" || exit 1
    bins+=("$u")
  else
    bins+=("$b")
  fi
done
$PY scripts/mmp-clip.py "$T/clip.y4m" --frames "$FRAMES" --mosaic "$DATA/mosaic.npz" > /dev/null
$PY scripts/mmp-clip.py "$T/clip4.y4m" --frames 4 --mosaic "$DATA/mosaic.npz" > /dev/null
for ((i = 0; i < RUNS; ++i)); do
  for b in "${bins[@]}"; do
    # shellcheck disable=SC2086
    "$b" run -i "$T/clip.y4m" -f "$FILTER" $ARGS --device cuda -o null 2>&1 | grep -E 'frames in' |
      sed "s|^|$(basename "$b"): |"
  done
done
rc=0
for b in "${bins[@]}"; do
  n=$(basename "$b")
  "$b" mmp encode -y "$T/clip4.y4m" -o "$T/$n.mmp" --lambda 25 --tile 256 --device cuda 2>&1 |
    tee "$OUT/encode-$n.log" | tail -1 | sed "s|^|$n: |"
  if ! cmp -s "$T/$n.mmp" "$T/$(basename "${bins[0]}").mmp"; then
    echo "$n: DIFFERENT BYTES from $(basename "${bins[0]}")"
    rc=1
  fi
done
[ $rc -eq 0 ] && echo "same bytes from every build (4 frames of the clip)"
exit $rc
