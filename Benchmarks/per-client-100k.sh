#!/usr/bin/env bash
# 100,000 stored `per_client` instances: the daemon's RSS, its start-up time to /health 200,
# and the time one instance takes to load on its first use (loopback only). Numbers, no verdict.
#
#   Benchmarks/per-client-100k.sh
#   SKIP_BUILD=1 RELEASE_DIR=.build/debug Benchmarks/per-client-100k.sh   # a debug build (say so)
#
# 1. Starts Concierge once on an empty state dir (its migrations create the schema), stops it.
# 2. Writes INSTANCES rows into `named_session` (Python's sqlite3): the keys the daemon makes
#    (`default#` and the first 12 bytes of the id's SHA-256 in hex) for the ids
#    `bench-instance-NNNNNNNN`, each with tokens and a last use.
# 3. RUNS times: starts Concierge and times /health 200 from the spawn (timed_start), reads
#    VmRSS once quiet; fills one shared cache entry (GET /api/items?limit=1); then, on one
#    keep-alive connection, SAMPLE requests for that entry, each with a different stored id
#    (each a first use: the instance is read from SQLite), then the same SAMPLE again (loaded,
#    hot-tier hits), then SAMPLE without the header (no instance). The difference of the first
#    two medians is what loading one instance costs a request.
#    VmRSS again after the first uses; the daemon's own time of each request (the request
#    log's total_ms) beside the client's; the daemon is stopped with SIGTERM.
#
# REQUEST_LOG=0: no request log (level warning), so no daemon-side times; the client's times
# then leave out the log line each request writes.
#
# Env: INSTANCES=100000 RUNS=3 SAMPLE=2000 REQUEST_LOG=1 SKIP_BUILD=0 RELEASE_DIR=.build/release STATE_BASE=/tmp
#      OUT_DIR=bench-out/per-client-100k-<time>
set -euo pipefail
. "$(dirname "$0")/lib.sh"

INSTANCES=${INSTANCES:-100000}
RUNS=${RUNS:-3}
SAMPLE=${SAMPLE:-2000}
REQUEST_LOG=${REQUEST_LOG:-1}
OUT_DIR=${OUT_DIR:-$BENCH_REPO/bench-out/per-client-100k-$(date +%Y%m%d-%H%M%S)}

need_cmds curl:curl python3:python3
ensure_release_build
mkdir -p "$OUT_DIR"
make_workdir concierge-per-client

SAMPLE_PORT=$(free_port)
PROXY_PORT=$(free_port)
ADMIN_PORT=$(free_port)
UPSTREAM="http://127.0.0.1:$SAMPLE_PORT"
DB="$WORK/state/cache.sqlite"

cat > "$WORK/concierge.yaml" <<EOF
listen:
  proxy: 127.0.0.1:$PROXY_PORT
  admin: 127.0.0.1:$ADMIN_PORT
admin:
  token: bench-admin-token
storage:
  path: $DB
  memory_bytes: 64MB
upstreams:
  debug: $UPSTREAM
environment: debug
session:
  per_client: { header: Concierge-Session, max: 1000000, idle: 30d }
  inject: [{ header: Authorization, format: "Bearer {access_token}" }]
endpoints:
  - name: itemList
    match: GET /api/items
    cache: { ttl: 1h, scope: shared }
log:
  format: text
  level: $([ "$REQUEST_LOG" = 1 ] && echo info || echo warning)
  requests: $([ "$REQUEST_LOG" = 1 ] && echo true || echo false)
EOF

"$SAMPLE_BIN" --host 127.0.0.1 --port "$SAMPLE_PORT" > "$WORK/sample.log" 2>&1 &
SAMPLE_PID=$!; track "$SAMPLE_PID"
wait_http "$UPSTREAM/api/items?limit=1" "$SAMPLE_PID" "$WORK/sample.log"

log "creating the schema (first start of Concierge)"
timed_start "$WORK/concierge.yaml" "$WORK/concierge.log" "$ADMIN_PORT"
stop_pid "$CONCIERGE_PID" 10; untrack "$CONCIERGE_PID"

log "writing $INSTANCES per_client instances into $DB"
python3 - "$DB" "$INSTANCES" <<'PY'
import hashlib, sqlite3, sys, time
db, count = sys.argv[1], int(sys.argv[2])
now = time.time()
con = sqlite3.connect(db)
rows = []
for n in range(count):
    ident = "bench-instance-%08d" % n
    key = "default#" + hashlib.sha256(ident.encode()).digest()[:12].hex()
    rows.append((key, "at-%040d" % n, "rt-%040d" % n, "user-%d" % n, now, "user", now + 3600, None, now))
