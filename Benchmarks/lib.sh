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
        log "swift build -c release (concierge, concierge-sample-api): ~5 min on 2 cores from scratch"
        (cd "$BENCH_REPO" && swift build -c release --product concierge >&2 && swift build -c release --product concierge-sample-api >&2)
    fi
    CONCIERGE_BIN=$RELEASE_DIR/concierge
    SAMPLE_BIN=$RELEASE_DIR/concierge-sample-api
    [ -x "$CONCIERGE_BIN" ] && [ -x "$SAMPLE_BIN" ] || die "no release binaries in $RELEASE_DIR (unset SKIP_BUILD or set RELEASE_DIR)"
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
