#!/usr/bin/env bash
# README command 1: install dependencies, build, and run vfpipe's main job on a generated
# noisy clip: synthetic 1280x720 scene + salt-and-pepper noise -> 5x5 median -> out/demo.mp4,
# with a summary (frames, fps, per-stage time) and a JSON report. Uses the GPU when one
# is usable, else the CPU (with a warning).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The build takes minutes on a small machine: show where it is, on one line.
echo "demo: building vfpipe (build/, a few minutes the first time)"
show_progress() {
  while IFS= read -r line; do
    case "$line" in
      \[*/*\]*) printf '\r  %-100.100s' "$line" ;;
      *error*|*Error*) printf '\n%s\n' "$line" ;;
    esac
  done
}
if ! bash scripts/build.sh ci 2>&1 | show_progress; then  # pipefail: the build's status
  echo; echo "demo: the build failed (see above)"; exit 1
fi
printf '\r%-102s\r' ""
echo "demo: built"

mkdir -p out
FILTERS=${FILTERS:-"median=radius=2"}
build/vfpipe run \
  -i "synthetic=size=1280x720:rate=30:frames=300:noise=saltpepper:density=0.1:seed=1" \
  -f "$FILTERS" \
  -y -o out/demo.mp4 --report out/demo-report.json  # -y: replace an earlier run's video
echo "wrote out/demo.mp4 and out/demo-report.json"
