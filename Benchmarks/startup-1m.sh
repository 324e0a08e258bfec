#!/usr/bin/env bash
# Start-up time with a large cache: how long until /health answers with ENTRIES (1,000,000)
# entries in the SQLite file, after a clean stop and after `kill -9` (loopback only).
#
#   Benchmarks/startup-1m.sh
#   SKIP_BUILD=1 RELEASE_DIR=.build/release ENTRIES=200000 Benchmarks/startup-1m.sh   # quick check
#
# 1. Starts Concierge (release) on an empty state dir so its own migrations create the schema,
#    then stops it, and writes ENTRIES rows straight into the file with sqlite3 (keys
#    "GET http://127.0.0.1:PORT/api/items?n=N v=1", a ~330-byte JSON body each: the rows the
#    daemon would store for GET /api/items?n=N).
# 2. Clean stop: starts Concierge, polls /health every 5 ms from the moment it is spawned (a
#    Python poller, so the time is the daemon's, not the script's), checks that a filled entry
#    is a HIT at once, waits for the "cache index loaded" log line and checks that /stats
#    counts every entry; stops it with SIGTERM.
# 3. kill -9: with that daemon, answers 200 misses (their entries queued or committed), kills
#    it with SIGKILL and times the next start the same way.
# Prints the ready times (ms), the time the index took to load in the background, RSS.
#
# Env: ENTRIES=1000000 RUNS=3 SKIP_BUILD=0 RELEASE_DIR=.build/release STATE_BASE=/tmp
#      OUT_DIR=bench-out/startup-1m-<time>
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ENTRIES=${ENTRIES:-1000000}
RUNS=${RUNS:-3}
OUT_DIR=${OUT_DIR:-$BENCH_REPO/bench-out/startup-1m-$(date +%Y%m%d-%H%M%S)}
TOKEN=bench-admin-token

need_cmds sqlite3:sqlite3 curl:curl python3:python3
ensure_release_build
mkdir -p "$OUT_DIR"
make_workdir concierge-start

SAMPLE_PORT=$(free_port)
PROXY_PORT=$(free_port)
ADMIN_PORT=$(free_port)
UPSTREAM="http://127.0.0.1:$SAMPLE_PORT"
DB="$WORK/state/cache.sqlite"

write_concierge_config "$WORK/concierge.yaml" "$PROXY_PORT" "$ADMIN_PORT" "$UPSTREAM" "$DB" 64MB 4GB info

"$SAMPLE_BIN" --host 127.0.0.1 --port "$SAMPLE_PORT" > "$WORK/sample.log" 2>&1 &
SAMPLE_PID=$!; track "$SAMPLE_PID"
wait_http "$UPSTREAM/api/items?limit=1" "$SAMPLE_PID" "$WORK/sample.log"

x_cache_of() { curl -fsS -D - -o /dev/null "$1" | tr -d '\r' | awk 'tolower($1) == "x-cache:" {print $2}'; }
stat_entries() { curl -fsS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$ADMIN_PORT/stats" | python3 -c 'import json, sys; print(json.load(sys.stdin)["entries"])'; }

log "creating the schema (first start of Concierge)"
timed_start "$WORK/concierge.yaml" "$WORK/concierge.log" "$ADMIN_PORT"
stop_pid "$CONCIERGE_PID" 10; untrack "$CONCIERGE_PID"

log "writing $ENTRIES entries into $DB with sqlite3"
fill_entries "$DB" "$UPSTREAM" "$ENTRIES" 200
rows=$(sqlite3 "$DB" "SELECT count(*) FROM cache_entry")
body_mib=$(sqlite3 "$DB" "SELECT sum(length(body)) / 1048576 FROM cache_entry")
db_mib=$(( $(stat -c %s "$DB") / 1048576 ))
log "$rows rows, bodies ${body_mib} MiB, file ${db_mib} MiB"

PROBE="http://127.0.0.1:$PROXY_PORT/api/items?n=$((ENTRIES - 3))"
declare -a clean_ms kill_ms loaded_s
for ((run = 1; run <= RUNS; run++)); do
    : > "$WORK/concierge.log"
    timed_start "$WORK/concierge.yaml" "$WORK/concierge.log" "$ADMIN_PORT"
    clean_ms+=("$READY_MS")
    [ "$(x_cache_of "$PROBE")" = HIT ] || die "a filled entry was not a HIT right after start-up"
    loaded_s+=("$(index_loaded "$WORK/concierge.log")")
    entries=$(stat_entries)
    [ "$entries" -ge "$rows" ] || die "/stats counts $entries entries, the file holds $rows"
    rss=$(( $(rss_kib "$CONCIERGE_PID") / 1024 ))
    # Misses being written when the daemon is killed.
    ( for i in $(seq 1 200); do curl -sS -o /dev/null --max-time 10 "http://127.0.0.1:$PROXY_PORT/api/items?killed=$run-$i" & done; wait )
    kill -9 "$CONCIERGE_PID"; wait "$CONCIERGE_PID" 2>/dev/null || true; untrack "$CONCIERGE_PID"
    : > "$WORK/concierge.log"
    timed_start "$WORK/concierge.yaml" "$WORK/concierge.log" "$ADMIN_PORT"
    kill_ms+=("$READY_MS")
    [ "$(x_cache_of "$PROBE")" = HIT ] || die "a filled entry was not a HIT right after a restart from kill -9"
    stop_pid "$CONCIERGE_PID" 10; untrack "$CONCIERGE_PID"
    log "run $run: ready ${clean_ms[-1]} ms after a clean stop, ${kill_ms[-1]} ms after kill -9; index loaded in ${loaded_s[-1]} s; RSS ${rss} MiB"
done

{
    echo
    echo "Start-up with $rows entries (bodies ${body_mib} MiB, file ${db_mib} MiB), $RUNS runs"
    echo "  /health ready after a clean stop (ms): ${clean_ms[*]}"
    echo "  /health ready after kill -9 (ms):      ${kill_ms[*]}"
    echo "  key index loaded in the background (s): ${loaded_s[*]}"
    echo "  RSS once loaded: ${rss} MiB"
} | tee "$OUT_DIR/summary.txt"
