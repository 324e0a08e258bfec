#!/usr/bin/env bash
# Concierge's memory after storing 100,000 entries: RSS against the 120 MiB budget (loopback).
#
#   Benchmarks/rss-100k.sh
#   SKIP_BUILD=1 RELEASE_DIR=.build/release ENTRIES=5000 Benchmarks/rss-100k.sh   # quick check (no verdict)
#
# Starts the sample API and Concierge with `storage.memory_bytes: 64MB` (the hot tier's cap;
# SQLite file in a temp dir under STATE_BASE), then one MISS run: `wrk -t1 -c16` with a
# unique query per request (/api/items?limit=1&run=R&n=<counter>), stopped by its script
# after ENTRIES responses (so at least ENTRIES distinct entries; -d MAX_TIME is only a
# ceiling). It waits until the writer has committed (the admin /stats `entries` count
# reaches ENTRIES or stops moving, bounded) and the process is quiet, then reports VmRSS and
# VmHWM (peak) from /proc/PID/status, /stats entries and bytes, and the SQLite file size.
# A sampler records VmRSS every 0.5 s during the run (peak and time series in OUT_DIR).
#
# Verdict: PASS when VmRSS after the run <= LIMIT_MIB (120) and /stats counts at least
# ENTRIES entries; exit status 1 otherwise. With ENTRIES below 100000 the run is a check of
# the script only and the verdict says so.
#
# Env: ENTRIES=100000 CONNECTIONS=16 MEMORY_BYTES=64MB LIMIT_MIB=120 MAX_TIME=900
#      STATE_BASE=/tmp SKIP_BUILD=0 RELEASE_DIR=.build/release OUT_DIR=bench-out/rss-100k-<time>
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ENTRIES=${ENTRIES:-100000}
CONNECTIONS=${CONNECTIONS:-16}
MEMORY_BYTES=${MEMORY_BYTES:-64MB}
LIMIT_MIB=${LIMIT_MIB:-120}
MAX_TIME=${MAX_TIME:-900}
OUT_DIR=${OUT_DIR:-$BENCH_REPO/bench-out/rss-100k-$(date +%Y%m%d-%H%M%S)}

need_cmds wrk:wrk curl:curl python3:python3
ensure_release_build
mkdir -p "$OUT_DIR"
make_workdir concierge-rss

SAMPLE_PORT=$(free_port)
PROXY_PORT=$(free_port)
ADMIN_PORT=$(free_port)
DB="$WORK/cache.sqlite"

"$SAMPLE_BIN" --host 127.0.0.1 --port "$SAMPLE_PORT" > "$WORK/sample.log" 2>&1 &
SAMPLE_PID=$!; track "$SAMPLE_PID"
wait_http "http://127.0.0.1:$SAMPLE_PORT/api/items?limit=1" "$SAMPLE_PID" "$WORK/sample.log"

write_concierge_config "$WORK/concierge.yaml" "$PROXY_PORT" "$ADMIN_PORT" "http://127.0.0.1:$SAMPLE_PORT" "$DB" "$MEMORY_BYTES"
"$CONCIERGE_BIN" check-config --config "$WORK/concierge.yaml" > /dev/null
"$CONCIERGE_BIN" serve --config "$WORK/concierge.yaml" > "$WORK/concierge.log" 2>&1 &
PID=$!; track "$PID"
wait_http "http://127.0.0.1:$ADMIN_PORT/health" "$PID" "$WORK/concierge.log"

URL="http://127.0.0.1:$PROXY_PORT/api/items?limit=1"
[ "$(x_cache "$URL&run=probe&n=0")" = MISS ] || die "a new query was not a MISS"
[ "$(x_cache "$URL&run=probe&n=0")" = HIT ] || die "the second request for a query was not a HIT"
rss_start=$(status_kib "$PID" VmRSS)
entries0=$(admin_stats "$ADMIN_PORT" entries)

write_miss_lua "$WORK/miss.lua"
( while kill -0 "$PID" 2>/dev/null; do
      printf '%s %s\n' "$(date +%s.%N)" "$(status_kib "$PID" VmRSS)"; sleep 0.5
  done ) > "$OUT_DIR/rss-samples.txt" &
