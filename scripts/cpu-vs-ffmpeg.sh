#!/usr/bin/env bash
# vfpipe's CPU backend against FFmpeg's own CPU filters, stage by stage, on this machine:
# the same 1080p yuv420p Y4M clip through `median`, a 5x5 Gaussian `convolution` and the
# wavelet denoiser (`vaguedenoiser`: CDF 9/7, 3 steps, soft, BayesShrink), each side with
# every core (FFmpeg: -filter_threads; vfpipe: --threads), null outputs. Prints seconds
# (best of REPEAT) and the ratio. Needs ffmpeg and a built vfpipe (build/vfpipe).
#   bash scripts/cpu-vs-ffmpeg.sh [FRAMES] [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/.."
FRAMES=${1:-60}
REPEAT=${2:-3}
VF=${VFPIPE:-build/vfpipe}
T=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clip=$tmp/in.y4m
"$VF" run -q --no-progress -i "synthetic=size=1920x1080:frames=$FRAMES:noise=gauss:sigma=12" -o "$clip"
best() {  # best wall time of REPEAT runs of "$@"
  local b=""
  for _ in $(seq "$REPEAT"); do
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>"$tmp/err" || { echo "failed: $* ($(tail -3 "$tmp/err"))" >&2; exit 1; }
    t1=$(date +%s.%N)
    b=$(python3 -c "t=$t1-$t0; b='$b'; print(min(t, float(b)) if b else t)")
  done
  echo "$b"
}
gauss="1 4 6 4 1 4 16 24 16 4 6 24 36 24 6 4 16 24 16 4 1 4 6 4 1"
declare -A FF VP
FF[median]="median=radius=2"
VP[median]="median=radius=2"
FF[conv]="convolution=0m='$gauss':1m='$gauss':2m='$gauss':0rdiv=1/256:1rdiv=1/256:2rdiv=1/256"
VP[conv]="conv=kernel='$gauss':rdiv=0.00390625"
FF[wavelet]="vaguedenoiser=method=soft:nsteps=3:type=bayes:percent=100"
VP[wavelet]="wavelet=cdf97:levels=3:mode=soft:method=bayesshrink"
echo "$FRAMES frames of 1920x1080 yuv420p, $T threads each, best of $REPEAT (s; fps)"
printf "%-10s %10s %10s %8s\n" stage ffmpeg vfpipe "ffmpeg/vfpipe"
for s in median conv wavelet; do
  f=$(best ffmpeg -nostdin -hide_banner -loglevel error -filter_threads "$T" -i "$clip" -vf "${FF[$s]}" -f null -)
  v=$(best "$VF" --threads "$T" run -q --no-progress --device cpu -i "$clip" -f "${VP[$s]}" -o null)
  python3 -c "f,v,n=$f,$v,$FRAMES; print('%-10s %6.2f (%5.1f) %6.2f (%5.1f) %7.2fx' % ('$s', f, n/f, v, n/v, f/v))"
done
