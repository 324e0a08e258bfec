#!/usr/bin/env bash
# Where Concierge's CPU goes on a HIT and on a MISS: perf and callgrind profiles (loopback only).
#
#   Benchmarks/profile.sh
#   SKIP_BUILD=1 RELEASE_DIR=.build/release DURATION=3s CALLGRIND_REQUESTS=500 Benchmarks/profile.sh   # quick check
#
# perf (package linux-perf): Concierge (release) in front of the sample API; for each load
# (HIT: one cached URL; MISS: a unique query per request) `wrk -t1 -c64` runs while
# `perf record -e cpu-clock -g -p PID` samples the daemon for DURATION. Prints the TOP (10)
# symbols by self time (perf report --no-children), the share of each thread group, and for
# the MISS load the top symbols on the cache writer's thread. In a container without
# hardware counters cpu-clock (a timer) is what perf can sample; PERF_EVENT overrides it.
# The Swift runtime has no frame pointers: PERF_CALLGRAPH="--call-graph dwarf" gives callers
# of swift_retain and the like (larger files; keep DURATION short).
#
# callgrind (package valgrind): a second Concierge runs under `valgrind --tool=callgrind`;
# after WARMUP requests of each kind the counters are dumped and so zeroed (callgrind_control
# -d; not -z, which leaves costs run before it on other threads in the next dump), then
# CALLGRIND_REQUESTS (2000) sequential requests are sent with curl over one keep-alive
# connection and the counters dumped (callgrind_control -d); for the MISS dump the script
# first waits until the writer has committed every entry, so its work is in. Instruction
# counts do not depend on the machine's load: instructions per request repeat from run to
# run, which sampled times on a busy 2-core machine do not. Two workarounds for Debian 12's
# valgrind 3.19, both applied to copies in the temp dir: the binary's DWARF 5 debug info
# (Swift 6 toolchain) stops its debuginfo reader, so it profiles a copy with the debug
# sections stripped (objcopy --strip-debug; the symbol table stays, so do the names); and
# its rt_sigsuspend wrapper writes into the signal mask that libdispatch passes from
# read-only memory (SIGSEGV inside valgrind), so a 5-line LD_PRELOAD shim (built with cc)
# hands sigsuspend a writable copy of the mask.
#
# ORIGIN=nginx puts a fast origin behind Concierge instead of the sample API (nginx `return 200`
# with a 1 KB JSON body and `Cache-Control: max-age=60`, one worker): a slow origin on the same
# two cores hides a proxy's own cost.
# NGINX=1 (callgrind): nginx with proxy_cache (one process: `master_process off`, its cache in
# the temp dir) runs under callgrind too, driven by the same curl batches over one keep-alive
# connection (after the same warm-up), and a table gives the instructions per request of both
# and their ratio. nginx writes its cache file in the worker as it answers, so its MISS
# includes its writes, as Concierge's includes the writer's.
#
# FLOOR=1 (callgrind): the floor for a hit, `nio-floor` (Benchmarks/nio-floor: a bare SwiftNIO
# server with NIO's request decoder that answers every request with the same ready bytes, the
# origin's head and 1 KB body), runs under callgrind too with the same driver; the table gives
# its instructions per request beside Concierge's HIT. Built with `swift build -c release
# --product nio-floor` and the Makefile's RELEASE_FLAGS when missing (or unless SKIP_BUILD=1).
#
# CONFIG_APPEND=FILE: YAML appended to each Concierge's configuration (e.g. a `telemetry:`
# section, to measure what tracing costs a HIT and a MISS).
#
# Symbols are demangled with swift-demangle --simplified (or `swift demangle`) when present.
# perf.data and callgrind.out files stay in OUT_DIR (perf report -i ..., callgrind_annotate).
#
# Env: PROFILER=both|perf|callgrind DURATION=10s CONNECTIONS=64 TOP=10 PERF_EVENT=cpu-clock
#      PERF_CALLGRAPH=-g CALLGRIND_REQUESTS=2000 WARMUP=200 ORIGIN=sample|nginx NGINX=0|1 FLOOR=0|1
#      STATE_BASE=/tmp SKIP_BUILD=0 RELEASE_DIR=.build/release CONFIG_APPEND=
#      OUT_DIR=bench-out/profile-<time>
set -euo pipefail
. "$(dirname "$0")/lib.sh"

