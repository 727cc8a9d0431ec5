#!/usr/bin/env bash
# What a minimal FFmpeg with NVDEC needs on the GPU host, which has no FFmpeg, no registry
# and no -dev packages (../shared/device/README.md): Debian's FFmpeg source (10 MB), the
# NVDEC headers (libffmpeg-nvenc-dev), libx264 (the encoder batch outputs use), nasm for
# FFmpeg's x86 code, and pkgconf.
#   Here, once:     scripts/fetch-device-ffmpeg.sh       (fills .ff/, git-ignored)
#   On the device:  scripts/device-test.sh builds it (scripts/build-device-ffmpeg.sh) when .ff/
#                   is carried, and builds vfpipe against it.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .ff && mkdir -p .ff/debs .ff/tools
S=/tmp/vfpipe-srcapt
mkdir -p $S/lists/partial
sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >$S/src.sources
O="-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$S -o Dir::State::Lists=$S/lists"
apt-get $O update >/dev/null
(cd .ff && apt-get $O source --download-only ffmpeg >/dev/null)
rm -f .ff/*.dsc .ff/*.asc .ff/*.debian.tar.*
(cd .ff/debs && apt-get download libffmpeg-nvenc-dev nasm pkgconf pkgconf-bin libpkgconf3 libx264-164 libx264-dev >/dev/null)
for f in .ff/debs/*.deb; do dpkg -x "$f" .ff/tools; done
rm -rf .ff/debs .ff/tools/usr/share/doc .ff/tools/usr/share/man .ff/tools/usr/lib/x86_64-linux-gnu/libx264.a
du -sh .ff