SAMPLER=$!; track "$SAMPLER"
rm -f "$WORK/threads.ready"
python3 "$(dirname "$0")/bench_tools.py" threads-sample "$PID" "$OUT_DIR/threads.json" "$WORK/threads.ready" 0.5 &
THREADS_PID=$!; track "$THREADS_PID"
i=0; while [ ! -e "$WORK/threads.ready" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done

log "MISS run: $ENTRIES unique queries, wrk -t1 -c$CONNECTIONS (ceiling ${MAX_TIME}s); Concierge pid $PID, memory_bytes $MEMORY_BYTES"
requests0=$(admin_stats "$ADMIN_PORT" requests)
start=$(date +%s.%N)
# The script stops wrk's thread after ENTRIES responses, but wrk's main thread sleeps for
# all of -d: once Concierge has counted ENTRIES more requests, SIGINT ends wrk (it then
# prints its summary as usual).
WRK_STOP_AFTER=$ENTRIES wrk -t1 -c"$CONNECTIONS" -d"${MAX_TIME}s" --latency -s "$WORK/miss.lua" "$URL" -- "rss$RANDOM" > "$OUT_DIR/wrk.txt" &
WRK=$!; track "$WRK"
while kill -0 "$WRK" 2>/dev/null; do
    sleep 0.5
    r=$(admin_stats "$ADMIN_PORT" requests || echo 0)
    if [ "${r:-0}" -ge $((requests0 + ENTRIES)) ]; then
        sleep 1; kill -INT "$WRK" 2>/dev/null || true
        break
    fi
done
rc=0; wait "$WRK" || rc=$?
untrack "$WRK"
[ "$rc" = 0 ] || die "wrk failed ($rc): $(tail -3 "$OUT_DIR/wrk.txt")"
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
requests=$(wrk_requests "$OUT_DIR/wrk.txt"); errors=$(wrk_errors "$OUT_DIR/wrk.txt")
log "$requests requests in ${elapsed}s, $errors errors"

# The writer commits after the replies: wait for its count (bounded), then for quiet.
expected=$((entries0 + ENTRIES))
entries=$(admin_stats "$ADMIN_PORT" entries); last=-1; still=0
for ((i = 0; i < 240; i++)); do
    [ "$entries" -ge "$expected" ] && break
    if [ "$entries" = "$last" ]; then still=$((still + 1)); [ $still -ge 10 ] && break; else still=0; fi
    last=$entries; sleep 0.5
    entries=$(admin_stats "$ADMIN_PORT" entries)
done
settle=$(wait_quiet "$PID" 30)
stop_pid "$SAMPLER" 2; untrack "$SAMPLER"
stop_pid "$THREADS_PID" 5; untrack "$THREADS_PID"

stats=$(admin_stats "$ADMIN_PORT")
entries=$(admin_stats "$ADMIN_PORT" entries)
bytes=$(admin_stats "$ADMIN_PORT" bytes)
rss=$(status_kib "$PID" VmRSS); hwm=$(status_kib "$PID" VmHWM)
db_bytes=$(stat -c %s "$DB"); wal_bytes=$(stat -c %s "$DB-wal" 2>/dev/null || echo 0)
peak_sampled=$(awk '$2 > m {m = $2} END {print m + 0}' "$OUT_DIR/rss-samples.txt")
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

status=0
verdict=PASS
{
    echo
    echo "Concierge RSS after a MISS run of $ENTRIES unique entries (storage.memory_bytes: $MEMORY_BYTES), $(nproc) cores, 127.0.0.1"
    echo "Concierge: $(binary_info)"
    echo "wrk -t1 -c$CONNECTIONS: $requests requests in ${elapsed}s, $errors errors; writer settled, CPU quiet ${settle}s later"
    echo "/stats: $stats"
    printf '%-52s %10s\n' "VmRSS before the run" "$(mib "$rss_start") MiB"
    printf '%-52s %10s\n' "VmRSS after the run" "$(mib "$rss") MiB"
    printf '%-52s %10s\n' "VmHWM (peak RSS)" "$(mib "$hwm") MiB"
    printf '%-52s %10s\n' "peak VmRSS sampled every 0.5 s" "$(mib "$peak_sampled") MiB"
    printf '%-52s %10s\n' "  of which RssAnon (heap, stacks)" "$(mib "$(status_kib "$PID" RssAnon)") MiB"
    printf '%-52s %10s\n' "  of which RssFile (binary, libs, mapped SQLite -shm)" "$(mib "$(status_kib "$PID" RssFile)") MiB"
    printf '%-52s %10s\n' "  of which RssShmem (tmpfs, shared memory)" "$(mib "$(status_kib "$PID" RssShmem)") MiB"
    printf '%-52s %10s\n' "entries (/stats)" "$entries"
    printf '%-52s %10s\n' "bytes (/stats)" "$bytes"
    printf '%-52s %10s\n' "SQLite file + WAL" "$(awk -v a="$db_bytes" -v b="$wal_bytes" 'BEGIN {printf "%.1f MiB", (a + b) / 1048576}')"
    echo "budget: VmRSS after the run <= $LIMIT_MIB MiB"
    echo
    python3 "$(dirname "$0")/bench_tools.py" threads-report --top 6 --run "MISS $ENTRIES" "$OUT_DIR/threads.json" "$requests"
} > "$OUT_DIR/summary.txt"
if awk -v r="$rss" -v l="$LIMIT_MIB" 'BEGIN {exit !(r / 1024 > l)}'; then
    log "FAIL: VmRSS $(mib "$rss") MiB > $LIMIT_MIB MiB"; status=1; verdict=FAIL
fi
if [ "$entries" -lt "$ENTRIES" ]; then
    log "FAIL: only $entries entries in the cache, expected at least $ENTRIES"; status=1; verdict=FAIL
fi
[ "$errors" = 0 ] || log "WARNING: $errors errors in the wrk run"
if [ "$ENTRIES" -lt 100000 ] && [ "$verdict" = PASS ]; then verdict="n/a (ENTRIES=$ENTRIES < 100000: script check only)"; fi
echo "verdict: $verdict" >> "$OUT_DIR/summary.txt"
echo "raw output: $OUT_DIR" >> "$OUT_DIR/summary.txt"
cat "$OUT_DIR/summary.txt"
exit "$status"
