#!/usr/bin/env bash
# Builds a minimal shared FFmpeg with NVDEC (libavcodec's CUDA hwaccel) from .ff/ (see
# scripts/fetch-device-ffmpeg.sh) into .ff/prefix, once per machine: the demuxers, parsers,
# decoders and muxers vfpipe's video I/O and its tests use, the H.264/HEVC/AV1/VP9 NVDEC
# hwaccels, FFV1 and MPEG-4 encoders, and libx264 when the kit has it. Prints the variables
# to export. Under a minute on 16 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
FF=$PWD/.ff
T=$FF/tools/usr
export PATH=$T/bin:$PATH
export LD_LIBRARY_PATH=$T/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -x "$T/bin/pkg-config" ] || ln -sf pkgconf "$T/bin/pkg-config"
# The NVDEC headers' .pc points at /usr: at the carried copy instead.
mkdir -p "$FF/pc"
sed "s|^prefix=.*|prefix=$T|" "$T/share/pkgconfig/ffnvcodec.pc" >"$FF/pc/ffnvcodec.pc"
X264=
if [ -f "$T/lib/x86_64-linux-gnu/pkgconfig/x264.pc" ]; then  # libx264 from the kit (GPL build)
  sed -e "s|^prefix=.*|prefix=$T|" -e "s|/usr/lib/x86_64-linux-gnu|$T/lib/x86_64-linux-gnu|g" \
    "$T/lib/x86_64-linux-gnu/pkgconfig/x264.pc" >"$FF/pc/x264.pc"
  X264="--enable-gpl --enable-libx264 --enable-encoder=libx264"
fi
export PKG_CONFIG_PATH=$FF/pc:$FF/prefix/lib/pkgconfig
# Rebuilt when the configuration changes (a kit with libx264 added, say).
STAMP="minimal-nvdec-1 $X264"
if [ ! -f "$FF/prefix/lib/libavcodec.so" ] || [ "$(cat "$FF/prefix/.vfpipe-config" 2>/dev/null)" != "$STAMP" ]; then
  rm -rf /tmp/vfpipe-ffbuild && mkdir -p /tmp/vfpipe-ffbuild
  tar -xf "$FF"/ffmpeg_*.orig.tar.xz -C /tmp/vfpipe-ffbuild --strip-components=1
  cd /tmp/vfpipe-ffbuild
  ./configure --prefix="$FF/prefix" --disable-programs --disable-doc --disable-static --enable-shared \
    --disable-everything --disable-autodetect --enable-pthreads \
    --enable-ffnvcodec --enable-nvdec \
    --enable-hwaccel=h264_nvdec,hevc_nvdec,av1_nvdec,vp9_nvdec \
    --enable-decoder=h264,hevc,av1,vp9,aac,ffv1,rawvideo,mpeg4,pcm_s16le \
    --enable-encoder=ffv1,mpeg4,rawvideo,aac,pcm_s16le \
    --enable-parser=h264,hevc,av1,vp9,aac,mpeg4video \
    --enable-demuxer=mov,matroska,mpegts,h264,hevc,yuv4mpegpipe,aac,wav \
    --enable-muxer=mp4,mov,matroska,mpegts,null,yuv4mpegpipe,wav \
    --enable-protocol=file,pipe \
    --enable-bsf=h264_mp4toannexb,hevc_mp4toannexb,aac_adtstoasc,vp9_superframe,extract_extradata \
    --enable-swscale --enable-swresample $X264 >/tmp/vfpipe-ffbuild/configure.out 2>&1 ||
    { tail -30 /tmp/vfpipe-ffbuild/configure.out ffbuild/config.log; exit 1; }
  grep -E "^(Enabled hwaccels|h264_nvdec)" -A2 /tmp/vfpipe-ffbuild/configure.out | head -4 || true
  make -j "$(nproc)" >/tmp/vfpipe-ffbuild/make.out 2>&1 || { tail -30 /tmp/vfpipe-ffbuild/make.out; exit 1; }
  make install >/dev/null
  echo "$STAMP" >"$FF/prefix/.vfpipe-config"
fi
echo "export PKG_CONFIG_PATH=$PKG_CONFIG_PATH PATH=$T/bin:\$PATH LD_LIBRARY_PATH=$FF/prefix/lib:$T/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
