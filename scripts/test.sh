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
# Slurm's daemons run the batch array test (tests/slurm_batch_test.sh); it needs root, as CI has.
if [ "$(id -u)" = 0 ]; then export VFPIPE_REQUIRE_SLURM=1; fi
# The display tests need an X server (window) and EGL (headless): Xvfb with Mesa.
X=()
if command -v xvfb-run >/dev/null; then
  export VFPIPE_REQUIRE_DISPLAY=1
  X=(xvfb-run -a -s "-screen 0 1280x1024x24")
fi
rc=0
"${X[@]}" ctest --preset ci -j "$(nproc)" || rc=1

# Style: the whole tree formatted (.clang-format), and no clang-tidy finding (.clang-tidy).
echo "== style: clang-format, clang-tidy"
bash scripts/format.sh --check || rc=1
bash scripts/tidy.sh build || rc=1

# The sanitizer build (clang, ASan + UBSan, CPU only): the CPU suite under it, then each
# fuzz target for FUZZ_SECONDS (60) from its seed corpus (scripts/fuzz.sh; docs/hardening.md).
echo "== sanitizers: asan preset"
bash scripts/build.sh asan
# Mesa's GL drivers (the display tests) leak on their own: those run with leak checks off.
ASAN_OPTIONS=detect_leaks=1 "${X[@]}" ctest --test-dir build-asan -L cpu -E '^Display\.' -j "$(nproc)" \
  --output-on-failure || rc=1
ASAN_OPTIONS=detect_leaks=0 "${X[@]}" ctest --test-dir build-asan -R '^Display\.' -j "$(nproc)" \
  --output-on-failure || rc=1
echo "== fuzzing"
bash scripts/fuzz.sh --seconds "${FUZZ_SECONDS:-60}" || rc=1
exit $rc
