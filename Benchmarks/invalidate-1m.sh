#!/usr/bin/env bash
# Regex invalidation over 1,000,000 cache entries while a HIT load runs (loopback only).
#
#   Benchmarks/invalidate-1m.sh
#
# 1. Starts Concierge (release) once on an empty state dir so that its own migrations create
#    the schema, then stops it.
# 2. Writes ENTRIES rows (default 1,000,000) straight into the SQLite file with sqlite3:
#    keys "GET http://127.0.0.1:PORT/api/items?n=N v=1", endpoint itemList, shared, status 200,
#    fresh for 1 h, a small JSON body - the rows the daemon itself would store for
#    GET /api/items?n=N, written in seconds instead of 1M upstream round trips.
# 3. Starts Concierge again (timing start-up with the full file), warms the HIT URL
#    (/api/items?n=hot, matched by neither pattern), measures a baseline HIT run, then runs
#    `wrk -t1 -c64 --latency` for DURATION (15 s: both calls take ~9 s on 2 cores) while POST /cache/invalidate is called with
#      {"pattern": "n=1[0-9]*5 "}   (n starts with 1, ends with 5: 11,111 of 1M)
#      {"pattern": "n=[0-9]*7 "}    (n ends with 7: 100,000 of 1M)
#    timing each call with curl (one after the other, from t=1s of the run), and checks the
#    removed counts.
#    BY=tags: every entry also carries the tag "d<last digit of n>" (cache_tag rows), and the two
#    calls are {"tags": ["d7"]} (100,000 of 1M) and {"tags": ["d3", "d5"]} (200,000), through the
#    tag index instead of a scan.
#
# Env: BY=pattern|tags ENTRIES=1000000 DURATION=15s CONNECTIONS=64 SKIP_BUILD=0 RELEASE_DIR=.build/release STATE_BASE=/tmp
#      OUT_DIR=bench-out/invalidate-1m-<time>
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ENTRIES=${ENTRIES:-1000000}
BY=${BY:-pattern}
case $BY in pattern | tags) ;; *) echo "BY must be pattern or tags" >&2; exit 2 ;; esac
DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-64}
OUT_DIR=${OUT_DIR:-$BENCH_REPO/bench-out/invalidate-1m-$(date +%Y%m%d-%H%M%S)}
TOKEN=bench-admin-token

need_cmds sqlite3:sqlite3 wrk:wrk curl:curl python3:python3
ensure_release_build
mkdir -p "$OUT_DIR"

make_workdir concierge-inv

SAMPLE_PORT=$(free_port)
PROXY_PORT=$(free_port)
ADMIN_PORT=$(free_port)
UPSTREAM="http://127.0.0.1:$SAMPLE_PORT"
DB="$WORK/state/cache.sqlite"

write_concierge_config "$WORK/concierge.yaml" "$PROXY_PORT" "$ADMIN_PORT" "$UPSTREAM" "$DB" 64MB 4GB warning

"$SAMPLE_BIN" --host 127.0.0.1 --port "$SAMPLE_PORT" > "$WORK/sample.log" 2>&1 &
SAMPLE_PID=$!; track "$SAMPLE_PID"
wait_http "$UPSTREAM/api/items?limit=1" "$SAMPLE_PID" "$WORK/sample.log"

start_concierge() {
    "$CONCIERGE_BIN" serve --config "$WORK/concierge.yaml" >> "$WORK/concierge.log" 2>&1 &
    CONCIERGE_PID=$!; track "$CONCIERGE_PID"
    wait_http "http://127.0.0.1:$ADMIN_PORT/health" "$CONCIERGE_PID" "$WORK/concierge.log" "${1:-30}"
}

# 1. schema from the daemon's own migrations
log "creating the schema (first start of Concierge)"
start_concierge
stop_pid "$CONCIERGE_PID" 10
BENCH_PIDS=("$SAMPLE_PID")
sqlite3 "$DB" "SELECT count(*) FROM cache_entry" > /dev/null || die "no cache_entry table in $DB"

