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
ctest --preset ci -j "$(nproc)"
