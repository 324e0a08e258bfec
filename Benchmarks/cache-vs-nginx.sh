#!/usr/bin/env bash
# Concierge vs nginx (proxy_cache) in front of the same sample API, on loopback only.
#
#   Benchmarks/cache-vs-nginx.sh
#
# Builds the release binaries first (swift build -c release: ~5 min on 2 cores from
# scratch; SKIP_BUILD=1 RELEASE_DIR=dir uses binaries already built), installs nginx and wrk
# with apt-get when missing, then for each server measures with `wrk -t1 -c64 -d10s --latency`:
#   HIT   the same URL again and again (cached after one warm-up request);
#   MISS  a unique query per request (/api/items?limit=1&run=R&n=<counter>), so every
#         request misses and goes to the sample API (whose CPU is reported apart).
# Reported per run: req/s, p99, server CPU time per request (utime+stime from /proc/PID/stat
# before and after; nginx = master + worker), server RSS after the run (VmRSS), errors;
# then the Concierge/nginx ratios. Raw wrk output goes to bench-out/.
#
# Both caches (Concierge's SQLite file, nginx's proxy_cache_path) live in one temporary
# directory under STATE_BASE (default $TMPDIR or /tmp). Creating one file per entry is
# what nginx's cache does on a MISS, and on some virtual disks that costs far more kernel
# time than SQLite's appends to its WAL: STATE_BASE=/dev/shm puts both on tmpfs to compare
# the proxies without the disk.
#
# Env: DURATION=10s CONNECTIONS=64 THREADS=1 SKIP_BUILD=0 RELEASE_DIR=.build/release
#      STATE_BASE=/tmp OUT_DIR=bench-out/cache-vs-nginx-<time>
set -euo pipefail
. "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-1}
OUT_DIR=${OUT_DIR:-$BENCH_REPO/bench-out/cache-vs-nginx-$(date +%Y%m%d-%H%M%S)}

need_cmds nginx:nginx wrk:wrk curl:curl python3:python3
ensure_release_build
mkdir -p "$OUT_DIR"

STATE_BASE=${STATE_BASE:-${TMPDIR:-/tmp}}
make_workdir concierge-bench

SAMPLE_PORT=$(free_port)
CONCIERGE_PORT=$(free_port)
ADMIN_PORT=$(free_port)
NGINX_PORT=$(free_port)

# --- sample API ----------------------------------------------------------------------
"$SAMPLE_BIN" --host 127.0.0.1 --port "$SAMPLE_PORT" > "$WORK/sample.log" 2>&1 &
SAMPLE_PID=$!; track "$SAMPLE_PID"
wait_http "http://127.0.0.1:$SAMPLE_PORT/api/items?limit=1" "$SAMPLE_PID" "$WORK/sample.log"

# --- Concierge -------------------------------------------------------------------------
mkdir -p "$WORK/concierge"
cat > "$WORK/concierge/concierge.yaml" <<EOF
listen:
  proxy: 127.0.0.1:$CONCIERGE_PORT
  admin: 127.0.0.1:$ADMIN_PORT
admin:
  token: bench-admin-token
storage:
  path: $WORK/concierge/cache.sqlite
  max_bytes: 2GB
  memory_bytes: 64MB
upstreams:
  debug: http://127.0.0.1:$SAMPLE_PORT
environment: debug
endpoints:
  - name: itemList
    match: GET /api/items
    cache: { ttl: 1h }
log:
  format: text
  level: warning
  requests: false
EOF
"$CONCIERGE_BIN" check-config --config "$WORK/concierge/concierge.yaml" > /dev/null
"$CONCIERGE_BIN" serve --config "$WORK/concierge/concierge.yaml" > "$WORK/concierge.log" 2>&1 &
CONCIERGE_PID=$!; track "$CONCIERGE_PID"
wait_http "http://127.0.0.1:$ADMIN_PORT/health" "$CONCIERGE_PID" "$WORK/concierge.log"

# --- nginx -------------------------------------------------------------------------------
mkdir -p "$WORK/nginx/cache" "$WORK/nginx/tmp"
nginx_user=""
if [ "$(id -u)" = 0 ]; then
    # Workers drop to nobody: they must be able to write the cache and temp dirs.
    nginx_user="user nobody nogroup;"
    chown -R nobody:nogroup "$WORK/nginx/cache" "$WORK/nginx/tmp"
fi
cat > "$WORK/nginx/nginx.conf" <<EOF
$nginx_user
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx/tmp/body;
    proxy_temp_path $WORK/nginx/tmp/proxy;
    fastcgi_temp_path $WORK/nginx/tmp/fastcgi;
    uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
    scgi_temp_path $WORK/nginx/tmp/scgi;
    proxy_cache_path $WORK/nginx/cache levels=1:2 keys_zone=bench:32m max_size=2g inactive=1h use_temp_path=off;
    upstream sample {
        server 127.0.0.1:$SAMPLE_PORT;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://sample;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache bench;
            proxy_cache_key \$request_uri;
            proxy_cache_valid 200 1h;
            proxy_cache_lock on;
            add_header X-Cache \$upstream_cache_status;
        }
    }
}
EOF
nginx -t -q -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx/"
nginx -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx/" > "$WORK/nginx.log" 2>&1 &
NGINX_PID=$!; track "$NGINX_PID"
wait_http "http://127.0.0.1:$NGINX_PORT/api/items?limit=1" "$NGINX_PID" "$WORK/nginx.log"
nginx_pids() { echo "$NGINX_PID" $(pgrep -P "$NGINX_PID" || true); }

