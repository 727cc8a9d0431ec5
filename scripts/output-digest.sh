#!/usr/bin/env bash
# Prints a SHA-256 for each of a fixed set of vfpipe outputs (Y4M, .y4m.gz, PNG, .mmp,
# compress, the filter list and help texts), so that a refactoring can be checked to keep
# every output byte-identical:
#     scripts/output-digest.sh build/vfpipe > before.txt   # on the old tree
#     scripts/output-digest.sh build/vfpipe > after.txt    # on the new tree
#     diff before.txt after.txt
set -euo pipefail
VFP=$(realpath "${1:-build/vfpipe}")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
n=0
run() {  # run NAME OUTPUT -- vfpipe args...
  local name=$1 out=$2
  shift 3
  n=$((n + 1))
  if "$VFP" "$@" > stdout.txt 2> stderr.txt; then rc=0; else rc=$?; fi
  if [ "$out" = - ]; then
    h=$(sha256sum < stdout.txt | cut -c1-16)
  else
    h=$( (cat $out 2>/dev/null || echo missing) | sha256sum | cut -c1-16)
  fi
  printf '%-28s rc=%d %s\n' "$name" "$rc" "$h"
}
SRC="synthetic=size=257x161:frames=3:noise=gauss:sigma=12"
SRC444="synthetic=size=64x48:frames=2:format=yuv444p:noise=saltpepper"
run filters - -- filters
for f in null format median conv wavelet mmp synthetic; do run "filters-$f" - -- filters $f; done
run help-run - -- run --help
run median-y4m m.y4m -- run -q -i "$SRC" -f "median=radius=2" -o m.y4m
run median-pct m2.y4m -- run -q -i "$SRC444" -f "median=3:2:percentile=0.25:border=reflect101" -o m2.y4m
run conv-gauss c.y4m -- run -q -i "$SRC" -f "conv=gauss:size=7" -o c.y4m
run conv-taps c2.y4m -- run -q -i "$SRC" -f "conv=kernel=1 2 1 2 4 2 1 2 1:border=wrap" -o c2.y4m
run conv-sobel c3.y4m -- run -q -i "$SRC" -f "conv=sobel:dir=y:bias=128" -o c3.y4m
run conv-box-sep c4.y4m -- run -q -i "$SRC" -f "conv=box:size=31x9:separable=on" -o c4.y4m
run wavelet w.y4m -- run -q -i "$SRC" -f "wavelet=db4:levels=3" -o w.y4m
run wavelet-garrote w2.y4m -- run -q -i "$SRC444" -f "wdenoise=threshold=8:method=garrote:percent=85" -o w2.y4m
run wavelet-16 w3.y4m -- run -q -i "$SRC" -f "format=gray16le,wavelet=cdf97:sigma=20" -o w3.y4m
run format-chain f.y4m -- run -q -i "$SRC" -f "format=bgr24,median,format=gray" -o f.y4m
run chain3 ch.y4m -- run -q -i "$SRC" -f "median=radius=2,conv=gauss:size=5,wavelet=db4:levels=3" -o ch.y4m
run y4m-gz g.y4m.gz -- run -q -i "$SRC" -f "median" -o g.y4m.gz
run png-lossless 'p/*.png' -- run -q -i "$SRC" -f "conv=sharpen" -o p/%03d.png --lossless --deflate-engine vfpipe
run png-libdeflate 'q/*.png' -- run -q -i "$SRC" -o q/%03d.png --lossless
run mmp-stage mm.y4m -- run -q -i "synthetic=size=40x24:frames=1" -f "mmp=lambda=40" -o mm.y4m
run mmp-encode e.mmp -- mmp encode "synthetic=size=48x32:frames=2" --lambda 30 -o e.mmp
run mmp-decode d.y4m -- mmp decode e.mmp -o d.y4m
run compress z.gz -- compress m.y4m -o z.gz --engine vfpipe
printf '1 conv kernel=box\n2 median radius=3\n' > cmds.txt
run sendcmd s.y4m -- run -q -i "$SRC" -f "median,conv=gauss" --sendcmd cmds.txt -o s.y4m
run bad-filter stderr.txt -- run -q -i "$SRC" -f "median=radius=300"
