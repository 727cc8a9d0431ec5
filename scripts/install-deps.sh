#!/usr/bin/env bash
# Installs vfpipe's build and test dependencies from Debian/Ubuntu packages (idempotent:
# only what is missing). The CUDA toolkit is optional: without nvcc, vfpipe builds its
# CPU backend only; with it (/usr/local/cuda), the CUDA backend too.
set -euo pipefail
PKGS=(cmake ninja-build g++ pkg-config
      libopencv-dev          # camera, image sequences
      libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev  # video files and streams
      libffmpeg-nvenc-dev    # NVDEC's own API (nv-codec-headers), used in CUDA builds
      libcli11-dev nlohmann-json3-dev libgtest-dev
      libtbb-dev             # oneTBB: the CPU thread pool
      clang libclang-rt-dev  # the sanitizer build (asan preset) and the libFuzzer targets
      clang-format clang-tidy  # the style checks (scripts/format.sh, scripts/tidy.sh)
      libglfw3-dev libglew-dev libegl-dev   # display (GL window, headless EGL)
      xvfb xauth libgl1-mesa-dri libegl-mesa0  # display tests: X server and GL in software
      ffmpeg                 # tests compose vfpipe with ffmpeg pipes
      libdeflate-dev         # the CPU writer of PNG / .y4m.gz / compress outputs
      zlib1g-dev             # reads our DEFLATE streams back in the tests
      libpng-dev             # decodes our PNGs in the tests (and the PNG size reference)
      python3-pywt python3-skimage   # outside references for the wavelet stage
      slurmctld slurmd slurm-client munge  # `vfpipe batch --slurm`, tested on a local cluster
      chromium)              # renders the profile's HTML report in a test
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