# --- sanity: both cache --------------------------------------------------------------------
HIT_PATH="/api/items?limit=1"
for target in "concierge $CONCIERGE_PORT" "nginx $NGINX_PORT"; do
    set -- $target
    curl -fsS -o /dev/null "http://127.0.0.1:$2$HIT_PATH"    # warm-up: stores the entry
    status=$(curl -fsS -D - -o /dev/null "http://127.0.0.1:$2$HIT_PATH" | tr -d '\r' | awk 'tolower($1) == "x-cache:" {print $2}')
    [ "$status" = HIT ] || die "$1 did not answer a cache HIT on the second request (X-Cache: ${status:-none})"
done

cat > "$WORK/miss.lua" <<'EOF'
-- Every request gets a query string never seen before: a miss on any cache.
local counter = 0
local run = "x"
function init(args) run = args[1] or "x" end
function request()
    counter = counter + 1
    return wrk.format("GET", "/api/items?limit=1&run=" .. run .. "&n=" .. counter)
end
EOF

log "servers: sample API :$SAMPLE_PORT (pid $SAMPLE_PID), Concierge :$CONCIERGE_PORT (pid $CONCIERGE_PID), nginx :$NGINX_PORT (pids $(nginx_pids))"
log "caches in $WORK ($(stat -f -c %T "$WORK") file system)"
log "load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"

# run NAME SERVER PORT KIND PIDS...: one wrk run; appends a result row
RESULTS=()
run() {
    local server=$1 port=$2 kind=$3; shift 3
    local pids=("$@") out="$OUT_DIR/$server-$kind.txt" args=()
    [ "$kind" = MISS ] && args=(-s "$WORK/miss.lua")
    local c0 s0 c1 s1 k0 k1
    c0=$(cpu_ticks "${pids[@]}"); s0=$(cpu_ticks "$SAMPLE_PID"); k0=$(sys_ticks "${pids[@]}")
    log "wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency $kind -> $server"
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "${args[@]}" "http://127.0.0.1:$port$HIT_PATH" -- "$server$RANDOM" > "$out"
    c1=$(cpu_ticks "${pids[@]}"); s1=$(cpu_ticks "$SAMPLE_PID"); k1=$(sys_ticks "${pids[@]}")
    local n rps p99 rss err cpu_us up_us
    n=$(wrk_requests "$out"); rps=$(wrk_rps "$out"); p99=$(wrk_pct_ms "$out" 99)
    err=$(wrk_errors "$out"); rss=$(rss_kib "${pids[@]}")
    cpu_us=$(awk -v d=$((c1 - c0)) -v n="$n" -v hz="$CLK_TCK" 'BEGIN {printf "%.1f", n ? d / hz * 1e6 / n : 0}')
    up_us=$(awk -v d=$((s1 - s0)) -v n="$n" -v hz="$CLK_TCK" 'BEGIN {printf "%.1f", n ? d / hz * 1e6 / n : 0}')
    local sys_pct
    sys_pct=$(awk -v k=$((k1 - k0)) -v c=$((c1 - c0)) 'BEGIN {printf "%.0f", c ? 100 * k / c : 0}')
    echo "server CPU: $((c1 - c0)) ticks ($((k1 - k0)) system) at $CLK_TCK/s; sample API: $((s1 - s0)) ticks" >> "$out"
    RESULTS+=("$kind $server $rps $p99 $cpu_us $((rss / 1024)) $up_us $err $n $sys_pct")
}

run concierge "$CONCIERGE_PORT" HIT "$CONCIERGE_PID"
run nginx "$NGINX_PORT" HIT $(nginx_pids)
run concierge "$CONCIERGE_PORT" MISS "$CONCIERGE_PID"
run nginx "$NGINX_PORT" MISS $(nginx_pids)

# --- report ------------------------------------------------------------------------------------
{
    echo
    echo "Concierge vs nginx proxy_cache: wrk -t$THREADS -c$CONNECTIONS -d$DURATION, $(nproc) cores, 127.0.0.1"
    echo "caches on $(stat -f -c %T "$WORK") ($STATE_BASE); CPU/req = server utime+stime / requests, nginx = master + worker + cache helpers;"
    echo "sys% = kernel share of that CPU; the sample API's CPU is not counted (upstream us/req)"
    echo
    printf '%-5s %-10s %11s %10s %13s %6s %9s %16s %7s\n' run server "req/s" "p99 ms" "CPU us/req" "sys%" "RSS MiB" "upstream us/req" errors
    for row in "${RESULTS[@]}"; do
        set -- $row
        printf '%-5s %-10s %11.0f %10.2f %13.1f %6s %9d %16s %7d\n' "$1" "$2" "$3" "$4" "$5" "${10}" "$6" "$([ "$1" = MISS ] && echo "$7" || echo -)" "$8"
    done
    echo
    printf '%-5s %20s %24s\n' run "req/s Concierge/nginx" "CPU/req Concierge/nginx"
    for kind in HIT MISS; do
        c=$(printf '%s\n' "${RESULTS[@]}" | awk -v k=$kind '$1 == k && $2 == "concierge"')
        g=$(printf '%s\n' "${RESULTS[@]}" | awk -v k=$kind '$1 == k && $2 == "nginx"')
        awk -v c="$c" -v g="$g" -v k=$kind 'BEGIN {
            split(c, a, " "); split(g, b, " ")
            printf "%-5s %20.2f %24.2f\n", k, (b[3] > 0 ? a[3] / b[3] : 0), (b[5] > 0 ? a[5] / b[5] : 0) }'
    done
    echo
    echo "raw wrk output: $OUT_DIR"
} | tee "$OUT_DIR/summary.txt"

for row in "${RESULTS[@]}"; do
    set -- $row
    [ "$8" = 0 ] || { log "WARNING: $2 $1 run had $8 errors (see $OUT_DIR/$2-$1.txt)"; }
done