PROFILER=${PROFILER:-both}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
TOP=${TOP:-10}
PERF_EVENT=${PERF_EVENT:-cpu-clock}
PERF_CALLGRAPH=${PERF_CALLGRAPH:--g}
CALLGRIND_REQUESTS=${CALLGRIND_REQUESTS:-2000}
WARMUP=${WARMUP:-200}
ORIGIN=${ORIGIN:-sample}
NGINX=${NGINX:-0}
FLOOR=${FLOOR:-0}
case $ORIGIN in sample | nginx) ;; *) die "ORIGIN must be sample or nginx, not $ORIGIN" ;; esac
OUT_DIR=${OUT_DIR:-$BENCH_REPO/bench-out/profile-$(date +%Y%m%d-%H%M%S)}
TOOLS="python3 $(dirname "$0")/bench_tools.py"
case $PROFILER in both | perf | callgrind) ;; *) die "PROFILER must be both, perf or callgrind" ;; esac
DUR_S=$(awk -v d="$DURATION" 'BEGIN {v = d + 0; if (d ~ /m$/) v *= 60; print int(v)}')
[ "$DUR_S" -ge 1 ] || die "DURATION must be at least 1s"

cmds=(wrk:wrk curl:curl python3:python3)
[ "$PROFILER" != callgrind ] && cmds+=(perf:linux-perf)
[ "$PROFILER" != perf ] && cmds+=(valgrind:valgrind callgrind_control:valgrind objcopy:binutils cc:gcc)
{ [ "$ORIGIN" = nginx ] || [ "$NGINX" = 1 ]; } && cmds+=(nginx:nginx)
need_cmds "${cmds[@]}"
ensure_release_build
mkdir -p "$OUT_DIR"
make_workdir concierge-prof

demangle() { cg_demangle; }

SAMPLE_PORT=$(free_port)
if [ "$ORIGIN" = nginx ]; then
    start_fast_origin "$WORK/origin" "$SAMPLE_PORT" > "$WORK/sample.log" 2>&1 &
else
    "$SAMPLE_BIN" --host 127.0.0.1 --port "$SAMPLE_PORT" > "$WORK/sample.log" 2>&1 &
fi
SAMPLE_PID=$!; track "$SAMPLE_PID"
wait_http "http://127.0.0.1:$SAMPLE_PORT/api/items?limit=1" "$SAMPLE_PID" "$WORK/sample.log"
write_miss_lua "$WORK/miss.lua"

SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
say() { tee -a "$SUMMARY"; }
{
    echo "Concierge profiles: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), binary $(binary_info)"
    echo "HIT = GET /api/items?limit=1 again and again; MISS = a unique query per request (upstream: $([ "$ORIGIN" = nginx ] && echo "nginx return 200, 1 KB JSON" || echo "sample API"))"
} | say

# --- perf --------------------------------------------------------------------------------------
perf_ok=1
if [ "$PROFILER" != callgrind ]; then
    if ! perf record -e "$PERF_EVENT" -g -o "$WORK/perf-probe.data" -- true > "$WORK/perf-probe.log" 2>&1; then
        perf_ok=0
        log "perf cannot record $PERF_EVENT here: $(tail -2 "$WORK/perf-probe.log")"
        [ "$PROFILER" = perf ] && die "perf unusable (PROFILER=both falls back to callgrind)"
    fi
