#!/usr/bin/env bash
# Concierge vs nginx (proxy_cache) vs Varnish in front of the same sample API, loopback only.
#
#   Benchmarks/cache-vs-nginx-varnish.sh
#   SKIP_BUILD=1 RELEASE_DIR=.build/release DURATION=2s Benchmarks/cache-vs-nginx-varnish.sh   # quick check
#
# Builds the release binaries first (make build, with the Makefile's RELEASE_FLAGS: ~5 min
# on 2 cores from scratch; SKIP_BUILD=1 RELEASE_DIR=dir uses binaries already built), installs nginx, varnish
# and wrk with apt-get when missing, starts one sample API and the three caches in front of
# it, all configured as users run them:
#   Concierge  storage.memory_bytes 64MB, SQLite file in the work dir, ttl 1h;
#   nginx      worker_processes auto, proxy_cache on disk (work dir), 200s valid 1h,
#              proxy_cache_lock, keepalive to the upstream;
#   Varnish    varnishd -F, malloc storage (VARNISH_STORAGE), 200s get ttl 1h, default VSL
#              (shared memory log, no varnishlog/varnishncsa reading it), default thread pools.
# Then, for each server, `wrk -t1 -c64 -d10s --latency`:
#   HIT   the same URL again and again (cached by a warm-up request, checked: X-Cache HIT);
#   MISS  a unique query per request (/api/items?limit=1&run=R&n=<counter>): every request
#         misses and goes to the sample API (whose CPU is reported apart, "upstream").
# After each run the script waits (at most 15 s) until the server's CPU stops moving, so
# deferred work (Concierge's cache writer commits after the reply; nginx's cache manager)
# is counted in the run that caused it.
#
# Reported per run: req/s, p50, p99, CPU us/request of the server's whole process tree
# (utime+stime+cutime+cstime from /proc/PID/stat for the root and every descendant: nginx
# master + workers + cache helpers, varnishd manager + child; before/after), the kernel's
# share of it, RSS after the run (sum of VmRSS over the tree), errors (non-2xx/3xx and
# socket errors); ratios Concierge/nginx and Concierge/Varnish. Concierge's threads are
# sampled from /proc/PID/task/*/stat during its runs: the per-thread table shows where its
# CPU goes, and "writer us/req" is the CPU of the cache writer's own thread (`cache-writer`,
# busy only when entries are stored; see docs/benchmarks.md).
#
# ORIGIN=nginx puts a fast origin behind all three instead of the sample API: one nginx worker
# answering every request with `return 200` and a 1 KB JSON envelope
# (`{"code":200,"msg":"ok","data":…}`, `Cache-Control: max-age=60`). The sample API costs
# 44-59 us of CPU per request on the same 2 cores, which hides a proxy's own cost; the fast
# origin shows it.
#
# Env: DURATION=10s CONNECTIONS=64 THREADS=1 SERVERS="concierge nginx varnish" ORIGIN=sample|nginx
#      NGINX_WORKERS=auto VARNISH_STORAGE=malloc,256m STATE_BASE=/tmp THREAD_TOP=8
#      SKIP_BUILD=0 RELEASE_DIR=.build/release OUT_DIR=bench-out/cache-vs-nginx-varnish-<time>
# STATE_BASE=/dev/shm puts Concierge's SQLite file and nginx's cache on tmpfs (Varnish keeps
# its cache in memory anyway): one file per entry is what nginx's cache writes on a MISS,
# and on some virtual disks that costs far more kernel time than SQLite's WAL appends.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-1}
SERVERS=${SERVERS:-concierge nginx varnish}
ORIGIN=${ORIGIN:-sample}
case $ORIGIN in sample | nginx) ;; *) die "ORIGIN must be sample or nginx, not $ORIGIN" ;; esac
NGINX_WORKERS=${NGINX_WORKERS:-auto}
VARNISH_STORAGE=${VARNISH_STORAGE:-malloc,256m}
THREAD_TOP=${THREAD_TOP:-8}
OUT_DIR=${OUT_DIR:-$BENCH_REPO/bench-out/cache-vs-nginx-varnish-$(date +%Y%m%d-%H%M%S)}
TOOLS="python3 $(dirname "$0")/bench_tools.py"

has() { case " $SERVERS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
has concierge || die "SERVERS must include concierge (the ratios are Concierge's)"
for s in $SERVERS; do case $s in concierge | nginx | varnish) ;; *) die "unknown server $s in SERVERS" ;; esac; done

