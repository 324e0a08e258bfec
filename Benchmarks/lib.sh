# Shared helpers for the benchmark scripts (sourced, not run).
# Everything here talks to 127.0.0.1 only.

BENCH_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLK_TCK=$(getconf CLK_TCK)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Installs Debian packages for the commands that are missing: need_cmds cmd:package ...
need_cmds() {
    local missing=() pair
    for pair in "$@"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" = 0 ] || die "missing ${missing[*]}: apt-get install -y ${missing[*]}"
    log "installing ${missing[*]} (apt-get)"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

# Release binaries: $RELEASE_DIR (default .build/release). Builds them unless SKIP_BUILD=1.
ensure_release_build() {
    RELEASE_DIR=${RELEASE_DIR:-$BENCH_REPO/.build/release}
    if [ "${SKIP_BUILD:-0}" != 1 ]; then
        log "make build (release concierge, concierge-sample-api, the Makefile's RELEASE_FLAGS): ~5 min on 2 cores from scratch"
        make -C "$BENCH_REPO" build >&2
    fi
    CONCIERGE_BIN=$RELEASE_DIR/concierge
    SAMPLE_BIN=$RELEASE_DIR/concierge-sample-api
    [ -x "$CONCIERGE_BIN" ] && [ -x "$SAMPLE_BIN" ] || die "no release binaries in $RELEASE_DIR (unset SKIP_BUILD or set RELEASE_DIR)"
}

# binary_info: which Concierge build is measured (version, file time), for the summaries.
binary_info() {
    printf '%s %s, built %s' "$CONCIERGE_BIN" "$("$CONCIERGE_BIN" --version 2>/dev/null || echo '?')" \
        "$(date -r "$CONCIERGE_BIN" '+%F %T' 2>/dev/null || echo '?')"
}

# A free loopback TCP port (the kernel picks; tiny race until the server binds it).
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# wait_http URL PID LOGFILE [SECONDS]: until URL answers (any HTTP status), bounded; fails
# early when PID dies.
wait_http() {
    local url=$1 pid=$2 logfile=$3 limit=${4:-30} i
    for ((i = 0; i < limit * 5; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "process $pid died; last lines of $logfile:"; tail -20 "$logfile" >&2; return 1
        fi
        if curl -s -o /dev/null --max-time 2 "$url"; then return 0; fi
        sleep 0.2
    done
    log "no answer from $url after ${limit}s; last lines of $logfile:"; tail -20 "$logfile" >&2
    return 1
}

# Processes started by the script, stopped by stop_all (EXIT trap).
BENCH_PIDS=()
track() { BENCH_PIDS+=("$1"); }
untrack() { # untrack PID: after the script stopped it itself
    local keep=() p
    for p in "${BENCH_PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    BENCH_PIDS=("${keep[@]}")
}
# run_waited CMD...: CMD in the background, tracked, and waited for: a TERM or INT to the
# script is handled at once (bash runs traps only between foreground commands) and stops it.
run_waited() {
    local p rc=0
    "$@" &
    p=$!; track "$p"
    wait "$p" || rc=$?
    untrack "$p"
    return "$rc"
}
stop_pid() { # stop_pid PID [grace seconds]: TERM, bounded wait, then KILL
    local pid=$1 grace=${2:-10} i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.1
    done
    log "pid $pid ($(cat /proc/$pid/comm 2>/dev/null)) still running ${grace}s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
stop_all() {
    local i
    for ((i = ${#BENCH_PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${BENCH_PIDS[$i]}" "${STOP_GRACE:-10}"; done
    BENCH_PIDS=()
}

# CPU time (utime+stime, all threads) of the given PIDs, in clock ticks.
cpu_ticks() {
    local total=0 pid rest
    for pid in "$@"; do
        rest=$(sed 's/^.*) //' "/proc/$pid/stat") || continue
        set -- $rest
        total=$((total + ${12} + ${13}))
    done
    echo "$total"
}
# thread_ticks PID COMM: user+system CPU, in clock ticks, of PID's threads named COMM (a
# thread's name as /proc/PID/task/TID/comm shows it, e.g. the cache writer's "cache-writer").
thread_ticks() {
    local total=0 task rest
    for task in /proc/"$1"/task/*; do
        [ "$(cat "$task/comm" 2>/dev/null)" = "$2" ] || continue
        rest=$(sed 's/^.*) //' "$task/stat" 2>/dev/null) || continue
        set -- $rest
        total=$((total + ${12} + ${13}))
    done
    echo "$total"
}
# System (kernel) part of that CPU time, in clock ticks.
sys_ticks() {
    local total=0 pid rest
    for pid in "$@"; do
        rest=$(sed 's/^.*) //' "/proc/$pid/stat") || continue
        set -- $rest
        total=$((total + ${13}))
    done
    echo "$total"
}
# Resident set size of the given PIDs, summed, in KiB.
rss_kib() {
    local total=0 pid v
    for pid in "$@"; do
        v=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

# wrk output parsing
wrk_rps() { awk '/^Requests\/sec:/ {print $2}' "$1"; }
wrk_requests() { awk '/requests in/ {print $1; exit}' "$1"; }
wrk_errors() { # non-2xx/3xx responses + socket errors
    awk '/Non-2xx or 3xx responses:/ {n += $NF}
         /Socket errors:/ {gsub(/,/, ""); n += $4 + $6 + $8 + $10}
         END {print n + 0}' "$1"
}
# latency percentile (50, 75, 90, 99) from `wrk --latency`, in ms
wrk_pct_ms() {
    awk -v p="$2%" '$1 == p && NF == 2 {
        v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
        if (u == "us") v /= 1000; else if (u == "s") v *= 1000; else if (u == "m") v *= 60000
        printf "%.2f", v; exit }' "$1"
}
wrk_max_ms() {
    awk '/^ +Latency/ {
        v = $4; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
        if (u == "us") v /= 1000; else if (u == "s") v *= 1000; else if (u == "m") v *= 60000
        printf "%.2f", v; exit }' "$1"
}

# make_workdir PREFIX: a temp dir under STATE_BASE (default $TMPDIR or /tmp) in $WORK, removed
# with every tracked process when the script exits.
make_workdir() {
    WORK=$(mktemp -d "${STATE_BASE:-${TMPDIR:-/tmp}}/$1.XXXXXX")
    chmod 0711 "$WORK"
    trap 'rc=$?; stop_all; rm -rf "$WORK"; exit "$rc"' EXIT
    trap 'exit 130' INT TERM
}

# --- process trees (a server and every process below it) ---------------------------------

# tree_pids ROOT: ROOT and all its live descendants (nginx master + workers + cache helpers,
# varnishd manager + child), read from /proc at the time of the call.
tree_pids() {
    local root=$1
    kill -0 "$root" 2>/dev/null || return 0
    ps -e -o pid=,ppid= | awk -v root="$root" '
        { parent[$1] = $2 }
        END {
            keep[root] = 1; print root
            do { added = 0
                 for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; print p; added = 1 }
            } while (added)
        }'
}
# tree_cpu_ticks ROOT: utime + stime + cutime + cstime over the tree, in clock ticks. The
# c* fields hold the CPU of children already reaped, so a helper that exits during a run
# (nginx's cache loader, Varnish's VCL compiler) stays counted in its parent.
tree_cpu_ticks() {
    local total=0 pid rest
    for pid in $(tree_pids "$1"); do
        rest=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
        set -- $rest
        total=$((total + ${12} + ${13} + ${14} + ${15}))
    done
    echo "$total"
}
tree_sys_ticks() {
    local total=0 pid rest
    for pid in $(tree_pids "$1"); do
        rest=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
        set -- $rest
        total=$((total + ${13} + ${15}))
    done
    echo "$total"
}
# tree_rss_kib ROOT: sum of VmRSS over the tree (shared pages count once per process, as
# `ps` shows them: an upper bound for a forked tree).
tree_rss_kib() { rss_kib $(tree_pids "$1"); }
# tree_pss_kib ROOT: sum of Pss (proportional set size: a page shared by n processes counts
# 1/n in each) over the tree, from /proc/PID/smaps_rollup: what a forked tree really holds.
tree_pss_kib() {
    local total=0 pid v
    for pid in $(tree_pids "$1"); do
        v=$(awk '$1 == "Pss:" {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}
# status_kib PID FIELD: one line of /proc/PID/status (VmRSS, VmHWM, ...) in KiB.
status_kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# wait_quiet ROOT [SECONDS]: after a load, until the tree's CPU stops moving (at most 1 tick
# per 0.5 s), bounded; deferred work (Concierge's cache writer, nginx's cache manager)
# is thus counted in the run that caused it. Prints the seconds waited.
wait_quiet() {
    local root=$1 limit=${2:-15} i a b
    a=$(tree_cpu_ticks "$root")
    for ((i = 1; i <= limit * 2; i++)); do
        sleep 0.5
        b=$(tree_cpu_ticks "$root")
        if [ $((b - a)) -le 1 ]; then awk -v i="$i" 'BEGIN {printf "%.1f", (i - 1) / 2}'; return 0; fi
        a=$b
    done
    log "tree of $root still busy ${limit}s after the load"
    echo "$limit"
}

# x_cache URL: the X-Cache header of a GET (HIT, MISS, ...), empty when absent.
x_cache() {
    curl -fsS --max-time 10 -D - -o /dev/null "$1" | tr -d '\r' | awk 'tolower($1) == "x-cache:" {print $2}'
}

# write_miss_lua FILE: wrk script giving every request a query string never seen before
# (a miss on any cache): <URL path and query>&run=<script arg>&n=<counter>. With
# WRK_STOP_AFTER=N in wrk's environment each wrk thread stops after N responses (bounded
# runs); without it no response() callback is defined, so wrk's cost stays the same as
# for the HIT runs.
write_miss_lua() {
    cat > "$1" <<'LUA'
-- Every request gets a query string never seen before: a miss on any cache.
local counter, run = 0, "x"
local limit = tonumber(os.getenv("WRK_STOP_AFTER") or "0") or 0
function init(args) run = args[1] or "x" end
function request()
    counter = counter + 1
    return wrk.format("GET", wrk.path .. "&run=" .. run .. "&n=" .. counter)
end
if limit > 0 then
    local responses = 0
    function response(status, headers, body)
        responses = responses + 1
        if responses >= limit then wrk.thread:stop() end
    end
end
LUA
}

# write_concierge_config FILE PROXY_PORT ADMIN_PORT UPSTREAM_URL DB_PATH MEMORY_BYTES [MAX_BYTES] [LOG_LEVEL]
# GET /api/items cached for an hour (keys "GET UPSTREAM/api/items?... v=1"), admin token
# bench-admin-token, request logging off.
write_concierge_config() {
    cat > "$1" <<EOF
listen:
  proxy: 127.0.0.1:$2
  admin: 127.0.0.1:$3
admin:
  token: bench-admin-token
storage:
  path: $5
  max_bytes: ${7:-2GB}
  memory_bytes: $6
upstreams:
  debug: $4
environment: debug
endpoints:
  - name: itemList
    match: GET /api/items
    cache: { ttl: 1h }
log:
  format: text
  level: ${8:-warning}
  requests: false
EOF
}
# start_cached_concierge NAME ORIGIN_URL APPEND_FILE LAUNCHER...: Concierge (LAUNCHER: its
# binary, or a wrapper and the binary) with write_concierge_config's file for ORIGIN_URL, the
# YAML in APPEND_FILE (when not empty) appended, its own ports and state in $WORK/NAME; waits
# for /health (up to 300 s: callgrind starts slowly) and until GET /api/items?limit=1 is a HIT.
# Sets PID, PROXY_PORT, ADMIN_PORT.
start_cached_concierge() {
    local name=$1 origin=$2 append=$3; shift 3
    PROXY_PORT=$(free_port); ADMIN_PORT=$(free_port)
    mkdir -p "$WORK/$name"
    write_concierge_config "$WORK/$name/concierge.yaml" "$PROXY_PORT" "$ADMIN_PORT" "$origin" "$WORK/$name/cache.sqlite" 64MB
    if [ -n "$append" ]; then cat "$append" >> "$WORK/$name/concierge.yaml"; fi
    "$@" serve --config "$WORK/$name/concierge.yaml" > "$WORK/$name.log" 2>&1 &
    PID=$!; track "$PID"
    wait_http "http://127.0.0.1:$ADMIN_PORT/health" "$PID" "$WORK/$name.log" 300
    local url="http://127.0.0.1:$PROXY_PORT/api/items?limit=1"
    curl -fsS --max-time 60 -o /dev/null "$url"
    [ "$(x_cache "$url")" = HIT ] || die "$name: the warm-up URL is not a HIT"
}

# admin_stats PORT [FIELD]: GET /stats (JSON), or one field of it.
admin_stats() {
    local json
    json=$(curl -fsS --max-time 10 -H "Authorization: Bearer bench-admin-token" "http://127.0.0.1:$1/stats") || return 1
    if [ -n "${2:-}" ]; then
        python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get(sys.argv[2], ""))' "$json" "$2"
    else
        echo "$json"
    fi
}

# nginx_head DIR PROCESS_DIRECTIVES: the start of an nginx.conf whose pid, logs and temp files are in DIR,
# up to the first lines of `http {` (as root the workers drop to nobody).
nginx_head() {
    cat <<EOF
$([ "$(id -u)" = 0 ] && echo "user nobody nogroup;")
$2
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $1/tmp/body;
    proxy_temp_path $1/tmp/proxy;
    fastcgi_temp_path $1/tmp/fastcgi;
    uwsgi_temp_path $1/tmp/uwsgi;
    scgi_temp_path $1/tmp/scgi;
EOF
}

# nginx_conf DIR PROCESS_DIRECTIVES HTTP_BLOCK: DIR/nginx.conf (nginx_head, then the block), checked.
nginx_conf() {
    mkdir -p "$1/tmp" "$1/cache"
    [ "$(id -u)" = 0 ] && chown -R nobody:nogroup "$1/tmp" "$1/cache"
    { nginx_head "$1" "$2"; printf '    keepalive_requests 1000000;\n%s\n}\n' "$3"; } > "$1/nginx.conf"
    nginx -t -q -e "$1/error.log" -c "$1/nginx.conf" -p "$1/"
}

# start_fast_origin DIR PORT: runs (in the foreground: start it with &) a fast origin on PORT,
# nginx `return 200` with a 1 KB JSON body and `Cache-Control: max-age=60`, one worker, its
# files in DIR: a slow origin on the same two cores would hide a proxy's own cost.
start_fast_origin() {
    local padding
    padding=$(head -c 900 /dev/zero | tr '\0' 'x')
    nginx_conf "$1" "worker_processes 1;" "    server {
        listen 127.0.0.1:$2;
        location / {
            default_type application/json;
            add_header Cache-Control \"max-age=60\";
            return 200 '{\"code\":200,\"msg\":\"ok\",\"data\":{\"items\":[{\"id\":1,\"name\":\"item 1\",\"note\":\"$padding\"}]}}';
        }
    }"
    exec nginx -e "$1/error.log" -c "$1/nginx.conf" -p "$1/"
}

# --- filling a cache without the daemon ---------------------------------------------------

# fill_entries DB UPSTREAM ENTRIES NOTE_BYTES [TAG_GROUPS]: writes ENTRIES rows straight into
# the cache file DB (the schema made by a first start of the daemon) with sqlite3, as the daemon
# would store GET /api/items?n=N (N = 0 … ENTRIES-1) of the itemList endpoint in
# write_concierge_config's file: keys "GET UPSTREAM/api/items?n=N v=1", shared, status 200,
# fresh for an hour. NOTE_BYTES > 0: a ~130 + NOTE_BYTES-byte body with a "note" of that many
# x (size column 400); 0: a ~90-byte body (size 200). TAG_GROUPS > 0: every entry also carries
# the tag "g<N % TAG_GROUPS>" (cache_tag rows, as a tagged store writes them). Written without
# a journal (the daemon is stopped, a failed fill is thrown away) and left in WAL mode.
fill_entries() {
    local db=$1 upstream=$2 entries=$3 note=$4 groups=${5:-0} body size=200
    body="'{\"code\":200,\"data\":{\"list\":[{\"id\":' || n || ',\"name\":\"item ' || n || '\"}],\"served\":1,\"total\":1000},\"msg\":\"ok\"}'"
    if [ "$note" -gt 0 ]; then
        size=400
        body="'{\"code\":200,\"data\":{\"list\":[{\"id\":' || n || ',\"name\":\"item ' || n || '\",\"tags\":[\"a\",\"b\",\"c\"],\"note\":\"' || printf('%.${note}c', 'x') || '\"}],\"served\":1,\"total\":1000},\"msg\":\"ok\"}'"
    fi
    sqlite3 "$db" > /dev/null <<SQL
PRAGMA journal_mode = OFF;
PRAGMA synchronous = OFF;
PRAGMA cache_size = -512000;
BEGIN;
WITH RECURSIVE c(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM c WHERE n < $entries - 1)
INSERT INTO cache_entry (key, endpoint, user_id, status, stored_at, ttl, swr, sie, usable_until,
                         version, size, last_access, headers, body)
SELECT 'GET $upstream/api/items?n=' || n || ' v=1', 'itemList', NULL, 200,
       strftime('%s', 'now'), 3600, 0, 0, strftime('%s', 'now') + 3600,
       1, $size, strftime('%s', 'now'), '[["Content-Type","application/json"]]', CAST($body AS BLOB)
FROM c;
$( [ "$groups" -gt 0 ] && echo "WITH RECURSIVE c(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM c WHERE n < $entries - 1)
INSERT INTO cache_tag (tag, key) SELECT 'g' || (n % $groups), 'GET $upstream/api/items?n=' || n || ' v=1' FROM c;" )
COMMIT;
PRAGMA journal_mode = WAL;
SQL
}

# --- start-up ----------------------------------------------------------------------------------

# timed_start CONFIG LOGFILE ADMIN_PORT: spawns Concierge ($CONCIERGE_BIN) and polls /health
# every 5 ms from the spawn (a Python poller, so the time is the daemon's, not the script's);
# sets CONCIERGE_PID (tracked) and READY_MS. The log is appended to.
timed_start() {
    READY_MS=$(python3 - "$CONCIERGE_BIN" "$1" "$2" "$3" "$WORK/timed-start.pid" <<'PY'
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
    ) || { [ -s "$WORK/timed-start.pid" ] && track "$(cat "$WORK/timed-start.pid")"; die "Concierge did not start: $(tail -5 "$2")"; }
    CONCIERGE_PID=$(cat "$WORK/timed-start.pid"); track "$CONCIERGE_PID"
}

# logged_seconds LOGFILE LINE SECONDS: waits up to SECONDS for a log line holding LINE; prints
# the `seconds` of the last such line ("never" when none came).
logged_seconds() {
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        if grep -q "$2" "$1"; then
            grep "$2" "$1" | tail -1 | grep -o 'seconds[=": ]*[0-9.]*' | grep -o '[0-9.]*$'
            return 0
        fi
        sleep 0.1
    done
    echo "never"
}

# index_loaded LOGFILE [SECONDS]: waits (60 s unless told) for the writer's "cache index loaded"
# line; prints its seconds ("never" when it did not come).
index_loaded() { logged_seconds "$1" "cache index loaded" "${2:-60}"; }

# integrity_checked LOGFILE [SECONDS]: the seconds the daemon's integrity check of a large file
# took (its "storage integrity check passed" line, which a file over 32 MiB gets once the key
# index is loaded), waiting up to SECONDS (300); "never" if it did not pass in time. The check
# reads every page: a measurement of CPU per request waits for it.
integrity_checked() { logged_seconds "$1" "storage integrity check passed" "${2:-300}"; }

# --- callgrind -------------------------------------------------------------------------------

# callgrind_prepare BINARY: what valgrind 3.19 (Debian 12) needs to run a Swift 6 binary, in
# $WORK: CG_BIN, a copy with the DWARF 5 debug sections stripped (its debuginfo reader stops on
# them; the symbol table stays, so do the names), and CG_SHIM, a 5-line LD_PRELOAD shim that
# hands rt_sigsuspend a writable copy of the mask (valgrind edits it in place, libdispatch's is
# read-only memory: SIGSEGV inside valgrind without it).
callgrind_prepare() {
    CG_BIN="$WORK/$(basename "$1")-callgrind"
    objcopy --strip-debug "$1" "$CG_BIN"
    cat > "$WORK/sigsuspend_shim.c" <<'C'
#define _GNU_SOURCE
#include <signal.h>
#include <unistd.h>
#include <sys/syscall.h>
/* valgrind 3.19 edits the mask passed to rt_sigsuspend in place; libdispatch's is read-only. */
int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, _NSIG / 8);
}
C
    CG_SHIM="$WORK/sigsuspend_shim.so"
    cc -O2 -shared -fPIC -o "$CG_SHIM" "$WORK/sigsuspend_shim.c"
}

# callgrind_launcher OUTFILE [VALGRIND_OPTIONS...]: sets CG_LAUNCH, the command words that run
# a program under callgrind with the shim (append "$CG_BIN" and its arguments).
callgrind_launcher() {
    local out=$1; shift
    CG_LAUNCH=(env LD_PRELOAD="$CG_SHIM" valgrind --tool=callgrind --callgrind-out-file="$out" "$@")
}

# curl_batch FILE: every request of the curl config FILE over one keep-alive connection; fails
# unless every answer is 200.
curl_batch() {
    local codes
    codes=$(curl -sS --max-time 900 -K "$1" -w '%{http_code}\n' | sort | uniq -c)
    echo "$codes" | awk '$2 != 200 {bad = 1} END {exit bad}' || die "non-200 answers under callgrind: $codes"
}

# callgrind_count PID LABEL BATCH REQUESTS OUT [AFTER...]: zeroes the counters of the
# callgrind run PID, sends the curl config BATCH (REQUESTS requests), runs the command AFTER
# when given (e.g. a wait for deferred work to be done, so it is counted), dumps the counters
# as LABEL and copies the dump to OUT; OUT.top gets the per-request count and the top functions (bench_tools.py callgrind-top),
# and the instructions per request are printed. The dump is looked for beside the run's
# --callgrind-out-file, in $WORK.
callgrind_count() {
    local pid=$1 label=$2 batch=$3 requests=$4 out=$5 f
    shift 5
    # A dump, not `callgrind_control -z`: valgrind 3.19's zero leaves costs that other threads
    # ran before it in the next dump (self cost of functions with no calls in the dump: a
    # daemon's start-up work, e.g. 1.6k "a HIT" with 1,000 sessions configured); a dump writes
    # every counter out and starts them all from zero.
    callgrind_control -d "$label-before" "$pid" > "$WORK/cgctl.log" 2>&1 || die "callgrind_control -d failed: $(cat "$WORK/cgctl.log")"
    log "callgrind: $requests requests ($label)"
    curl_batch "$batch"
    if [ $# -gt 0 ]; then "$@"; fi
    sleep 1
    callgrind_control -d "$label" "$pid" > "$WORK/cgctl.log" 2>&1 || die "callgrind_control -d failed: $(cat "$WORK/cgctl.log")"
    f=$(grep -l "^desc: Trigger: dump $label\$" "$WORK"/*callgrind.out* 2>/dev/null | awk 'NR == 1')
    [ -n "$f" ] || die "no callgrind dump $label in $WORK"
    cp "$f" "$out"
    python3 "$BENCH_REPO/Benchmarks/bench_tools.py" callgrind-top "$out" "$requests" --top "${TOP:-10}" | cg_demangle | cut -c1-200 > "$out.top"
    sed -n '1s/.*= \([0-9,]*\) per request.*/\1/p' "$out.top" | tr -d ,
}

# cg_demangle: Swift symbols demangled (swift-demangle --simplified, or `swift demangle`) when present.
cg_demangle() {
    if command -v swift-demangle > /dev/null 2>&1; then swift-demangle --simplified
    elif command -v swift > /dev/null 2>&1 && swift demangle --help > /dev/null 2>&1; then swift demangle --simplified
    else cat; fi
}
