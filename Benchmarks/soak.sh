#!/usr/bin/env bash
# A mixed soak of the release build against the sample API (loopback only): for
# SOAK_SECONDS (default 600) wrk drives hits, misses, GBK queries, JSON bodies with long
# number literals and a logged-in endpoint (Benchmarks/soak.lua) while a side loop logs in
# repeatedly, invalidates (patterns, endpoints, a runaway pattern that must be refused with 422),
# reloads with SIGHUP and switches environments. Access tokens live 5 s, so they expire and
# are renewed and replayed throughout.
#
# Reported: requests, req/s, unexpected replies (wrk's non-2xx and socket errors, side-loop
# replies that are not what the call expects), warning and error lines in the daemon's log,
# RSS at the start and the end.
#
#   Benchmarks/soak.sh                 # 10 minutes
#   SOAK_SECONDS=60 SKIP_BUILD=1 Benchmarks/soak.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_cmds wrk:wrk curl:curl
ensure_release_build
SECONDS_TOTAL=${SOAK_SECONDS:-600}
WORK=$(mktemp -d)
trap 'stop_all; rm -rf "$WORK"' EXIT

SAMPLE_PORT=$(free_port); PROXY_PORT=$(free_port); ADMIN_PORT=$(free_port)
"$SAMPLE_BIN" --host 127.0.0.1 --port "$SAMPLE_PORT" --access-token-ttl 5 > "$WORK/sample.log" 2>&1 &
track $!; SAMPLE_PID=$!
sed -e "s/127.0.0.1:8080/127.0.0.1:$PROXY_PORT/; s/127.0.0.1:8081/127.0.0.1:$ADMIN_PORT/" \
    -e "s#http://127.0.0.1:9000#http://127.0.0.1:$SAMPLE_PORT\n  mirror: http://127.0.0.1:$SAMPLE_PORT#" \
    -e "s#./.concierge/demo.sqlite#$WORK/soak.sqlite#; s/level: info/level: warning/; s/requests: true/requests: false/" \
    "$BENCH_REPO/Config/demo.yaml" > "$WORK/concierge.yaml"
"$CONCIERGE_BIN" check-config --config "$WORK/concierge.yaml" > /dev/null
"$CONCIERGE_BIN" serve --config "$WORK/concierge.yaml" > "$WORK/concierge.log" 2>&1 &
track $!; PID=$!
wait_http "http://127.0.0.1:$ADMIN_PORT/health" "$PID" "$WORK/concierge.log"
wait_http "http://127.0.0.1:$SAMPLE_PORT/api/items" "$SAMPLE_PID" "$WORK/sample.log"

ADMIN=(-sS --max-time 15 -H "Authorization: Bearer demo-admin-token")
PROXY="http://127.0.0.1:$PROXY_PORT"
unexpected=0; side_calls=0
expect() { # expect WANTED_STATUS DESCRIPTION CURL_ARGS...: counts a reply that is not WANTED
    local want=$1 what=$2 got; shift 2
    got=$(curl -s -o /dev/null -w '%{http_code}' --max-time 15 "$@" || echo 000)
    side_calls=$((side_calls + 1))
    if [ "$got" != "$want" ]; then unexpected=$((unexpected + 1)); log "unexpected: $what → $got (wanted $want)"; fi
}
curl -s -o /dev/null -X POST -d 'username=alice&password=secret' "$PROXY/api/login"
rss_start=$(rss_kib "$PID")
log "soak: ${SECONDS_TOTAL}s of wrk -t2 -c32 (Benchmarks/soak.lua) plus a side loop"
wrk -t2 -c32 -d"${SECONDS_TOTAL}s" -s "$BENCH_REPO/Benchmarks/soak.lua" "$PROXY" > "$WORK/wrk.txt" 2>&1 &
track $!; WRK_PID=$!
round=0
sleep 2  # entries to match first (the runaway pattern needs a key with a 20-digit run)
while kill -0 "$WRK_PID" 2>/dev/null; do
    round=$((round + 1))
    expect 200 "login" -X POST -d 'username=alice&password=secret' "$PROXY/api/login"
    expect 200 "user info" "$PROXY/api/user/info"
    expect 200 "pattern invalidation" "${ADMIN[@]}" -X POST -d '{"pattern": "miss=[0-9]+-[0-9]*[05] "}' "http://127.0.0.1:$ADMIN_PORT/cache/invalidate"
    expect 200 "endpoint invalidation" "${ADMIN[@]}" -X POST -d '{"endpoint": "item"}' "http://127.0.0.1:$ADMIN_PORT/cache/invalidate"
    expect 422 "runaway pattern" "${ADMIN[@]}" -X POST -d '{"pattern": "(?:[0-9]+)+$"}' "http://127.0.0.1:$ADMIN_PORT/cache/invalidate"
    expect 200 "health" "http://127.0.0.1:$ADMIN_PORT/health"
    if [ $((round % 10)) = 0 ]; then kill -HUP "$PID"; fi
    if [ $((round % 15)) = 0 ]; then
        env=$([ $((round % 30)) = 0 ] && echo debug || echo mirror)
        expect 200 "environment $env" "${ADMIN[@]}" -X PUT -d "{\"environment\": \"$env\"}" "http://127.0.0.1:$ADMIN_PORT/environment"
    fi
    sleep 1
done
wait "$WRK_PID" || true; untrack "$WRK_PID"
rss_end=$(rss_kib "$PID")
requests=$(wrk_requests "$WORK/wrk.txt"); rps=$(wrk_rps "$WORK/wrk.txt"); errors=$(wrk_errors "$WORK/wrk.txt")
warnings=$(grep -ciE 'warning|error|critical' "$WORK/concierge.log" || true)
cat "$WORK/wrk.txt" >&2
grep -iE 'warning|error|critical' "$WORK/concierge.log" | sed 's/^.*\(warning\|error\|critical\)/\1/I' | cut -c1-120 | sort | uniq -c | sort -rn | head -10 >&2 || true
echo "soak ${SECONDS_TOTAL}s: $requests proxy requests ($rps req/s), non-2xx or socket errors $errors;" \
     "side loop $side_calls calls ($round rounds), unexpected $unexpected; daemon log warning/error lines $warnings;" \
     "RSS $((rss_start / 1024)) → $((rss_end / 1024)) MiB"
