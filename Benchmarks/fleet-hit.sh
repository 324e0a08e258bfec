#!/usr/bin/env bash
# Local HITs with and without a fleet: does fleet mode cost a cached request anything?
#
#   Benchmarks/fleet-hit.sh
#   SKIP_BUILD=1 RELEASE_DIR=.build/release DURATION=5s Benchmarks/fleet-hit.sh   # quick check
#
# One sample API, one throwaway PostgreSQL cluster (Debian's postgresql: initdb into the work
# dir, as the postgres user when run as root, on a free loopback port) and two Concierge
# daemons with the same configuration, except that the second has a `fleet:` section (with
# `shared_cache: true`, the most it can do) and is connected to PostgreSQL. Then, alternately,
# ROUNDS times: `wrk -t1 -c64 -d$DURATION --latency` on one cached URL of each (checked:
# X-Cache HIT), reporting req/s, p50, p99 and the daemon's CPU per request
# (utime+stime from /proc/PID/stat, before/after). By construction the hit path never calls
# PostgreSQL; this measures whatever else fleet mode adds (its heartbeat, its listener).
#
# SESSION_ROWS=N: N more session rows in the fleet (as many `per_client` instances stored by
# other nodes: keys `bench-row#N`, version 1, no tokens, so none is loaded here), written with
# one INSERT before the runs; then both daemons' CPU while idle over IDLE seconds (what the
# fleet's heartbeat costs a node with that many sessions), before the wrk rounds.
#
# Env: DURATION=10s CONNECTIONS=64 THREADS=1 ROUNDS=2 SESSION_ROWS=0 IDLE=10 SKIP_BUILD=0 RELEASE_DIR=.build/release
set -euo pipefail
. "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-2}
SESSION_ROWS=${SESSION_ROWS:-0}
IDLE=${IDLE:-10}

need_cmds wrk:wrk curl:curl python3:python3
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$PG_BIN" ]; then need_cmds pg_ctlcluster:postgresql; PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1); fi
ensure_release_build
make_workdir concierge-fleet-bench

# --- PostgreSQL ----------------------------------------------------------------------------
PG_PORT=$(free_port)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
mkdir -p "$WORK/pg"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$WORK/pg"
as_pg "$PG_BIN/initdb" -D "$WORK/pg/data" -U postgres --auth=trust -E UTF8 > "$WORK/initdb.log" 2>&1
as_pg "$PG_BIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/server.log" -w -t 30 \
    -o "-p $PG_PORT -k $WORK/pg -c listen_addresses=127.0.0.1 -c fsync=off" start > /dev/null
stop_pg() { as_pg "$PG_BIN/pg_ctl" -D "$WORK/pg/data" -m immediate -w -t 10 stop > /dev/null 2>&1 || true; }
trap 'rc=$?; stop_all; stop_pg; rm -rf "$WORK"; exit "$rc"' EXIT
as_pg "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE ROLE concierge LOGIN PASSWORD 'bench'"
as_pg "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE DATABASE concierge OWNER concierge"

# --- sample API and the two daemons ----------------------------------------------------------
SAMPLE_PORT=$(free_port)
HIT_PATH="/api/items?limit=1"
"$SAMPLE_BIN" --host 127.0.0.1 --port "$SAMPLE_PORT" > "$WORK/sample.log" 2>&1 &
SAMPLE_PID=$!; track "$SAMPLE_PID"
wait_http "http://127.0.0.1:$SAMPLE_PORT$HIT_PATH" "$SAMPLE_PID" "$WORK/sample.log"

declare -A PORT ADMIN ROOT
for daemon in alone fleet; do
    PORT[$daemon]=$(free_port); ADMIN[$daemon]=$(free_port)
    mkdir -p "$WORK/$daemon"
    write_concierge_config "$WORK/$daemon/concierge.yaml" "${PORT[$daemon]}" "${ADMIN[$daemon]}" \
        "http://127.0.0.1:$SAMPLE_PORT" "$WORK/$daemon/cache.sqlite" 64MB
done
head -c 32 /dev/urandom > "$WORK/fleet.key"; chmod 600 "$WORK/fleet.key"
cat >> "$WORK/fleet/concierge.yaml" <<EOF
fleet:
  postgres: "postgresql://concierge:bench@127.0.0.1:$PG_PORT/concierge?sslmode=disable"
  name: bench
  node: bench-1
  key_file: $WORK/fleet.key
  shared_cache: true