cmds=(wrk:wrk curl:curl python3:python3)
{ has nginx || [ "$ORIGIN" = nginx ]; } && cmds+=(nginx:nginx)
has varnish && cmds+=(varnishd:varnish cc:gcc)   # varnishd compiles its VCL with cc
need_cmds "${cmds[@]}"
ensure_release_build
mkdir -p "$OUT_DIR"

STATE_BASE=${STATE_BASE:-${TMPDIR:-/tmp}}
make_workdir concierge-bench

SAMPLE_PORT=$(free_port)
HIT_PATH="/api/items?limit=1"
declare -A PORT ROOT

# --- origin: the sample API, or nginx answering at once --------------------------------------
if [ "$ORIGIN" = nginx ]; then
    mkdir -p "$WORK/origin/tmp"
    [ "$(id -u)" = 0 ] && chown -R nobody:nogroup "$WORK/origin/tmp"
    padding=$(head -c 900 /dev/zero | tr '\0' 'x')
    { nginx_head "$WORK/origin" "worker_processes 1;"; cat <<EOF
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$SAMPLE_PORT;
        location / {
            default_type application/json;
            add_header Cache-Control "max-age=60";
            return 200 '{"code":200,"msg":"ok","data":{"items":[{"id":1,"name":"item 1","note":"$padding"}]}}';
        }
    }
}
EOF
    } > "$WORK/origin/nginx.conf"
    nginx -t -q -e "$WORK/origin/error.log" -c "$WORK/origin/nginx.conf" -p "$WORK/origin/"
    nginx -e "$WORK/origin/error.log" -c "$WORK/origin/nginx.conf" -p "$WORK/origin/" > "$WORK/sample.log" 2>&1 &
else
    "$SAMPLE_BIN" --host 127.0.0.1 --port "$SAMPLE_PORT" > "$WORK/sample.log" 2>&1 &
fi
SAMPLE_PID=$!; track "$SAMPLE_PID"
wait_http "http://127.0.0.1:$SAMPLE_PORT$HIT_PATH" "$SAMPLE_PID" "$WORK/sample.log"

# --- Concierge -------------------------------------------------------------------------
PORT[concierge]=$(free_port)
ADMIN_PORT=$(free_port)
mkdir -p "$WORK/concierge"
write_concierge_config "$WORK/concierge/concierge.yaml" "${PORT[concierge]}" "$ADMIN_PORT" \
    "http://127.0.0.1:$SAMPLE_PORT" "$WORK/concierge/cache.sqlite" 64MB
"$CONCIERGE_BIN" check-config --config "$WORK/concierge/concierge.yaml" > /dev/null
"$CONCIERGE_BIN" serve --config "$WORK/concierge/concierge.yaml" > "$WORK/concierge.log" 2>&1 &
ROOT[concierge]=$!; track "${ROOT[concierge]}"
wait_http "http://127.0.0.1:$ADMIN_PORT/health" "${ROOT[concierge]}" "$WORK/concierge.log"

