#!/usr/bin/env bash
# oneTBB (the CPU pool vfpipe builds on), zlib, libdeflate and libpng for a GPU host without packages (it
# has no -dev packages and no registry): TBB to build at all; the others are the references
# the DEFLATE benchmark compares with and the tests decode with.
#   Here, once:      scripts/fetch-device-zkit.sh        (fills .zk/, git-excluded)
#   On the device:   scripts/device-test.sh finds .zk/ and points CMake and the loader at it.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .zk && mkdir -p .zk/debs
(cd .zk/debs && apt-get download zlib1g zlib1g-dev libdeflate0 libdeflate-dev libpng16-16 libpng-dev \
   libtbb12 libtbb-dev libtbbmalloc2 libtbbbind-2-5 libhwloc15)
for f in .zk/debs/*.deb; do dpkg -x "$f" .zk; done
# zlib1g puts the library under /lib and its -dev symlink is absolute: move and relink.
lib=.zk/usr/lib/x86_64-linux-gnu
mv .zk/lib/x86_64-linux-gnu/libz.so.1* "$lib"/ && rm -rf .zk/lib
ln -sf "$(cd "$lib" && ls libz.so.1.* | head -1)" "$lib/libz.so"
rm -rf .zk/debs .zk/usr/share
du -sh .zk