fi
if [ "$PROFILER" != callgrind ] && [ "$perf_ok" = 1 ]; then
    start_cached_concierge perf "http://127.0.0.1:$SAMPLE_PORT" "${CONFIG_APPEND:-}" "$CONCIERGE_BIN"
    for kind in HIT MISS; do
        args=(); [ "$kind" = MISS ] && args=(-s "$WORK/miss.lua")
        log "perf: wrk -t1 -c$CONNECTIONS $kind load, perf record -e $PERF_EVENT -g -p $PID for ${DUR_S}s"
        wrk -t1 -c"$CONNECTIONS" -d"$((DUR_S + 3))s" "${args[@]}" "http://127.0.0.1:$PROXY_PORT/api/items?limit=1" -- "perf$kind$RANDOM" \
            > "$OUT_DIR/perf-wrk-$kind.txt" &
        WRK=$!; track "$WRK"
        sleep 1
        run_waited perf record -e "$PERF_EVENT" $PERF_CALLGRAPH -p "$PID" -o "$OUT_DIR/perf-$kind.data" -- sleep "$DUR_S" > "$WORK/perf-$kind.log" 2>&1 \
            || die "perf record failed: $(tail -3 "$WORK/perf-$kind.log")"
        rc=0; wait "$WRK" || rc=$?; untrack "$WRK"
        [ "$rc" = 0 ] || die "wrk failed"
        samples=$(perf report -i "$OUT_DIR/perf-$kind.data" --stdio --no-children -g none --sort comm 2>/dev/null | awk '/^# Samples:/ && !found {found = 1; print $3}')
        {
            echo
            echo "perf $kind: $samples samples of $PERF_EVENT over ${DUR_S}s ($(wrk_rps "$OUT_DIR/perf-wrk-$kind.txt") req/s under perf); top $TOP symbols by self time:"
            perf report -i "$OUT_DIR/perf-$kind.data" --stdio --no-children -g none --sort dso,sym 2>/dev/null \
                | grep -E '^ +[0-9]' | awk -v n="$TOP" 'NR <= n' | demangle | cut -c1-200
            echo "  by thread group (% of samples):"
            perf report -i "$OUT_DIR/perf-$kind.data" --stdio --no-children -g none --sort comm 2>/dev/null \
                | grep -E '^ +[0-9]' | sed 's/^/  /'
            if [ "$kind" = MISS ]; then
                echo "  top symbols on the writer thread (cache-writer; % of all samples):"
                perf report -i "$OUT_DIR/perf-$kind.data" --stdio --no-children -g none --comms=cache-writer --sort dso,sym 2>/dev/null \
                    | grep -E '^ +[0-9]' | awk 'NR <= 8' | demangle | cut -c1-200 | sed 's/^/  /'
            fi
        } | say
    done
    stop_pid "$PID" 10; untrack "$PID"
fi