# --- nginx -------------------------------------------------------------------------------
if has nginx; then
    PORT[nginx]=$(free_port)
    mkdir -p "$WORK/nginx/cache" "$WORK/nginx/tmp"
    # As root the workers drop to nobody (nginx_head): they must be able to write the cache and temp dirs.
    [ "$(id -u)" = 0 ] && chown -R nobody:nogroup "$WORK/nginx/cache" "$WORK/nginx/tmp"
    { nginx_head "$WORK/nginx" "worker_processes $NGINX_WORKERS;"; cat <<EOF
    proxy_cache_path $WORK/nginx/cache levels=1:2 keys_zone=bench:32m max_size=2g inactive=1h use_temp_path=off;
    upstream sample {
        server 127.0.0.1:$SAMPLE_PORT;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:${PORT[nginx]};
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
    } > "$WORK/nginx/nginx.conf"
    nginx -t -q -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx/"
    nginx -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx/" > "$WORK/nginx.log" 2>&1 &
    ROOT[nginx]=$!; track "${ROOT[nginx]}"
    wait_http "http://127.0.0.1:${PORT[nginx]}$HIT_PATH" "${ROOT[nginx]}" "$WORK/nginx.log"
fi

# --- Varnish -------------------------------------------------------------------------------
if has varnish; then
    PORT[varnish]=$(free_port)
    mkdir -p "$WORK/varnish"
    cat > "$WORK/varnish/bench.vcl" <<EOF
vcl 4.1;

backend sample {
    .host = "127.0.0.1";
    .port = "$SAMPLE_PORT";
}

sub vcl_backend_response {
    # Same policy as the others: 200s cached for an hour.
    if (beresp.status == 200) {
        set beresp.ttl = 1h;
        set beresp.grace = 0s;
        unset beresp.http.Set-Cookie;
        return (deliver);
    }
}

sub vcl_deliver {
    if (obj.hits > 0) { set resp.http.X-Cache = "HIT"; } else { set resp.http.X-Cache = "MISS"; }
}
EOF
    # As root varnishd drops to the varnish (manager side, VCL compiler) and vcache (child)
    # users: they must reach the work dir ($WORK is 0711) and read the VCL.
    chmod 0755 "$WORK/varnish"
    chmod 0644 "$WORK/varnish/bench.vcl"
    # -T none: no management CLI port; -n: the shared-memory log and the compiled VCL stay
    # in the work dir.
    varnishd -F -n "$WORK/varnish/work" -a "127.0.0.1:${PORT[varnish]}" -T none \
        -f "$WORK/varnish/bench.vcl" -s "$VARNISH_STORAGE" > "$WORK/varnish.log" 2>&1 &
    ROOT[varnish]=$!; track "${ROOT[varnish]}"
    wait_http "http://127.0.0.1:${PORT[varnish]}$HIT_PATH" "${ROOT[varnish]}" "$WORK/varnish.log" 60
fi

# --- sanity: all cache ---------------------------------------------------------------------
for server in $SERVERS; do
    curl -fsS --max-time 10 -o /dev/null "http://127.0.0.1:${PORT[$server]}$HIT_PATH"   # warm-up: stores the entry
    status=$(x_cache "http://127.0.0.1:${PORT[$server]}$HIT_PATH")
    [ "$status" = HIT ] || die "$server did not answer a cache HIT on the second request (X-Cache: ${status:-none})"
    status=$(x_cache "http://127.0.0.1:${PORT[$server]}$HIT_PATH&run=probe&n=0")
    [ "$status" = MISS ] || die "$server did not answer MISS for a new query (X-Cache: ${status:-none})"
done

write_miss_lua "$WORK/miss.lua"

describe() { local s; for s in $SERVERS; do printf '%s :%s (pids %s); ' "$s" "${PORT[$s]}" "$(tree_pids "${ROOT[$s]}" | tr '\n' ' ' | sed 's/ $//')"; done; }
log "origin ($ORIGIN) :$SAMPLE_PORT (pid $SAMPLE_PID); $(describe)"
log "caches in $WORK ($(stat -f -c %T "$WORK") file system)"
log "load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"

# run SERVER KIND: one wrk run; appends a result row
RESULTS=()
run() {
    local server=$1 kind=$2 root=${ROOT[$1]} port=${PORT[$1]}
    local out="$OUT_DIR/$server-$kind.txt" args=() sampler=""
    [ "$kind" = MISS ] && args=(-s "$WORK/miss.lua")
    if [ "$server" = concierge ]; then
        rm -f "$WORK/threads.ready"
        $TOOLS threads-sample "$root" "$OUT_DIR/threads-$kind.json" "$WORK/threads.ready" 0.25 &
        sampler=$!; track "$sampler"
        local i=0; while [ ! -e "$WORK/threads.ready" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        [ -e "$WORK/threads.ready" ] || die "thread sampler did not start"
    fi
    local c0 s0 k0 c1 s1 k1 settle
    c0=$(tree_cpu_ticks "$root"); k0=$(tree_sys_ticks "$root"); s0=$(tree_cpu_ticks "$SAMPLE_PID")
    log "wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency $kind -> $server"
    run_waited timeout --kill-after=10 "$(( $(awk -v d="$DURATION" 'BEGIN {v = d + 0; if (d ~ /m$/) v *= 60; if (d ~ /h$/) v *= 3600; print int(v)}') + 60 ))" \
        wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "${args[@]}" "http://127.0.0.1:$port$HIT_PATH" -- "$server$kind$RANDOM" > "$out" \
        || die "wrk failed against $server ($kind): $(tail -3 "$out")"
    settle=$(wait_quiet "$root" 15)
    c1=$(tree_cpu_ticks "$root"); k1=$(tree_sys_ticks "$root"); s1=$(tree_cpu_ticks "$SAMPLE_PID")
    if [ -n "$sampler" ]; then
        stop_pid "$sampler" 5
        untrack "$sampler"
    fi
    local n rps p50 p99 rss pss err cpu_us up_us sys_pct
    n=$(wrk_requests "$out"); rps=$(wrk_rps "$out"); p50=$(wrk_pct_ms "$out" 50); p99=$(wrk_pct_ms "$out" 99)
    err=$(wrk_errors "$out"); rss=$(tree_rss_kib "$root"); pss=$(tree_pss_kib "$root")
    cpu_us=$(awk -v d=$((c1 - c0)) -v n="$n" -v hz="$CLK_TCK" 'BEGIN {printf "%.1f", n ? d / hz * 1e6 / n : 0}')
    up_us=$(awk -v d=$((s1 - s0)) -v n="$n" -v hz="$CLK_TCK" 'BEGIN {printf "%.1f", n ? d / hz * 1e6 / n : 0}')
    sys_pct=$(awk -v k=$((k1 - k0)) -v c=$((c1 - c0)) 'BEGIN {printf "%.0f", c ? 100 * k / c : 0}')
    echo "server CPU (process tree: $(tree_pids "$root" | wc -l) processes): $((c1 - c0)) ticks ($((k1 - k0)) system) at $CLK_TCK/s, settled ${settle}s after wrk; sample API: $((s1 - s0)) ticks" >> "$out"
    RESULTS+=("$kind $server $rps $p50 $p99 $cpu_us $((rss / 1024)) $up_us $err $n $sys_pct $settle $((pss / 1024))")
}

for kind in HIT MISS; do
    for server in $SERVERS; do run "$server" "$kind"; done
done

# --- report ------------------------------------------------------------------------------------
row_of() { printf '%s\n' "${RESULTS[@]}" | awk -v k="$1" -v s="$2" '$1 == k && $2 == s'; }
{
    echo
    echo "Concierge vs nginx proxy_cache vs Varnish: wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, $(nproc) cores, 127.0.0.1"
    echo "Concierge: $(binary_info)"
    echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); caches on $(stat -f -c %T "$WORK") ($STATE_BASE); nginx worker_processes $NGINX_WORKERS; varnish -s $VARNISH_STORAGE"
    echo "CPU/req = utime+stime of the server's process tree / requests (until its CPU settled after wrk); sys% = kernel share;"
    echo "RSS = sum of VmRSS over the tree after the run (PSS: shared pages split between the processes);"
    echo "upstream = the origin's ($ORIGIN) CPU per request (not counted above)"
    echo
    printf '%-5s %-10s %10s %8s %8s %11s %5s %8s %8s %10s %7s %8s\n' run server "req/s" "p50 ms" "p99 ms" "CPU us/req" "sys%" "RSS MiB" "PSS MiB" "upstr us" errors requests
    for row in "${RESULTS[@]}"; do
        set -- $row
        printf '%-5s %-10s %10.0f %8.2f %8.2f %11.1f %5s %8d %8d %10s %7d %8d\n' "$1" "$2" "$3" "$4" "$5" "$6" "${11}" "$7" "${13}" \
            "$([ "$1" = MISS ] && echo "$8" || echo -)" "$9" "${10}"
    done
    others=""; for s in nginx varnish; do has $s && others+=" $s"; done
    if [ -n "$others" ]; then
        echo
        printf '%-5s %-22s %10s %12s %10s\n' run "Concierge / ..." "req/s" "CPU/req" "RSS"
        for kind in HIT MISS; do
            c=$(row_of $kind concierge)
            for s in $others; do
                o=$(row_of $kind "$s")
                awk -v c="$c" -v o="$o" -v k=$kind -v s="$s" 'BEGIN {
                    split(c, a, " "); split(o, b, " ")
                    printf "%-5s %-22s %10.2f %12.2f %10.2f\n", k, s, (b[3] > 0 ? a[3] / b[3] : 0),
                        (b[6] > 0 ? a[6] / b[6] : 0), (b[7] > 0 ? a[7] / b[7] : 0) }'
            done
        done
    fi
    echo
    n_hit=$(row_of HIT concierge | awk '{print $10}'); n_miss=$(row_of MISS concierge | awk '{print $10}')
    w_hit=$($TOOLS threads-group "$OUT_DIR/threads-HIT.json" "$n_hit" writer)
    w_miss=$($TOOLS threads-group "$OUT_DIR/threads-MISS.json" "$n_miss" writer)
    echo "Concierge writer CPU (its cache-writer thread): MISS $w_miss us/req (HIT run: $w_hit us/req)"
    echo
    $TOOLS threads-report --top "$THREAD_TOP" --run HIT "$OUT_DIR/threads-HIT.json" "$n_hit" --run MISS "$OUT_DIR/threads-MISS.json" "$n_miss"
    echo "raw wrk output and thread samples: $OUT_DIR"
} | tee "$OUT_DIR/summary.txt"

for row in "${RESULTS[@]}"; do
    set -- $row
    [ "$9" = 0 ] || log "WARNING: $2 $1 run had $9 errors (see $OUT_DIR/$2-$1.txt)"
done
