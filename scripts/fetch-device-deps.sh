#!/usr/bin/env bash
# Copies the header-only libraries (CLI11, nlohmann-json) and the GoogleTest sources from
# this machine's Debian packages into .deps/ (git-ignored), so that the GPU test machine,
# which has no package registry, can build vfpipe. Run once here before device runs:
#     scripts/fetch-device-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
[ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -d /usr/src/googletest ] || need+=(googletest)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  apt-get install -y --no-install-recommends "${need[@]}"
fi
rm -rf .deps && mkdir -p .deps/include
cp -r /usr/include/CLI .deps/include/
cp -r /usr/include/nlohmann .deps/include/
cp -r /usr/src/googletest .deps/googletest
du -sh .deps
