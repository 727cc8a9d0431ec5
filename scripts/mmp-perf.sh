#!/usr/bin/env bash
# On the GPU host: where the process's CPU time goes while the mmp stage runs on the GPU.
# Profiles `vfpipe run` on the issue's 60-frame clip with the `perf` that
# scripts/perf-kit.sh packed (cpu-clock samples, user space) and prints the shares by
# library and by function.
#     bash scripts/device-carried.sh bash scripts/mmp-perf.sh
# VFP (build-carry/vfpipe) the binary, KIT (build-carry/var/perf-kit.tar.xz), DATA
# (.bench-data) the folder with mosaic.npz, FILTER (mmp=lambda=25:tile=256x256) the stage,
# TOP (45) the functions listed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
VFP=${VFP:-build-carry/vfpipe}
KIT=${KIT:-build-carry/var/perf-kit.tar.xz}
DATA=${DATA:-.bench-data}
FILTER=${FILTER:-mmp=lambda=25:tile=256x256}
. scripts/device-env.sh
mkdir -p "$T/perf" && tar -C "$T/perf" -xJf "$KIT" || exit 1
perf() { LD_LIBRARY_PATH="$T/perf/lib:${LD_LIBRARY_PATH:-}" "$T/perf/perf" "$@"; }
$PY scripts/mmp-clip.py "$T/clip.y4m" --frames 60 --mosaic "$DATA/mosaic.npz" > /dev/null
perf record -e cpu-clock -F 999 -o "$T/p.data" -- "$VFP" run -i "$T/clip.y4m" -f "$FILTER" --device cuda -o null 2>&1 |
  grep -E 'frames in'
report() { perf report -i "$T/p.data" --stdio --no-children --sort "$1" 2> /dev/null | grep -v '^#' | grep -v '^$'; }
report dso | head -12
report dso,sym | cut -c1-160 | head -"${TOP:-45}"
