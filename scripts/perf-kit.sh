#!/usr/bin/env bash
# On the development machine: packs this machine's `perf` (Debian linux-perf) and the
# libraries it needs beyond a base system into build-carry/var/perf-kit.tar.xz, for the GPU
# host, which has no profiler of the CPU (its kernel.perf_event_paranoid of 2 lets a user
# profile the user space of their own processes). Carry that file; scripts/mmp-perf.sh
# unpacks and uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf > /dev/null || { echo "no perf here: apt-get install linux-perf" >&2; exit 1; }
kit=$(mktemp -d)
trap 'rm -rf "$kit"' EXIT
mkdir -p "$kit/lib"
cp "$(command -v perf)" "$kit/perf"
for l in $(ldd "$(command -v perf)" | awk '/=>/ {print $3}'); do
  case $(basename "$l") in
    libc.so.6 | libm.so.6 | libstdc++.so.6 | libgcc_s.so.1 | libz.so.1) ;;  # every system has them
    *) cp -L "$l" "$kit/lib/" ;;
  esac
done
mkdir -p build-carry/var
tar -C "$kit" -cf - . | xz -T0 -6 > build-carry/var/perf-kit.tar.xz
echo "carry: build-carry/var/perf-kit.tar.xz ($(du -h build-carry/var/perf-kit.tar.xz | cut -f1))"
