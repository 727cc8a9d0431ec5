#!/usr/bin/env bash
# Configures and builds with the given preset (default: ci = Release, CUDA if nvcc exists
# with sm_90 + PTX, OpenCV, tests). Uses every core; the CI machine has two.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-ci}
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
