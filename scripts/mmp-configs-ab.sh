#!/usr/bin/env bash
# On the GPU host: run-time configurations of the mmp stage (environment switches and
# options of `vfpipe run`) measured in one call with one binary, runs interleaved so that a
# machine's drift hits every configuration alike, with each run's user and system CPU
# time; then each configuration's `mmp encode` bytes compared with the first's of equal OPTS.
#     bash scripts/device-carried.sh bash scripts/mmp-configs-ab.sh 'base||' \
#       'together|VFP_MMP_STAGGER=0|' 't12||--threads 12'
# Each argument is LABEL|ENV|ARGS[|OPTS|ENC]: ENV a comma-separated list of VAR=VALUE (may
# be empty), ARGS options of `vfpipe run` (split on spaces), OPTS options appended to the
# stage's (e.g. learn_lag=1) and ENC the same for `mmp encode` (e.g. --learn-lag); the bytes
# are compared among configurations of equal OPTS. VFP (build-carry/vfpipe) the binary,
# RUNS (2) runs each, FRAMES (60) frames of the issue's clip, DATA (.bench-data) the folder
# with mosaic.npz, OUT the results, FILTER (mmp=lambda=25:tile=256x256) the stage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
VFP=${VFP:-build-carry/vfpipe}
DATA=${DATA:-.bench-data}
OUT=${OUT:-$PWD/device-out}
RUNS=${RUNS:-2}
FRAMES=${FRAMES:-60}
FILTER=${FILTER:-mmp=lambda=25:tile=256x256}
mkdir -p "$OUT"
. scripts/device-env.sh
nvidia-smi -L
$PY scripts/mmp-clip.py "$T/clip.y4m" --frames "$FRAMES" --mosaic "$DATA/mosaic.npz" > /dev/null
$PY scripts/mmp-clip.py "$T/clip4.y4m" --frames 4 --mosaic "$DATA/mosaic.npz" > /dev/null
TIMEFORMAT='user %U s, sys %S s'
for ((i = 0; i < RUNS; ++i)); do
  for c in "$@"; do
    IFS='|' read -r label envs args opts enc <<< "$c"
    mapfile -t ev < <(envs_of "$envs")
    # shellcheck disable=SC2086
    { time env "${ev[@]}" "$VFP" run -i "$T/clip.y4m" $args -f "$FILTER${opts:+:$opts}" --device cuda -o null \
      > "$OUT/run-$label-$i.log" 2>&1; } 2> "$T/time"
    echo "$label: $(grep -E 'frames in' "$OUT/run-$label-$i.log" | head -1) ($(cat "$T/time"))"
  done
done
rc=0
declare -A first
for c in "$@"; do
  IFS='|' read -r label envs args opts enc <<< "$c"
  mapfile -t ev < <(envs_of "$envs")
  # shellcheck disable=SC2086
  env "${ev[@]}" "$VFP" mmp encode -y "$T/clip4.y4m" -o "$T/$label.mmp" --lambda 25 --tile 256 --device cuda $enc \
    > "$OUT/encode-$label.log" 2>&1
  echo "$label: $(tail -1 "$OUT/encode-$label.log")"
  first[x$opts]=${first[x$opts]:-$label}
  if ! cmp -s "$T/$label.mmp" "$T/${first[x$opts]}.mmp"; then
    echo "$label: DIFFERENT BYTES from ${first[x$opts]}"
    rc=1
  fi
done
[ $rc -eq 0 ] && echo "same bytes in every configuration of equal stage options (4 frames of the clip)"
exit $rc