# --- callgrind ----------------------------------------------------------------------------------
if [ "$PROFILER" != perf ]; then
    callgrind_prepare "$CONCIERGE_BIN"
    callgrind_launcher "$WORK/callgrind.out"
    log "callgrind: starting Concierge under valgrind (slow: up to a minute)"
    start_cached_concierge callgrind "http://127.0.0.1:$SAMPLE_PORT" "${CONFIG_APPEND:-}" "${CG_LAUNCH[@]}" "$CG_BIN"
    VG_PID=$PID
    urls() { # urls BASE KIND FROM TO: a curl config
        local i
        for ((i = $3; i <= $4; i++)); do
            if [ "$2" = HIT ]; then echo "url = \"$1\""; else echo "url = \"$1&run=cg&n=$i\""; fi
            echo "output = /dev/null"
        done
    }
    wait_entries() { # until /stats counts $1 entries (the writer commits after the replies)
        local i
        for ((i = 0; i < 600; i++)); do
            [ "$(admin_stats "$ADMIN_PORT" entries)" -ge "$1" ] && return 0
            sleep 0.5
        done
        die "the writer did not commit $1 entries within 300 s"
    }
    # measure NAME PID BASE_URL WAIT(0|1): the same warm-up, zero, batch and dump for either
    # server; WAIT=1 waits for Concierge's writer to commit before the MISS dump.
    declare -A PER_REQUEST
    measure() {
        local name=$1 pid=$2 base=$3 wait=$4 kind after
        urls "$base" HIT 1 "$WARMUP" > "$WORK/$name-warm-hit.curl"; urls "$base" MISS 1 "$WARMUP" > "$WORK/$name-warm-miss.curl"
        urls "$base" HIT 1 "$CALLGRIND_REQUESTS" > "$WORK/$name-hit.curl"
        urls "$base" MISS $((WARMUP + 1)) $((WARMUP + CALLGRIND_REQUESTS)) > "$WORK/$name-miss.curl"
        log "callgrind ($name): warm-up, $WARMUP HIT and $WARMUP MISS requests"
        curl_batch "$WORK/$name-warm-hit.curl"; curl_batch "$WORK/$name-warm-miss.curl"
        if [ "$wait" = 1 ]; then wait_entries $((WARMUP + 1)); fi
        sleep 1
        for kind in HIT MISS; do
            after=()
            [ "$kind" = MISS ] && [ "$wait" = 1 ] && after=(wait_entries $((WARMUP + CALLGRIND_REQUESTS + 1)))
            PER_REQUEST[$name-$kind]=$(callgrind_count "$pid" "$name-$kind" "$WORK/$name-${kind,,}.curl" "$CALLGRIND_REQUESTS" \
                "$OUT_DIR/callgrind-$name-$kind.out" "${after[@]}")
        done
        for kind in HIT MISS; do
            {
                echo
                echo "callgrind $name $kind (valgrind $(valgrind --version | sed 's/valgrind-//')), $CALLGRIND_REQUESTS sequential requests after $WARMUP of warm-up:"
                cat "$OUT_DIR/callgrind-$name-$kind.out.top"
            } | say
        done
    }
    measure concierge "$VG_PID" "http://127.0.0.1:$PROXY_PORT/api/items?limit=1" 1
    stop_pid "$VG_PID" 60; untrack "$VG_PID"
    if [ "$NGINX" = 1 ]; then
        NGINX_PORT=$(free_port)
        nginx_conf "$WORK/nginx" "master_process off;" "    proxy_cache_path $WORK/nginx/cache levels=1:2 keys_zone=bench:32m max_size=2g inactive=1h use_temp_path=off;
    upstream origin {
        server 127.0.0.1:$SAMPLE_PORT;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_cache bench;
            proxy_cache_key \$request_uri;
            proxy_cache_valid 200 1h;
            add_header X-Cache \$upstream_cache_status;
        }
    }"
        log "callgrind: starting nginx under valgrind"
        callgrind_launcher "$WORK/nginx-callgrind.out"
        "${CG_LAUNCH[@]}" nginx -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx/" > "$WORK/nginx.log" 2>&1 &
        NG_PID=$!; track "$NG_PID"
        wait_http "http://127.0.0.1:$NGINX_PORT/api/items?limit=1" "$NG_PID" "$WORK/nginx.log" 120
        measure nginx "$NG_PID" "http://127.0.0.1:$NGINX_PORT/api/items?limit=1" 0
        stop_pid "$NG_PID" 60; untrack "$NG_PID"
        {
            echo
            echo "instructions per request (callgrind, the same driver; MISS with the cache writes):"
            printf '  %-6s %12s %12s %8s\n' "" nginx Concierge ratio
            for kind in HIT MISS; do
                printf '  %-6s %12s %12s %7.2fx\n' "$kind" "${PER_REQUEST[nginx-$kind]}" "${PER_REQUEST[concierge-$kind]}" \
                    "$(awk -v a="${PER_REQUEST[concierge-$kind]}" -v b="${PER_REQUEST[nginx-$kind]}" 'BEGIN {print a / b}')"
            done
        } | say
    fi
    if [ "$FLOOR" = 1 ]; then
        if [ "${SKIP_BUILD:-0}" != 1 ] || [ ! -x "$RELEASE_DIR/nio-floor" ]; then
            log "building nio-floor (release)"
            # The Makefile's RELEASE_FLAGS, as `make build` gives Concierge.
            (cd "$BENCH_REPO" && swift build -c release -Xswiftc -enforce-exclusivity=unchecked -Xswiftc -cross-module-optimization --product nio-floor >&2)
        fi
        objcopy --strip-debug "$RELEASE_DIR/nio-floor" "$WORK/nio-floor"
        FLOOR_PORT=$(free_port)
        log "callgrind: starting nio-floor under valgrind"
        callgrind_launcher "$WORK/floor-callgrind.out"
        "${CG_LAUNCH[@]}" "$WORK/nio-floor" --port "$FLOOR_PORT" > "$WORK/floor.log" 2>&1 &
        FL_PID=$!; track "$FL_PID"
        wait_http "http://127.0.0.1:$FLOOR_PORT/api/items?limit=1" "$FL_PID" "$WORK/floor.log" 120
        measure floor "$FL_PID" "http://127.0.0.1:$FLOOR_PORT/api/items?limit=1" 0
        stop_pid "$FL_PID" 60; untrack "$FL_PID"
        {
            echo
            echo "the floor (a bare SwiftNIO server writing ready bytes, same driver): ${PER_REQUEST[floor-HIT]} instructions per request;"
            printf '  Concierge HIT %s = %.2fx the floor\n' "${PER_REQUEST[concierge-HIT]}" \
                "$(awk -v a="${PER_REQUEST[concierge-HIT]}" -v b="${PER_REQUEST[floor-HIT]}" 'BEGIN {print a / b}')"
        } | say
    fi
fi

echo | say
echo "perf.data / callgrind.out files: $OUT_DIR (perf report -i FILE; callgrind_annotate FILE)" | say
