#!/usr/bin/env bash
# Runs the libFuzzer targets (tests/fuzz/) under ASan + UBSan, each for a bounded time,
# starting from the seed corpora in tests/fuzz/corpus/. Fails on any finding (a crash, a
# sanitizer report, a leak, a timeout or an out-of-memory); the failing input is kept in
# fuzz-out/.
#   bash scripts/fuzz.sh [--seconds S | --minutes M] [TARGET...]    (default: 60 s each, all)
# Needs the asan preset built: cmake --preset asan && cmake --build --preset asan
set -uo pipefail
cd "$(dirname "$0")/.."
secs=60
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) secs=$2; shift 2 ;;
    --minutes) secs=$(( $2 * 60 )); shift 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -eq 0 ] && targets=(y4m mmp filters sendcmd kernel_file)
out=fuzz-out
mkdir -p "$out"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
rc=0
printf "%-12s %8s %12s %10s  %s\n" target seconds executions "exec/s" result
for t in "${targets[@]}"; do
  bin=build-asan/tests/fuzz/fuzz_$t
  [ -x "$bin" ] || { echo "missing $bin (build the asan preset)"; exit 2; }
  work=$(mktemp -d)  # new inputs go here; the seeds in the repo stay as they are
  log="$out/$t.log"
  # -rss_limit_mb: memory is bounded by design, so an input that needs more is a finding.
  "$bin" "$work" "tests/fuzz/corpus/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$out/$t-" -print_final_stats=1 > "$log" 2>&1
  r=$?
  execs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  speed=$(grep -m1 -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
  if [ $r -eq 0 ]; then res=ok; else res="FINDING (see $log)"; rc=1; tail -30 "$log"; fi
  printf "%-12s %8s %12s %10s  %s\n" "$t" "$secs" "${execs:-?}" "${speed:-?}" "$res"
  rm -rf "$work"
done
exit $rc
