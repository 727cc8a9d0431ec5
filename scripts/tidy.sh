#!/usr/bin/env bash
# clang-tidy with the agreed checks (.clang-tidy) on every C++ file of the layers and apps,
# from a configured build's compile_commands.json; exit 1 on any warning.
#     scripts/tidy.sh [BUILD_DIR]      (default: build, the ci preset)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
[ -f "$B/compile_commands.json" ] || { echo "tidy: no $B/compile_commands.json (configure first)"; exit 1; }
mapfile -t files < <(python3 -c '
import json, sys
for e in json.load(open(sys.argv[1])):
    f = e["file"]
    if f.endswith(".cpp") and any("/" + d + "/" in f for d in
            ("core", "codecs", "cpu", "stages", "pipeline", "io", "display", "apps")) and "/tests/" not in f:
        print(f)' "$B/compile_commands.json" | sort -u)
echo "clang-tidy: ${#files[@]} files"
run-clang-tidy -p "$B" -quiet -j "$(nproc)" "${files[@]}" > "$B/tidy.log" 2>&1 || {
  grep -E "(warning|error):" "$B/tidy.log" | sort -u
  echo "clang-tidy: findings above (full log: $B/tidy.log)"
  exit 1
}
echo "clang-tidy: no findings"