EOF
for daemon in alone fleet; do
    "$CONCIERGE_BIN" check-config --config "$WORK/$daemon/concierge.yaml" > /dev/null
    "$CONCIERGE_BIN" serve --config "$WORK/$daemon/concierge.yaml" > "$WORK/$daemon.log" 2>&1 &
    ROOT[$daemon]=$!; track "${ROOT[$daemon]}"
    wait_http "http://127.0.0.1:${ADMIN[$daemon]}/health" "${ROOT[$daemon]}" "$WORK/$daemon.log"
done
fleet_state=""
for _ in $(seq 1 50); do
    fleet_state=$(curl -fsS -H "Authorization: Bearer bench-admin-token" "http://127.0.0.1:${ADMIN[fleet]}/fleet" |
        python3 -c 'import json, sys; print(json.load(sys.stdin).get("state", ""))')
    [ "$fleet_state" = ok ] && break
    sleep 0.2
done
[ "$fleet_state" = ok ] || die "the fleet daemon never reached PostgreSQL (state: $fleet_state); see $WORK/fleet.log"
for daemon in alone fleet; do
    curl -fsS --max-time 10 -o /dev/null "http://127.0.0.1:${PORT[$daemon]}$HIT_PATH"
    status=$(x_cache "http://127.0.0.1:${PORT[$daemon]}$HIT_PATH")
    [ "$status" = HIT ] || die "$daemon did not answer a cache HIT on the second request (X-Cache: ${status:-none})"
done
log "$(binary_info); PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on :$PG_PORT; load $(cut -d' ' -f1-3 /proc/loadavg)"

# --- idle, with SESSION_ROWS more sessions in the fleet ----------------------------------------
if [ "$SESSION_ROWS" -gt 0 ]; then
    as_pg "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d concierge -qc \
        "INSERT INTO concierge.session (fleet, session_key, version) SELECT 'bench', 'bench-row#' || g, 1 FROM generate_series(1, $SESSION_ROWS) g"
    sleep 3  # the heartbeat after the insert reads the rows (once, or each second)
    declare -A IDLE_BEFORE
    for daemon in alone fleet; do IDLE_BEFORE[$daemon]=$(cpu_ticks "${ROOT[$daemon]}"); done
    sleep "$IDLE"
    for daemon in alone fleet; do
        after=$(cpu_ticks "${ROOT[$daemon]}")
        log "idle over ${IDLE} s with $SESSION_ROWS more session rows in the fleet: $daemon $(python3 -c \
            "print(f'{($after - ${IDLE_BEFORE[$daemon]}) * 1000 / $CLK_TCK / $IDLE:.1f}')") ms CPU per second"
    done
fi

# --- runs ------------------------------------------------------------------------------------
printf '%-6s %-5s %10s %8s %8s %12s %7s\n' daemon round "req/s" "p50 ms" "p99 ms" "CPU us/req" errors
declare -A SUM_RPS SUM_CPU
for round in $(seq 1 "$ROUNDS"); do
    for daemon in alone fleet; do
        out="$WORK/$daemon-$round.txt"
        before=$(cpu_ticks "${ROOT[$daemon]}")
        wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "http://127.0.0.1:${PORT[$daemon]}$HIT_PATH" > "$out"
        after=$(cpu_ticks "${ROOT[$daemon]}")
        requests=$(wrk_requests "$out")
        cpu=$(python3 -c "print(f'{($after - $before) * 1e6 / $CLK_TCK / max(1, $requests):.1f}')")
        rps=$(wrk_rps "$out")
        printf '%-6s %-5s %10s %8s %8s %12s %7s\n' "$daemon" "$round" "$rps" "$(wrk_pct_ms "$out" 50)" "$(wrk_pct_ms "$out" 99)" \
            "$cpu" "$(wrk_errors "$out")"
        SUM_RPS[$daemon]=$(python3 -c "print(${SUM_RPS[$daemon]:-0} + $rps)")
        SUM_CPU[$daemon]=$(python3 -c "print(${SUM_CPU[$daemon]:-0} + $cpu)")
    done
done
python3 - "${SUM_RPS[alone]}" "${SUM_RPS[fleet]}" "${SUM_CPU[alone]}" "${SUM_CPU[fleet]}" "$ROUNDS" <<'EOF'
import sys
ra, rf, ca, cf, n = map(float, sys.argv[1:])
print(f"mean over {int(n)} rounds: alone {ra/n:,.0f} req/s at {ca/n:.1f} us/req; fleet {rf/n:,.0f} req/s at {cf/n:.1f} us/req; "
      f"fleet/alone: {rf/ra:.3f}x req/s, {cf/ca:.3f}x CPU")
EOF
