#!/usr/bin/env bash
# Builds vfpipe here for the GPU host (sm_90, no OpenCV or GL, FFmpeg with NVDEC and
# libx264), so that a device call spends its time on tests and benchmarks rather than on
# building (device-test.sh builds there: FFmpeg and vfpipe take a few minutes of device
# time). The binaries keep this checkout's paths (the tests' data, vfpipe's own path);
# scripts/device-carried.sh recreates them there. Prints the paths a call carries.
#     scripts/build-for-device.sh [TARGET...]     (default: vfpipe vfpipe_gpu_tests)
#     NO_FFMPEG=1 scripts/build-for-device.sh ...  (no FFmpeg: no video files or NVDEC, but no
#                                                  FFmpeg build here either; Y4M still works)
# then, with the device tool:
#     run  command="bash scripts/device-carried.sh build-carry/tests/vfpipe_gpu_tests"
#          carry=[build-carry/vfpipe, build-carry/tests/vfpipe_gpu_tests, .ff/prefix, .zk, ...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .deps ] || bash scripts/fetch-device-deps.sh
[ -d .zk/usr ] || bash scripts/fetch-device-zkit.sh
libav=AUTO
if [ "${NO_FFMPEG:-0}" = 1 ]; then
  libav=OFF
else
  ls .ff/ffmpeg_*.orig.tar.xz > /dev/null 2>&1 || bash scripts/fetch-device-ffmpeg.sh
  ff_env=$(bash scripts/build-device-ffmpeg.sh | tail -1)
  case "$ff_env" in export*) eval "$ff_env" ;; *) echo "FFmpeg build failed" >&2; exit 1 ;; esac
  # libavcodec needs the kit's libx264 at run time: beside it, so that one folder travels.
  cp -P .ff/tools/usr/lib/x86_64-linux-gnu/libx264.so* .ff/prefix/lib/ 2> /dev/null || true
fi
export CMAKE_PREFIX_PATH=$PWD/.zk/usr
cmake -S . -B build-carry -G Ninja -DCMAKE_BUILD_TYPE=Release -DVFPIPE_CUDA=ON -DVFPIPE_WITH_OPENCV=OFF \
  -DVFPIPE_WITH_LIBAV=$libav -DVFPIPE_WITH_GL=OFF -DCMAKE_CUDA_ARCHITECTURES=90 -DVFPIPE_DEPS_DIR="$PWD/.deps" > /dev/null
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(vfpipe vfpipe_gpu_tests)
ninja -C build-carry "${targets[@]}"
pwd > build-carry/source-dir.txt
carry=(build-carry/source-dir.txt)
for t in "${targets[@]}"; do
  f=$(find build-carry -maxdepth 2 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] || continue
  strip "$f"  # about 17 -> 16 MB each: the working tree travels in 64 MiB
  carry+=("$f")
done
[ "$libav" = OFF ] || carry+=(.ff/prefix)
carry+=(.zk)
echo "carry: ${carry[*]}"
du -shc "${carry[@]}" | tail -1