con.executemany("INSERT INTO named_session (key, access_token, refresh_token, user_id, set_at, kind, expires_at, subject, last_used)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
con.commit()
print(con.execute("SELECT count(*) FROM named_session").fetchone()[0], file=sys.stderr)
PY
db_mib=$(( $(stat -c %s "$DB") / 1048576 ))

# first_uses: SAMPLE requests with distinct stored ids (first uses), the same again, and as
# many without the header; prints "first_median first_p90 loaded_median loaded_p90
# plain_median plain_p90 errors" in ms.
first_uses() {
    python3 - "$PROXY_PORT" "$SAMPLE" "$INSTANCES" "$1" <<'PY'
import http.client, statistics, sys, time
port, sample, count, run = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ids = ["bench-instance-%08d" % ((run * sample + i) % count) for i in range(sample)]
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
errors = 0
def timed(ident):
    global errors
    began = time.perf_counter()
    conn.request("GET", "/api/items?limit=1", headers={"Concierge-Session": ident} if ident else {})
    reply = conn.getresponse(); reply.read()
    if reply.status != 200: errors += 1
    return (time.perf_counter() - began) * 1000
first = [timed(i) for i in ids]
loaded = [timed(i) for i in ids]
plain = [timed(None) for _ in ids]
p90 = lambda xs: sorted(xs)[int(len(xs) * 0.9)]
print("%.3f %.3f %.3f %.3f %.3f %.3f %d" % (statistics.median(first), p90(first), statistics.median(loaded), p90(loaded),
                                            statistics.median(plain), p90(plain), errors))
PY
}

# server_times LOG: the daemon's own time (the request log's total_ms, from the head read to the
# reply written) of the last 3 x SAMPLE requests: medians of the first uses, loaded, without.
server_times() {
    python3 - "$1" "$SAMPLE" <<'PY'
import re, statistics, sys
times = [float(m.group(1)) for line in open(sys.argv[1]) if "concierge.request" in line
         for m in [re.search(r"total_ms=([0-9.]+)", line)] if m]
n = int(sys.argv[2])
parts = [times[-3 * n:-2 * n], times[-2 * n:-n], times[-n:]]
print(" ".join("%.3f" % statistics.median(p) for p in parts))
PY
}

declare -a server_first server_loaded server_plain
declare -a ready_ms rss_start rss_after first_med first_p90 loaded_med loaded_p90 plain_med plain_p90
for ((run = 1; run <= RUNS; run++)); do
    : > "$WORK/concierge.log"
    timed_start "$WORK/concierge.yaml" "$WORK/concierge.log" "$ADMIN_PORT"
    ready_ms+=("$READY_MS")
    wait_quiet "$CONCIERGE_PID" > /dev/null
    rss_start+=("$(( $(rss_kib "$CONCIERGE_PID") / 1024 ))")
    live=$(curl -fsS -H "Authorization: Bearer bench-admin-token" "http://127.0.0.1:$ADMIN_PORT/sessions/default" \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["instances"]["live"])')
    [ "$live" -ge "$INSTANCES" ] || die "/sessions/default counts $live live instances, $INSTANCES are stored"
    curl -fsS -o /dev/null "http://127.0.0.1:$PROXY_PORT/api/items?limit=1"
    read -r fm fp lm lp pm pp errors < <(first_uses "$run")
    [ "$errors" = 0 ] || die "$errors requests were not answered 200"
    first_med+=("$fm"); first_p90+=("$fp"); loaded_med+=("$lm"); loaded_p90+=("$lp"); plain_med+=("$pm"); plain_p90+=("$pp")
    rss_after+=("$(( $(rss_kib "$CONCIERGE_PID") / 1024 ))")
    if [ "$REQUEST_LOG" = 1 ]; then
        read -r sf sl sp < <(server_times "$WORK/concierge.log")
        server_first+=("$sf"); server_loaded+=("$sl"); server_plain+=("$sp")
    fi
    stop_pid "$CONCIERGE_PID" 10; untrack "$CONCIERGE_PID"
    log "run $run: /health after ${READY_MS} ms; RSS ${rss_start[-1]} MiB, ${rss_after[-1]} MiB after $SAMPLE first uses;" \
        "first use ${fm} ms (p90 ${fp}), loaded ${lm} ms (p90 ${lp})"
done

{
    echo
    echo "$INSTANCES stored per_client instances (file ${db_mib} MiB), $RUNS runs; $(binary_info)"
    echo "  /health ready after start (ms):                  ${ready_ms[*]}"
    echo "  RSS once started (MiB):                          ${rss_start[*]}"
    echo "  RSS after $SAMPLE first uses (MiB):               ${rss_after[*]}"
    echo "  request with a first use, median / p90 (ms):     ${first_med[*]} / ${first_p90[*]}"
    echo "  request with the instance loaded, median / p90:  ${loaded_med[*]} / ${loaded_p90[*]}"
    echo "  request without an instance, median / p90:       ${plain_med[*]} / ${plain_p90[*]}"
    [ "$REQUEST_LOG" = 1 ] && echo "  in the daemon (request log total_ms), medians: first use ${server_first[*]}; loaded ${server_loaded[*]}; without ${server_plain[*]}"
    [ "$REQUEST_LOG" = 1 ] && echo "  (with the request log on, every line is scrubbed of every loaded instance's tokens: the client's times include that)"
    true
} | tee "$OUT_DIR/summary.txt"
