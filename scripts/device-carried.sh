#!/usr/bin/env bash
# On the GPU host: runs a command with the binaries scripts/build-for-device.sh made on the
# development machine. They look for this checkout at the path it had there (the tests'
# data, vfpipe's own path, their libraries' run path), so that path is made a link to here;
# the loader gets the carried FFmpeg (.ff/prefix) and the kit (.zk).
#     bash scripts/device-carried.sh build-carry/tests/vfpipe_gpu_tests --gtest_filter='Gpu.*'
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build-carry/source-dir.txt ] || { echo "no build-carry/source-dir.txt: carry what build-for-device.sh printed" >&2; exit 1; }
src=$(cat build-carry/source-dir.txt)
if [ "$src" != "$PWD" ]; then
  [ -e "$src" ] && [ ! -L "$src" ] && { echo "$src exists here and is not a link: cannot stand in for it" >&2; exit 1; }
  mkdir -p "$(dirname "$src")"
  ln -sfn "$PWD" "$src"
fi
export LD_LIBRARY_PATH=$PWD/.ff/prefix/lib:$PWD/.zk/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:$PATH
cd "$src"
exec "$@"
