#!/usr/bin/env bash
# README command 2 (and what CI runs): install dependencies, build, run the whole test
# suite. GPU tests skip cleanly when no GPU is usable; on a GPU machine they run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh ci
# The packages above are installed: the PyWavelets / scikit-image comparisons and the
# headless-Chromium rendering of the profile report must run, not skip.
export VFPIPE_REQUIRE_PYWT=1 VFPIPE_REQUIRE_CHROMIUM=1
# The display tests need an X server (window) and EGL (headless): Xvfb with Mesa.
if command -v xvfb-run >/dev/null; then
  export VFPIPE_REQUIRE_DISPLAY=1
  exec xvfb-run -a -s "-screen 0 1280x1024x24" ctest --preset ci -j "$(nproc)"
fi
ctest --preset ci -j "$(nproc)"
