#!/usr/bin/env bash
# clang-format (.clang-format) over every C++/CUDA file in git.
#     scripts/format.sh           rewrite the files in place
#     scripts/format.sh --check   list the files that differ, exit 1 if any (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.h')
if [ "${1:-}" = --check ]; then
  bad=0
  for f in "${files[@]}"; do
    clang-format "$f" | cmp -s - "$f" || { echo "not formatted: $f (scripts/format.sh)"; bad=1; }
  done
  [ $bad = 0 ] && echo "clang-format: ${#files[@]} files formatted"
  exit $bad
fi
clang-format -i "${files[@]}"
