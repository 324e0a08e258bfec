#!/usr/bin/env bash
# Builds the libFuzzer targets (Fuzz/) and runs each for FUZZ_SECONDS (default 60).
# Fails when a target crashes; prints each target's executions per second and corpus size.
#
#   scripts/fuzz.sh                      # all targets, 60 s each
#   FUZZ_SECONDS=10 scripts/fuzz.sh config
#   FUZZ_JOBS=1 scripts/fuzz.sh          # one target at a time (default: one per core)
#   FUZZ_BUILD_ONLY=1 scripts/fuzz.sh    # build, run nothing
#   FUZZ_CONFIGURATION=debug scripts/fuzz.sh   # a debug build (default: release)
#
# The seed corpora in Fuzz/corpus/ are read, never written: each run grows a copy in
# $FUZZ_WORK (default: a temp dir). A crashing input is saved as $FUZZ_WORK/crash-*.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-60}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config subrequests cachekey jsonscan wirehead forwarded headboundary plainreply plainrequest misspaths)
work=${FUZZ_WORK:-$(mktemp -d)}
scratch=${FUZZ_BUILD:-.build-fuzz}

# lld: gold trips over the main alias SwiftPM adds next to libFuzzer. -enable-testing: the
# misspaths target imports ConciergeServer @testable (the request path's plan is internal).
# A release build fuzzes 1.2-2.7x faster; a debug build compiles in a fraction of the time
# (here: 492 s with a test build beside it, against 1,610 s for release beside `make deb`),
# which is why CI, with the package's release build beside it, fuzzes a debug build.
configuration=${FUZZ_CONFIGURATION:-release}
flags=(-c "$configuration" --scratch-path "$scratch" -Xswiftc -sanitize=fuzzer -Xswiftc -DFUZZING -Xswiftc -parse-as-library -Xswiftc -use-ld=lld
       -Xswiftc -enable-testing)
swift build "${flags[@]}" --product concierge-fuzz
bin=$(swift build "${flags[@]}" --show-bin-path)
# FUZZ_BUILD_ONLY=1: the build alone (CI builds it beside the package's release build).
[ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && exit 0

# One target's run: its log, its saved crash; prints one line.
run_target() {
  local t=$1
  mkdir -p "$work/$t"
  cp -n Fuzz/corpus/"$t"/* "$work/$t/" 2>/dev/null || true
  local log="$work/$t.log"
  # SWIFT_BACKTRACE off: libFuzzer, not Swift's backtracer, must see a trap to save the input.
  if ! (cd "$work" && SWIFT_BACKTRACE=enable=no CONCIERGE_FUZZ_TARGET=$t "$bin/concierge-fuzz" "$work/$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$work/crash-$t-" >"$log" 2>&1); then
    echo "$t FAILED:"; tail -40 "$log"; return 1
  fi
  local execs rate files
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  files=$(ls "$work/$t" | wc -l)
  echo "$t: $execs executions, $rate exec/s, corpus $files files, no crash"
}

# FUZZ_JOBS targets at once (default: one per core), each for its full time.
jobs=${FUZZ_JOBS:-$(nproc)}
status=0
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  echo "== ${batch[*]}: ${seconds}s"
  pids=()
  for t in "${batch[@]}"; do run_target "$t" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
done
exit $status
