#!/usr/bin/env bash
# What a dead or silent trace collector changes under load (loopback only).
#
#   Benchmarks/tracing.sh
#   SKIP_BUILD=1 RELEASE_DIR=.build/release DURATION=5s ROUNDS=1 Benchmarks/tracing.sh   # quick check
#
# Concierge (release) in front of a fast origin (nginx `return 200`, 1 KB JSON), in four
# configurations, each a daemon of its own:
#   off        no `telemetry:` section
#   live       `telemetry.traces` at sample_ratio 1.0, its endpoint a collector that takes every
#              export at once (nginx answering 200 with an empty protobuf reply): the baseline
#              for the two below
#   refused    sample_ratio 1.0, its endpoint a closed port (every export is refused at once)
#   silent     sample_ratio 1.0, its endpoint a port whose connections the kernel takes and
#              nobody answers (every export waits out export_timeout, 2 s here)
# For each, a HIT load (one cached URL) and a MISS load (a unique query per request) of
# `wrk -t1 -c64 --latency` for DURATION. Printed per run: requests/s, p50, p99, max, failed
# requests (non-2xx and socket errors), and `concierge_trace_spans_dropped_total`. The
# configurations take turns ROUNDS times (off, live, refused, silent, off, ...), so a drift in
# the machine's load falls on all four alike.
#
# Env: DURATION=10s CONNECTIONS=64 ROUNDS=2 STATE_BASE=/tmp SKIP_BUILD=0 RELEASE_DIR=.build/release
#      OUT_DIR=bench-out/tracing-<time>
set -euo pipefail
. "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
ROUNDS=${ROUNDS:-2}
OUT_DIR=${OUT_DIR:-$BENCH_REPO/bench-out/tracing-$(date +%Y%m%d-%H%M%S)}

need_cmds wrk:wrk curl:curl python3:python3 nginx:nginx
ensure_release_build
mkdir -p "$OUT_DIR"
make_workdir concierge-tracing

ORIGIN_PORT=$(free_port)
start_fast_origin "$WORK/origin" "$ORIGIN_PORT" > "$WORK/origin.log" 2>&1 &
ORIGIN_PID=$!; track "$ORIGIN_PID"
wait_http "http://127.0.0.1:$ORIGIN_PORT/api/items" "$ORIGIN_PID" "$WORK/origin.log"
write_miss_lua "$WORK/miss.lua"

# A collector that takes every export (nginx: 200, an empty ExportTraceServiceResponse).
LIVE_PORT=$(free_port)
nginx_conf "$WORK/collector" "worker_processes 1;" "    server {
        listen 127.0.0.1:$LIVE_PORT;
        client_max_body_size 64m;
        location / { default_type application/x-protobuf; return 200 ''; }
    }"
nginx -e "$WORK/collector/error.log" -c "$WORK/collector/nginx.conf" -p "$WORK/collector/" > "$WORK/collector.log" 2>&1 &
track $!
wait_http "http://127.0.0.1:$LIVE_PORT/" "$!" "$WORK/collector.log"

# A closed port (bound for a moment, then released) and a silent one (listening, never accepting).
REFUSED_PORT=$(free_port)
SILENT_PORT=$(free_port)
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4096)
time.sleep(1e9)' "$SILENT_PORT" &
track $!

traces() { # traces PORT: the telemetry section for a collector on PORT
    printf 'telemetry:\n  traces:\n    endpoint: http://127.0.0.1:%s\n    sample_ratio: 1.0\n    export_delay: 1s\n    export_timeout: 2s\n' "$1"
}

# The telemetry sections of the three configurations (off: none).
: > "$WORK/off.yaml"
traces "$LIVE_PORT" > "$WORK/live.yaml"
traces "$REFUSED_PORT" > "$WORK/refused.yaml"
traces "$SILENT_PORT" > "$WORK/silent.yaml"

dropped() { # dropped ADMIN_PORT: concierge_trace_spans_dropped_total
    curl -fsS --max-time 10 -H "Authorization: Bearer bench-admin-token" "http://127.0.0.1:$1/metrics" \
        | awk '$1 == "concierge_trace_spans_dropped_total" {print $2; found = 1} END {if (!found) print 0}'
}

SUMMARY="$OUT_DIR/summary.txt"
{
    echo "tracing under load: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), binary $(binary_info)"
    echo "wrk -t1 -c$CONNECTIONS -d$DURATION --latency; origin nginx return 200, 1 KB JSON"
    printf '%-8s %-5s %5s %10s %8s %8s %9s %7s %8s\n' config load round req/s p50_ms p99_ms max_ms failed dropped
} | tee "$SUMMARY"
for ((round = 1; round <= ROUNDS; round++)); do
    for name in off live refused silent; do
        start_cached_concierge "$name" "http://127.0.0.1:$ORIGIN_PORT" "$WORK/$name.yaml" "$CONCIERGE_BIN"
        for kind in HIT MISS; do
            args=(); [ "$kind" = MISS ] && args=(-s "$WORK/miss.lua")
            out="$WORK/wrk-$name-$kind-$round.txt"
            run_waited wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency "${args[@]}" \
                "http://127.0.0.1:$PROXY_PORT/api/items?limit=1" -- "$name$round$RANDOM" > "$out" 2>&1 || die "wrk failed: $(cat "$out")"
            printf '%-8s %-5s %5s %10s %8s %8s %9s %7s %8s\n' "$name" "$kind" "$round" "$(wrk_rps "$out")" "$(wrk_pct_ms "$out" 50)" \
                "$(wrk_pct_ms "$out" 99)" "$(wrk_max_ms "$out")" "$(wrk_errors "$out")" "$(dropped "$ADMIN_PORT")" | tee -a "$SUMMARY"
        done
        stop_pid "$PID"; untrack "$PID"
    done
done
echo "summary: $SUMMARY"
