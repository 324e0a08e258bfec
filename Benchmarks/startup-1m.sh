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

# timed_start LABEL: spawns Concierge and polls /health every 5 ms from the spawn; sets
# CONCIERGE_PID and READY_MS.
timed_start() {
    : > "$WORK/concierge.log"
    READY_MS=$(python3 - "$CONCIERGE_BIN" "$WORK/concierge.yaml" "$WORK/concierge.log" "$ADMIN_PORT" "$WORK/pid" <<'PY'
import http.client, subprocess, sys, time
binary, config, logfile, port, pidfile = sys.argv[1:6]
out = open(logfile, "ab")
began = time.monotonic()
proc = subprocess.Popen([binary, "serve", "--config", config], stdout=out, stderr=out, start_new_session=True)
open(pidfile, "w").write(str(proc.pid))
while time.monotonic() - began < 120:
    if proc.poll() is not None:
        sys.exit("exited with %d" % proc.returncode)
    try:
        c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=1)
        c.request("GET", "/health")
        if c.getresponse().status == 200:
            print("%.0f" % ((time.monotonic() - began) * 1000))
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.005)
sys.exit("no /health after 120 s")
PY
    ) || die "Concierge did not start: $(tail -5 "$WORK/concierge.log")"
    CONCIERGE_PID=$(cat "$WORK/pid"); track "$CONCIERGE_PID"
}

# index_loaded: waits (60 s at most) for the writer's "cache index loaded" line; prints its seconds.
index_loaded() {
    local i
    for ((i = 0; i < 600; i++)); do
        if grep -q "cache index loaded" "$WORK/concierge.log"; then
            grep "cache index loaded" "$WORK/concierge.log" | tail -1 | grep -o 'seconds[=": ]*[0-9.]*' | grep -o '[0-9.]*$'
            return 0
        fi
        sleep 0.1
    done
    echo "never"
}

x_cache_of() { curl -fsS -D - -o /dev/null "$1" | tr -d '\r' | awk 'tolower($1) == "x-cache:" {print $2}'; }
stat_entries() { curl -fsS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$ADMIN_PORT/stats" | python3 -c 'import json, sys; print(json.load(sys.stdin)["entries"])'; }

log "creating the schema (first start of Concierge)"
timed_start
stop_pid "$CONCIERGE_PID" 10; untrack "$CONCIERGE_PID"

log "writing $ENTRIES entries into $DB with sqlite3"
sqlite3 "$DB" > /dev/null <<EOF
PRAGMA journal_mode = WAL;
PRAGMA synchronous = OFF;
BEGIN;
WITH RECURSIVE c(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM c WHERE n < $ENTRIES - 1)
INSERT INTO cache_entry (key, endpoint, user_id, status, stored_at, ttl, swr, sie, usable_until,
                         version, size, last_access, headers, body)
SELECT 'GET $UPSTREAM/api/items?n=' || n || ' v=1', 'itemList', NULL, 200,
       strftime('%s', 'now'), 3600, 0, 0, strftime('%s', 'now') + 3600,
       1, 400, strftime('%s', 'now'), '[["Content-Type","application/json"]]',
       CAST('{"code":200,"data":{"list":[{"id":' || n || ',"name":"item ' || n || '","tags":["a","b","c"],"note":"' || printf('%.200c', 'x') || '"}],"served":1,"total":1000},"msg":"ok"}' AS BLOB)
FROM c;
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
EOF
rows=$(sqlite3 "$DB" "SELECT count(*) FROM cache_entry")
body_mib=$(sqlite3 "$DB" "SELECT sum(length(body)) / 1048576 FROM cache_entry")
db_mib=$(( $(stat -c %s "$DB") / 1048576 ))
log "$rows rows, bodies ${body_mib} MiB, file ${db_mib} MiB"

PROBE="http://127.0.0.1:$PROXY_PORT/api/items?n=$((ENTRIES - 3))"
declare -a clean_ms kill_ms loaded_s
for ((run = 1; run <= RUNS; run++)); do
    timed_start
    clean_ms+=("$READY_MS")
    [ "$(x_cache_of "$PROBE")" = HIT ] || die "a filled entry was not a HIT right after start-up"
    loaded_s+=("$(index_loaded)")
    entries=$(stat_entries)
    [ "$entries" -ge "$rows" ] || die "/stats counts $entries entries, the file holds $rows"
    rss=$(( $(rss_kib "$CONCIERGE_PID") / 1024 ))
    # Misses being written when the daemon is killed.
    ( for i in $(seq 1 200); do curl -sS -o /dev/null --max-time 10 "http://127.0.0.1:$PROXY_PORT/api/items?killed=$run-$i" & done; wait )
    kill -9 "$CONCIERGE_PID"; wait "$CONCIERGE_PID" 2>/dev/null || true; untrack "$CONCIERGE_PID"
    timed_start
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