# 2. bulk fill
log "writing $ENTRIES entries into $DB with sqlite3"
fill_start=$(date +%s.%N)
fill_entries "$DB" "$UPSTREAM" "$ENTRIES" 0 "$([ "$BY" = tags ] && echo 10 || echo 0)"
fill_s=$(awk -v a="$fill_start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
rows=$(sqlite3 "$DB" "SELECT count(*) FROM cache_entry")
db_mib=$(( $(stat -c %s "$DB") / 1048576 ))
log "$rows rows in ${fill_s}s, file ${db_mib} MiB"

# Expected removals, counted independently of Concierge over the same n values.
if [ "$BY" = tags ]; then
    P1='["g7"]'
    P2='["g3", "g5"]'
    E1=$(seq 0 $((ENTRIES - 1)) | grep -cE '7$' || true)
    E2=$(seq 0 $((ENTRIES - 1)) | grep -cE '[35]$' || true)
else
    P1='n=1[0-9]*5 '
    P2='n=[0-9]*7 '
    E1=$(seq 0 $((ENTRIES - 1)) | grep -cE '^1[0-9]*5$' || true)
    E2=$(seq 0 $((ENTRIES - 1)) | grep -cE '7$' || true)
fi

# 3. run
start_ts=$(date +%s.%N)
start_concierge 120
startup_s=$(awk -v a="$start_ts" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
stats=$(curl -fsS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$ADMIN_PORT/stats")
log "Concierge up in ${startup_s}s with $rows entries; /stats: $stats"

# A filled entry is served as a HIT without the upstream.
probe=$(curl -fsS -D - -o /dev/null "http://127.0.0.1:$PROXY_PORT/api/items?n=$((ENTRIES / 2 + 3))" | tr -d '\r' | awk 'tolower($1) == "x-cache:" {print $2}')
[ "$probe" = HIT ] || die "a pre-filled entry was not served from the cache (X-Cache: ${probe:-none}); key format changed?"

HIT_URL="http://127.0.0.1:$PROXY_PORT/api/items?n=hot"
curl -fsS -o /dev/null "$HIT_URL"
[ "$(curl -fsS -D - -o /dev/null "$HIT_URL" | tr -d '\r' | awk 'tolower($1) == "x-cache:" {print $2}')" = HIT ] || die "HIT URL not cached"

log "baseline: wrk -t1 -c$CONNECTIONS -d5s --latency (HIT, no invalidation)"
wrk -t1 -c"$CONNECTIONS" -d5s --latency "$HIT_URL" > "$OUT_DIR/wrk-baseline.txt"

invalidate() { # invalidate PATTERN OUTFILE -> prints seconds
    local body
    body=$(python3 -c 'import json, sys; print(json.dumps({"tags": json.loads(sys.argv[1])} if sys.argv[2] == "tags" else {"pattern": sys.argv[1]}))' "$1" "$BY")
    curl -sS --max-time 300 -o "$2" -w '%{http_code} %{time_total}' \
        -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
        -X POST --data "$body" "http://127.0.0.1:$ADMIN_PORT/cache/invalidate"
}

log "wrk -t1 -c$CONNECTIONS -d$DURATION --latency (HIT) with two invalidations"
cpu0=$(cpu_ticks "$CONCIERGE_PID")
wrk_start=$(date +%s.%N)
wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency "$HIT_URL" > "$OUT_DIR/wrk-during.txt" &
WRK_PID=$!; track "$WRK_PID"
sleep 1
r1=$(invalidate "$P1" "$WORK/inv1.json")
r2=$(invalidate "$P2" "$WORK/inv2.json")
inv_end=$(awk -v a="$wrk_start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
wait "$WRK_PID" || die "wrk failed"
BENCH_PIDS=("$SAMPLE_PID" "$CONCIERGE_PID")
cpu1=$(cpu_ticks "$CONCIERGE_PID")
rss=$(( $(rss_kib "$CONCIERGE_PID") / 1024 ))

removed1=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("removed", "?"))' "$WORK/inv1.json" 2>/dev/null || cat "$WORK/inv1.json")
removed2=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("removed", "?"))' "$WORK/inv2.json" 2>/dev/null || cat "$WORK/inv2.json")
left=$(curl -fsS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$ADMIN_PORT/stats" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("entries"))')
after_hit=$(curl -fsS -D - -o /dev/null "$HIT_URL" | tr -d '\r' | awk 'tolower($1) == "x-cache:" {print $2}')
gone=$(curl -fsS -D - -o /dev/null "http://127.0.0.1:$PROXY_PORT/api/items?n=17" | tr -d '\r' | awk 'tolower($1) == "x-cache:" {print $2}')

status=0
{
    echo
    echo "Invalidation over $rows entries (fill ${fill_s}s with sqlite3, ${db_mib} MiB file; Concierge start-up ${startup_s}s)"
    printf '%-22s %6s %10s %10s %10s\n' "$BY" HTTP "time s" removed expected
    set -- $r1; printf '%-22s %6s %10s %10s %10s\n' "\"$P1\"" "$1" "$2" "$removed1" "$E1"
    set -- $r2; printf '%-22s %6s %10s %10s %10s\n' "\"$P2\"" "$1" "$2" "$removed2" "$E2"
    echo
    printf '%-28s %9s %9s %9s %9s %9s %7s\n' "HIT load (-c$CONNECTIONS)" "req/s" "p50 ms" "p99 ms" "max ms" requests errors
    for f in baseline during; do
        o="$OUT_DIR/wrk-$f.txt"
        printf '%-28s %9.0f %9s %9s %9s %9s %7s\n' "$([ $f = baseline ] && echo "baseline 5s" || echo "during invalidation $DURATION")" \
            "$(wrk_rps "$o")" "$(wrk_pct_ms "$o" 50)" "$(wrk_pct_ms "$o" 99)" "$(wrk_max_ms "$o")" "$(wrk_requests "$o")" "$(wrk_errors "$o")"
    done
    echo
    echo "Concierge CPU during the run: $(awk -v d=$((cpu1 - cpu0)) -v hz="$CLK_TCK" 'BEGIN {printf "%.1f", d / hz}') s; RSS after: ${rss} MiB"
    echo "invalidations ran from t=1.0s to t=${inv_end}s of the ${DURATION} HIT run"
    echo "entries left (/stats): $left; HIT URL after: $after_hit; n=17 (removed) now: $gone"
    echo "raw wrk output: $OUT_DIR"
} | tee "$OUT_DIR/summary.txt"
[ "$removed1" = "$E1" ] || { log "FAIL: removed $removed1 for $P1, expected $E1"; status=1; }
[ "$removed2" = "$E2" ] || { log "FAIL: removed $removed2 for $P2, expected $E2"; status=1; }
[ "$after_hit" = HIT ] || { log "FAIL: the HIT URL was not a HIT after the invalidations"; status=1; }
[ "$gone" = MISS ] || { log "FAIL: n=17 should have been removed (X-Cache: $gone)"; status=1; }
exit "$status"
