#!/usr/bin/env bash
# What the size of the cache costs: the same measurements at ENTRIES (10,000,000) and at SMALL
# (1,000) entries in one run, side by side with their ratio (loopback only).
#
#   Benchmarks/scale.sh [ENTRIES]
#   SKIP_BUILD=1 RELEASE_DIR=.build/release Benchmarks/scale.sh 100000     # a quick check of the script
#
# For each size (SMALL first, so a broken step fails in seconds, then ENTRIES):
# 1. Starts Concierge (release) on an empty state dir so its migrations create the schema, and
#    fills the file with sqlite3 (lib.sh fill_entries, as startup-1m.sh does: keys
#    "GET http://127.0.0.1:PORT/api/items?n=N v=1", ~330-byte bodies; every entry tagged
#    "g<N % G>" with G = size / TAGGED, so that one tag holds TAGGED = min(100,000, size / 10)
#    entries, as invalidate-1m.sh BY=tags tags them).
# 2. Start-up, RUNS times: spawn to /health (a poller every 5 ms), a filled entry must be a HIT
#    at once, the "cache index loaded" line (the background load), RSS once loaded; 200 misses,
#    kill -9, spawn to /health again. A last clean start stays up for:
# 3. HIT on one hot key (served from the memory tier), once the daemon's integrity check of a
#    large file (every page read once, after the index load) has passed: wrk -t1 -cCONNECTIONS -dDURATION
#    --latency; req/s, CPU µs per request (the daemon's utime+stime over the requests, its
#    deferred work waited for), p50/p99. RSS after it.
# 4. HIT from SQLite: Concierge restarted with storage.memory_bytes: 0 (no memory tier), the
#    index loaded; wrk with a script that walks every filled key in a scattered order
#    (n = (i * 7919 + 13) mod size), so every request is a lookup of the key's row in SQLite.
#    For both HIT runs, the cache writer thread's share of the CPU too (reads reach it as
#    access times, saved by page of rowids).
# 5. Instructions per request (callgrind; lib.sh's callgrind machinery, as profile.sh): Concierge
#    under valgrind (memory tier on), instrumentation off until the index is loaded, then
#    WARMUP requests, CALLGRIND_REQUESTS requests of the hot key, and CALLGRIND_REQUESTS of
#    distinct filled keys each asked once (a row read from SQLite, then put in the memory tier).
# 6. Invalidation, Concierge started again, the index loaded and the integrity check passed: the tag "g7" (TAGGED entries);
#    then the patterns "n=[0-9]*42 " (1 % of the keys) and "n=[0-9]*5 " (10 %), each while a
#    `wrk --latency` HIT load on the hot key runs (its p99 against step 3's); the time of each
#    POST /cache/invalidate, the count removed against the count expected, seconds per million
#    keys scanned. Then POST /reload with storage.max_bytes lowered: whether the running daemon
#    evicts (max_bytes takes effect at the next start, see the summary).
# 7. Eviction: the file's pages in use are F bytes; Concierge restarted with
#    storage.max_bytes = 0.9 F: how long from spawn until the file is under the new bound, and
#    until eviction is done; entries evicted.
# At the large size perf (cpu-clock) samples the daemon during the first index load, the
# invalidations and the eviction: OUT_DIR/perf-STEP.txt, the top symbols by self time.
# Then the summary table (both sizes, ratio, the issue's targets) in OUT_DIR/summary.txt.
#
# Instruction counts (callgrind) do not move with the machine's load; wrk req/s, CPU per
# request, start-up and load times do: read them beside the load average the summary prints.
#
# Needs free disk in STATE_BASE for the file: ~720 bytes an entry (7.2 GB at 10 M with the tags);
# checked first. Every process is stopped by its PID, the state dir removed, on exit.
#
# Env: ENTRIES=10000000 SMALL=1000 RUNS=2 DURATION=10s CONNECTIONS=64 CALLGRIND_REQUESTS=500
#      WARMUP=100 CG_LOAD_LIMIT=3600 EVICT_LIMIT=1800 SKIP_BUILD=0 RELEASE_DIR=.build/release
#      STATE_BASE=/tmp OUT_DIR=bench-out/scale-<time>
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ENTRIES=${1:-${ENTRIES:-10000000}}
SMALL=${SMALL:-1000}
RUNS=${RUNS:-2}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
CALLGRIND_REQUESTS=${CALLGRIND_REQUESTS:-500}
WARMUP=${WARMUP:-100}
CG_LOAD_LIMIT=${CG_LOAD_LIMIT:-3600}
EVICT_LIMIT=${EVICT_LIMIT:-1800}
OUT_DIR=${OUT_DIR:-$BENCH_REPO/bench-out/scale-$(date +%Y%m%d-%H%M%S)}
MEMORY_BYTES=$((64 << 20))
[ "$ENTRIES" -ge 10000 ] && [ "$SMALL" -ge 1000 ] || die "ENTRIES must be at least 10000, SMALL at least 1000"
[ $((WARMUP + CALLGRIND_REQUESTS)) -le "$SMALL" ] || die "WARMUP + CALLGRIND_REQUESTS must not exceed SMALL (distinct keys)"

need_cmds perf:linux-perf sqlite3:sqlite3 wrk:wrk curl:curl python3:python3 valgrind:valgrind callgrind_control:valgrind objcopy:binutils cc:gcc
ensure_release_build
mkdir -p "$OUT_DIR"
make_workdir concierge-scale

need_kib=$(( (ENTRIES + SMALL) * 720 / 1024 + 1048576 ))
free_kib=$(df -Pk "$WORK" | awk 'NR == 2 {print $4}')
[ "$free_kib" -ge "$need_kib" ] || die "$(( free_kib / 1048576 )) GiB free in $WORK, the file needs about $(( need_kib / 1048576 )) GiB (set STATE_BASE)"
log "$(( free_kib / 1048576 )) GiB free in $WORK; the files need about $(( need_kib / 1048576 )) GiB"

SAMPLE_PORT=$(free_port)
UPSTREAM="http://127.0.0.1:$SAMPLE_PORT"
"$SAMPLE_BIN" --host 127.0.0.1 --port "$SAMPLE_PORT" > "$WORK/sample.log" 2>&1 &
SAMPLE_PID=$!; track "$SAMPLE_PID"
wait_http "$UPSTREAM/api/items?limit=1" "$SAMPLE_PID" "$WORK/sample.log"
callgrind_prepare "$CONCIERGE_BIN"

cat > "$WORK/walk.lua" <<'LUA'
-- Every filled key in a scattered order: n = (i * 7919 + 13) mod entries (7919 is prime, so
-- the walk visits every n before it repeats one).
local counter, entries = 0, 1000
function init(args) entries = tonumber(args[1]) end
function request()
    counter = counter + 1
    return wrk.format("GET", "/api/items?n=" .. ((counter * 7919 + 13) % entries))
end
LUA

# perf_start NAME / perf_stop NAME: where the daemon's CPU goes during one step at the large
# size (perf record -e cpu-clock; PERF=0 or a perf that cannot record leaves it out): the top
# symbols by self time in OUT_DIR/perf-NAME.txt.
PERF=${PERF:-1}
if [ "$PERF" = 1 ] && ! perf record -e cpu-clock -o "$WORK/perf-probe.data" -- true > "$WORK/perf-probe.log" 2>&1; then
    log "perf cannot record here: no profiles of the steps"; PERF=0
fi
perf_start() {
    [ "$PERF" = 1 ] && [ "$SIZE" = "$ENTRIES" ] || return 0
    perf record -e cpu-clock -p "$CONCIERGE_PID" -o "$OUT_DIR/perf-$1.data" > "$WORK/perf-$1.log" 2>&1 &
    PERF_PID=$!; track "$PERF_PID"
}
perf_stop() {
    [ "$PERF" = 1 ] && [ "$SIZE" = "$ENTRIES" ] || return 0
    kill -INT "$PERF_PID" 2>/dev/null || true; wait "$PERF_PID" 2>/dev/null || true; untrack "$PERF_PID"
    perf report -i "$OUT_DIR/perf-$1.data" --stdio --no-children --sort comm,dso,sym 2>/dev/null | grep -E '^ +[0-9]' | head -30 \
        | cg_demangle | cut -c1-220 > "$OUT_DIR/perf-$1.txt" || true
}

# Results, by "size:name".
declare -A R

# configure SIZE MEMORY_BYTES MAX_BYTES: the size's config file with new ports (PROXY_PORT, ADMIN_PORT).
configure() {
    PROXY_PORT=$(free_port); ADMIN_PORT=$(free_port)
    write_concierge_config "$DIR/concierge.yaml" "$PROXY_PORT" "$ADMIN_PORT" "$UPSTREAM" "$DB" "$2" "$3" info
}
# start SIZE [LOAD_LIMIT]: a timed start with the current config; waits for the index to load.
start_loaded() {
    : > "$DIR/concierge.log"
    timed_start "$DIR/concierge.yaml" "$DIR/concierge.log" "$ADMIN_PORT"
    LOADED_S=$(index_loaded "$DIR/concierge.log" "${2:-900}")
    [ "$LOADED_S" != never ] || die "size $1: the index did not load"
}
stop_concierge() { stop_pid "$CONCIERGE_PID" 60; untrack "$CONCIERGE_PID"; }
file_bytes() { echo $(( $(stat -c %s "$DB") + $(stat -c %s "$DB-wal" 2>/dev/null || echo 0) )); }
stat_field() { admin_stats "$ADMIN_PORT" "$1"; }
secs_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}'; }

# wrk_hit SIZE NAME URL [SCRIPT ARG]: a timed HIT load (with the wrk script SCRIPT given ARG); sets R[size:NAME_rps], _us (CPU µs per
# request), _p50, _p99, _misses (misses the daemon counted meanwhile).
wrk_hit() {
    local size=$1 name=$2 url=$3 out="$OUT_DIR/wrk-$1-$2.txt" c0 c1 w0 w1 m0 m1 n args=()
    [ $# -ge 5 ] && args=(-s "$4" "$url" -- "$5") || args=("$url")
    m0=$(stat_field misses)
    c0=$(cpu_ticks "$CONCIERGE_PID")
    w0=$(thread_ticks "$CONCIERGE_PID" cache-writer)
    run_waited wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency "${args[@]}" > "$out"
    wait_quiet "$CONCIERGE_PID" 15 > /dev/null
    c1=$(cpu_ticks "$CONCIERGE_PID")
    w1=$(thread_ticks "$CONCIERGE_PID" cache-writer)
    m1=$(stat_field misses)
    n=$(wrk_requests "$out")
    R[$size:${name}_rps]=$(wrk_rps "$out" | awk '{printf "%.0f", $1}')
    R[$size:${name}_us]=$(awk -v d=$((c1 - c0)) -v hz="$CLK_TCK" -v n="$n" 'BEGIN {printf "%.1f", d / hz * 1e6 / n}')
    # The cache writer's share: reads reach it as access times (saved by page of rowids).
    R[$size:${name}_writer_us]=$(awk -v d=$((w1 - w0)) -v hz="$CLK_TCK" -v n="$n" 'BEGIN {printf "%.1f", d / hz * 1e6 / n}')
    R[$size:${name}_p50]=$(wrk_pct_ms "$out" 50)
    R[$size:${name}_p99]=$(wrk_pct_ms "$out" 99)
    R[$size:${name}_misses]=$((m1 - m0))
    log "size $size $name: ${R[$size:${name}_rps]} req/s, ${R[$size:${name}_us]} µs CPU/request (writer ${R[$size:${name}_writer_us]}), p99 ${R[$size:${name}_p99]} ms, $((m1 - m0)) misses"
}

# fill SIZE: schema from the daemon's migrations, then the rows.
fill() {
    local size=$1 began
    configure "$size" "$MEMORY_BYTES" 1024GB
    timed_start "$DIR/concierge.yaml" "$DIR/concierge.log" "$ADMIN_PORT"
    stop_concierge
    log "size $size: writing $size entries (tag groups $TAG_GROUPS) into $DB with sqlite3"
    began=$(date +%s.%N)
    fill_entries "$DB" "$UPSTREAM" "$size" 200 "$TAG_GROUPS"
    R[$size:fill_s]=$(secs_since "$began")
    R[$size:rows]=$(sqlite3 "$DB" "SELECT count(*) FROM cache_entry")
    R[$size:file_mib]=$(( $(file_bytes) >> 20 ))
    log "size $size: ${R[$size:rows]} rows in ${R[$size:fill_s]} s, file ${R[$size:file_mib]} MiB"
}

# scan_floor SIZE: SQLite alone (the sqlite3 shell, no daemon), one pass over every key: through
# the table's rows, as the index loader and a pattern scan read them (rowid order, every row's
# page with its body), and through the key's own index (only keys and rowids).
scan_floor() {
    local size=$1 began
    began=$(date +%s.%N)
    sqlite3 "$DB" "SELECT count(*), sum(length(key)) FROM cache_entry NOT INDEXED" > /dev/null
    R[$size:scan_table_s]=$(secs_since "$began")
    began=$(date +%s.%N)
    sqlite3 "$DB" "SELECT count(*), sum(length(key)) FROM cache_entry INDEXED BY sqlite_autoindex_cache_entry_1" > /dev/null
    R[$size:scan_index_s]=$(secs_since "$began")
    log "size $size: sqlite3 pass over every key: ${R[$size:scan_table_s]} s through the table, ${R[$size:scan_index_s]} s through the key index"
}

# startup SIZE: RUNS clean starts and starts after kill -9; leaves a loaded daemon running.
startup() {
    local size=$1 run probe="http://127.0.0.1:$PROXY_PORT/api/items?n=$(( $1 - 3 ))" clean=() killed=() loads=()
    for ((run = 1; run <= RUNS + 1; run++)); do
        : > "$DIR/concierge.log"
        timed_start "$DIR/concierge.yaml" "$DIR/concierge.log" "$ADMIN_PORT"
        clean+=("$READY_MS")
        [ "$run" = 1 ] && perf_start load
        [ "$(x_cache "$probe")" = HIT ] || die "size $size: a filled entry was not a HIT right after start-up (key format changed?)"
        loads+=("$(index_loaded "$DIR/concierge.log" 900 | awk '$1 == "never" {print; next} {printf "%.2f", $1}')")
        [ "$run" = 1 ] && perf_stop load
        [ "$(stat_field entries)" -ge "${R[$size:rows]}" ] || die "size $size: /stats counts fewer entries than the file holds"
        R[$size:rss_loaded]=$(( $(rss_kib "$CONCIERGE_PID") / 1024 ))
        [ "$run" -le "$RUNS" ] || break
        ( for i in $(seq 1 200); do curl -sS -o /dev/null --max-time 30 "http://127.0.0.1:$PROXY_PORT/api/items?killed=$run-$i" & done; wait )
        kill -9 "$CONCIERGE_PID"; untrack "$CONCIERGE_PID"
        : > "$DIR/concierge.log"
        timed_start "$DIR/concierge.yaml" "$DIR/concierge.log" "$ADMIN_PORT"
        killed+=("$READY_MS")
        [ "$(x_cache "$probe")" = HIT ] || die "size $size: a filled entry was not a HIT right after kill -9"
        stop_concierge
        log "size $size run $run: ready ${clean[-1]} ms clean, ${killed[-1]} ms after kill -9; loaded in ${loads[-1]} s; RSS ${R[$size:rss_loaded]} MiB"
    done
    R[$size:clean_ms]=${clean[*]}; R[$size:kill_ms]=${killed[*]}; R[$size:load_s]=${loads[*]}
}

# integrity_waited SIZE NAME: before a wrk run, the daemon's one integrity check of a file over
# 32 MiB (it reads every page once the index is loaded) is waited for, so that its CPU is not
# counted per request; how long it took goes in R[SIZE:NAME] ("-" for a smaller file).
integrity_waited() {
    if [ "$(file_bytes)" -le $((32 << 20)) ]; then R[$1:$2]="-"; return 0; fi
    R[$1:$2]=$(integrity_checked "$DIR/concierge.log" 900 | awk '$1 == "never" {print; next} {printf "%.2f", $1}')
    log "size $1: integrity check passed in ${R[$1:$2]} s (after the index loaded)"
}

# callgrind_size SIZE: instructions per request of a hot HIT and of a HIT read from SQLite.
callgrind_size() {
    local size=$1 hot="http://127.0.0.1:$PROXY_PORT/api/items?n=hot" i began
    callgrind_launcher "$WORK/s$size-callgrind.out" --instr-atstart=no
    began=$(date +%s.%N)
    "${CG_LAUNCH[@]}" "$CG_BIN" serve --config "$DIR/concierge.yaml" > "$DIR/concierge.log" 2>&1 &
    CONCIERGE_PID=$!; track "$CONCIERGE_PID"
    wait_http "http://127.0.0.1:$ADMIN_PORT/health" "$CONCIERGE_PID" "$DIR/concierge.log" 600
    R[$size:cg_load_s]=$(index_loaded "$DIR/concierge.log" "$CG_LOAD_LIMIT" | awk '$1 == "never" {print; next} {printf "%.1f", $1}')
    if [ "${R[$size:cg_load_s]}" = never ]; then
        log "size $size: the index did not load under valgrind within ${CG_LOAD_LIMIT}s: no instruction counts"
        R[$size:cg_hot]=n/a; R[$size:cg_sqlite]=n/a; R[$size:cg_hot_path]=n/a; R[$size:cg_sqlite_path]=n/a
        R[$size:cg_hot_writer]=n/a; R[$size:cg_sqlite_writer]=n/a
        stop_pid "$CONCIERGE_PID" 120; untrack "$CONCIERGE_PID"
        return 0
    fi
    log "size $size: index loaded under valgrind in ${R[$size:cg_load_s]} s ($(secs_since "$began") s from spawn)"
    # The integrity check of a large file reads every page on a thread of its own: counted, it
    # would be most of each request's instructions.
    if [ "$(file_bytes)" -gt $((32 << 20)) ]; then
        log "size $size: integrity check under valgrind: $(integrity_checked "$DIR/concierge.log" "$CG_LOAD_LIMIT") s"
    fi
    callgrind_control -i on "$CONCIERGE_PID" > "$WORK/cgctl.log" 2>&1 || die "callgrind_control -i on failed: $(cat "$WORK/cgctl.log")"
    for ((i = 0; i < WARMUP + CALLGRIND_REQUESTS; i++)); do
        printf 'url = "%s"\noutput = /dev/null\n' "$hot" >> "$DIR/cg-hot-$([ "$i" -lt "$WARMUP" ] && echo warm || echo run).curl"
        printf 'url = "http://127.0.0.1:%s/api/items?n=%s"\noutput = /dev/null\n' "$PROXY_PORT" $(( (i * 7919 + 13) % size )) \
            >> "$DIR/cg-sqlite-$([ "$i" -lt "$WARMUP" ] && echo warm || echo run).curl"
    done
    curl_batch "$DIR/cg-hot-warm.curl"; curl_batch "$DIR/cg-sqlite-warm.curl"
    [ "$(stat_field misses)" -le 1 ] || die "size $size: filled keys missed under callgrind"
    sleep 1
    R[$size:cg_hot]=$(callgrind_count "$CONCIERGE_PID" "s$size-hot" "$DIR/cg-hot-run.curl" "$CALLGRIND_REQUESTS" "$OUT_DIR/callgrind-$size-hot.out")
    R[$size:cg_sqlite]=$(callgrind_count "$CONCIERGE_PID" "s$size-sqlite" "$DIR/cg-sqlite-run.curl" "$CALLGRIND_REQUESTS" "$OUT_DIR/callgrind-$size-sqlite.out")
    [ "$(stat_field misses)" -le 1 ] || die "size $size: filled keys missed under callgrind"
    cg_split "$size" cg_hot "$OUT_DIR/callgrind-$size-hot.out"
    cg_split "$size" cg_sqlite "$OUT_DIR/callgrind-$size-sqlite.out"
    log "size $size: callgrind hot HIT ${R[$size:cg_hot]}, SQLite HIT ${R[$size:cg_sqlite]} instructions/request"
    stop_pid "$CONCIERGE_PID" 120; untrack "$CONCIERGE_PID"
}

# cg_split SIZE NAME DUMP: the writer thread's instructions per request in a dump (CacheWriter.loop,
# inclusive: its commits of the access log's touches, once a second for a hot key, and its
# sweeps, every 30 s, are paid by time, not by request) and the rest, the request path's.
cg_split() {
    local writer
    # awk reads to the end: leaving at the first match closed the pipe under the demangler,
    # whose SIGPIPE failed the pipeline and, with `set -e`, ended the script without a word.
    writer=$(callgrind_annotate --inclusive=yes --threshold=100 "$3" 2>/dev/null | cg_demangle \
        | awk '/\?\?\?:CacheWriter\.loop\(\) \[/ && !found {found = 1; gsub(/,/, "", $1); print $1}')
    R[$1:$2_writer]=$(( ${writer:-0} / CALLGRIND_REQUESTS ))
    R[$1:$2_path]=$(( ${R[$1:$2]} - ${R[$1:$2_writer]} ))
}

# invalidate CRITERIA_JSON SIZE NAME: POST /cache/invalidate, timed; sets R[SIZE:NAME_s], _removed, _code.
invalidate() {
    local out="$OUT_DIR/invalidate-$2-$3.json" r
    r=$(curl -sS --max-time 600 -o "$out" -w '%{http_code} %{time_total}' -H "Authorization: Bearer bench-admin-token" \
        -H 'Content-Type: application/json' -X POST --data "$1" "http://127.0.0.1:$ADMIN_PORT/cache/invalidate")
    set -- "$2" "$3" $r
    R[$1:$2_code]=$3
    R[$1:$2_s]=$(awk -v t="$4" 'BEGIN {printf "%.2f", t}')
    R[$1:$2_removed]=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("removed", "?"))' "$out" 2>/dev/null || echo "?")
    log "size $1 $2: HTTP $3 in ${R[$1:$2_s]} s, removed ${R[$1:$2_removed]}: $(head -c 300 "$out")"
}

# pattern_under_load SIZE NAME PATTERN: the invalidation while wrk --latency loads the hot key.
pattern_under_load() {
    local size=$1 name=$2 out="$OUT_DIR/wrk-$1-during-$2.txt" wrk_pid
    R[$size:${name}_scanned]=$(stat_field entries)
    wrk -t1 -c"$CONNECTIONS" -d600s --latency "http://127.0.0.1:$PROXY_PORT/api/items?n=hot" > "$out" &
    wrk_pid=$!; track "$wrk_pid"
    sleep 1
    perf_start "pattern-$name"
    invalidate "{\"pattern\": \"$3\"}" "$size" "$name"
    perf_stop "pattern-$name"
    sleep 1
    kill -INT "$wrk_pid"; wait "$wrk_pid" || true; untrack "$wrk_pid"
    R[$size:${name}_p99]=$(wrk_pct_ms "$out" 99)
    R[$size:${name}_errors]=$(wrk_errors "$out")
    R[$size:${name}_per_m]=$(awk -v t="${R[$size:${name}_s]}" -v n="${R[$size:${name}_scanned]}" 'BEGIN {printf "%.2f", t / (n / 1e6)}')
    wait_quiet "$CONCIERGE_PID" 300 > /dev/null
}

# invalidations SIZE: tag, 1 % and 10 % patterns, then a reload with a lower max_bytes.
invalidations() {
    local size=$1
    configure "$size" "$MEMORY_BYTES" 1024GB
    start_loaded "$size"
    integrity_waited "$size" integrity_inv_s
    curl -fsS -o /dev/null "http://127.0.0.1:$PROXY_PORT/api/items?n=hot"
    perf_start tag
    invalidate '{"tags": ["g7"]}' "$size" tag
    perf_stop tag
    R[$size:tag_expected]=$(( (size - 7 + TAG_GROUPS - 1) / TAG_GROUPS ))
    wait_quiet "$CONCIERGE_PID" 300 > /dev/null
    pattern_under_load "$size" p1 'n=[0-9]*42 '
    R[$size:p1_expected]=$(( (size - 42 + 99) / 100 ))
    pattern_under_load "$size" p10 'n=[0-9]*5 '
    R[$size:p10_expected]=$(( (size - 5 + 9) / 10 ))
    [ "$(x_cache "http://127.0.0.1:$PROXY_PORT/api/items?n=hot")" = HIT ] || die "size $size: the hot key was not a HIT after the invalidations"
    [ "$(x_cache "http://127.0.0.1:$PROXY_PORT/api/items?n=15")" = MISS ] || die "size $size: n=15 was not invalidated"
    # max_bytes through a reload: does the running daemon evict?
    local before after
    before=$(stat_field entries)
    write_concierge_config "$DIR/concierge.yaml" "$PROXY_PORT" "$ADMIN_PORT" "$UPSTREAM" "$DB" "$MEMORY_BYTES" $(( $(file_bytes) / 2 )) info
    R[$size:reload]=$(curl -sS --max-time 30 -H "Authorization: Bearer bench-admin-token" -X POST "http://127.0.0.1:$ADMIN_PORT/reload")
    sleep 5
    wait_quiet "$CONCIERGE_PID" 60 > /dev/null
    after=$(stat_field entries)
    R[$size:reload_evicted]=$((before - after))
    log "size $size: reload with max_bytes at half the file: ${R[$size:reload]}; entries $before -> $after"
    stop_concierge
}

# eviction SIZE: restart with max_bytes 10 % under the pages in use; how long until the file is
# under it, and until the entries stop going (5 s without a change once under it; 30 s once
# loaded when it never gets there).
eviction() {
    local size=$1 bound began entries0 f e t t_under="" t_change=0 last="" used
    R[$size:evict_from_mib]=$(( $(file_bytes) >> 20 ))
    # 10 % under what the entries take (the pages in use), not under the file: the invalidations
    # left free pages that eviction gives back before it deletes anything.
    used=$(sqlite3 "$DB" "SELECT (p.page_count - f.freelist_count) * s.page_size FROM pragma_page_count p, pragma_freelist_count f, pragma_page_size s")
    R[$size:evict_used_mib]=$(( used >> 20 ))
    bound=$(( used / 10 * 9 ))
    R[$size:evict_bound_mib]=$(( bound >> 20 ))
    entries0=$(sqlite3 "$DB" "SELECT count(*) FROM cache_entry")
    configure "$size" "$MEMORY_BYTES" "$bound"
    : > "$DIR/concierge.log"
    began=$(date +%s.%N)
    timed_start "$DIR/concierge.yaml" "$DIR/concierge.log" "$ADMIN_PORT"
    perf_start eviction
    while true; do
        t=$(secs_since "$began")
        f=$(file_bytes)
        e=$(stat_field entries)
        if [ -z "$t_under" ] && [ "$f" -le "$bound" ]; then t_under=$t; fi
        if [ "$e" != "$last" ]; then last=$e; t_change=$t; fi
        if grep -q "cache index loaded" "$DIR/concierge.log"; then
            awk -v t="$t" -v c="$t_change" -v u="$t_under" 'BEGIN {exit !((u != "" && t - c >= 5) || t - c >= 30)}' && break
        fi
        awk -v t="$t" -v l="$EVICT_LIMIT" 'BEGIN {exit !(t >= l)}' && { log "size $size: eviction still going after ${EVICT_LIMIT}s"; break; }
        sleep 0.5
    done
    perf_stop eviction
    R[$size:evict_under_s]=${t_under:-never}
    R[$size:evict_done_s]=$t_change
    R[$size:evict_load_s]=$(index_loaded "$DIR/concierge.log" 1 | awk '$1 == "never" {print; next} {printf "%.2f", $1}')
    R[$size:evicted]=$(( entries0 - $(sqlite3 "$DB" "SELECT count(*) FROM cache_entry") ))
    R[$size:evict_to_mib]=$(( $(file_bytes) >> 20 ))
    log "size $size: file ${R[$size:evict_from_mib]} MiB, max_bytes ${R[$size:evict_bound_mib]} MiB: under it ${t_under:-never} s after spawn, last eviction ${t_change} s, ${R[$size:evicted]} entries evicted"
    stop_concierge
}

measure_size() {
    local size=$1
    SIZE=$size
    DIR="$WORK/s$size"; DB="$DIR/state/cache.sqlite"
    mkdir -p "$DIR"
    TAGGED=$(( size / 10 < 100000 ? size / 10 : 100000 ))
    TAG_GROUPS=$(( size / TAGGED ))
    R[$size:tagged]=$TAGGED
    fill "$size"
    scan_floor "$size"
    configure "$size" "$MEMORY_BYTES" 1024GB
    startup "$size"
    integrity_waited "$size" integrity_s
    curl -fsS -o /dev/null "http://127.0.0.1:$PROXY_PORT/api/items?n=hot"
    [ "$(x_cache "http://127.0.0.1:$PROXY_PORT/api/items?n=hot")" = HIT ] || die "size $size: the hot key is not a HIT"
    wrk_hit "$size" hot "http://127.0.0.1:$PROXY_PORT/api/items?n=hot"
    R[$size:rss_after_hot]=$(( $(rss_kib "$CONCIERGE_PID") / 1024 ))
    stop_concierge
    configure "$size" 0 1024GB
    start_loaded "$size"
    integrity_waited "$size" integrity_nomem_s
    R[$size:rss_loaded_nomem]=$(( $(rss_kib "$CONCIERGE_PID") / 1024 ))
    wrk_hit "$size" sqlite "http://127.0.0.1:$PROXY_PORT/api/items" "$WORK/walk.lua" "$size"
    stop_concierge
    configure "$size" "$MEMORY_BYTES" 1024GB
    callgrind_size "$size"
    invalidations "$size"
    eviction "$size"
    rm -f "$DB" "$DB-wal" "$DB-shm"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for size in "$SMALL" "$ENTRIES"; do
    log "=== $size entries ==="
    measure_size "$size"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# --- summary -------------------------------------------------------------------------------
S=$SMALL; L=$ENTRIES
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a + 0 > 0 && b != "n/a" && a != "n/a") printf "%.2fx", b / a; else print "-"}'; }
maxof() { echo "$1" | tr ' ' '\n' | sort -n | tail -1; }
verdict() { if awk "BEGIN {exit !($1)}"; then echo met; else echo MISSED; fi; }
rss_target=$(awk -v m="$MEMORY_BYTES" -v n="$L" 'BEGIN {printf "%.0f", (m + 48 * n) / 1048576}')
row() { printf '%-44s %16s %16s %8s  %s\n' "$@"; }
{
    echo "Concierge at $S and at $L entries: $(binary_info)"
    echo "$(nproc) cores, load average $LOAD_BEFORE before, $LOAD_AFTER after; $(date -u '+%F %H:%M UTC'); STATE_BASE ${STATE_BASE:-${TMPDIR:-/tmp}}"
    echo "instruction counts (callgrind) are exact under load; req/s, CPU µs, start-up and load times move with the machine's load"
    echo
    row "" "$S entries" "$L entries" "ratio" "target"
    row "file (MiB), fill time (s)" "${R[$S:file_mib]}, ${R[$S:fill_s]}" "${R[$L:file_mib]}, ${R[$L:fill_s]}" "" ""
    row "sqlite3 pass over the keys: table (s)" "${R[$S:scan_table_s]}" "${R[$L:scan_table_s]}" "" ""
    row "sqlite3 pass over the keys: key index (s)" "${R[$S:scan_index_s]}" "${R[$L:scan_index_s]}" "" ""
    for k in hot sqlite; do
        row "HIT $([ $k = hot ] && echo "hot key" || echo "from SQLite"), instructions/request" "" "" "" ""
        row "  request path (all but the writer)" "${R[$S:cg_${k}_path]}" "${R[$L:cg_${k}_path]}" "$(ratio "${R[$S:cg_${k}_path]}" "${R[$L:cg_${k}_path]}")" "≤ 1.1x"
        row "  writer thread" "${R[$S:cg_${k}_writer]}" "${R[$L:cg_${k}_writer]}" "" ""
        row "  all threads" "${R[$S:cg_$k]}" "${R[$L:cg_$k]}" "$(ratio "${R[$S:cg_$k]}" "${R[$L:cg_$k]}")" ""
    done
    row "HIT hot key, wrk req/s" "${R[$S:hot_rps]}" "${R[$L:hot_rps]}" "$(ratio "${R[$S:hot_rps]}" "${R[$L:hot_rps]}")" "(load-dependent)"
    row "HIT hot key, CPU µs/request" "${R[$S:hot_us]}" "${R[$L:hot_us]}" "$(ratio "${R[$S:hot_us]}" "${R[$L:hot_us]}")" "≤ 1.1x (load-dependent)"
    row "HIT hot key, p50 / p99 ms" "${R[$S:hot_p50]} / ${R[$S:hot_p99]}" "${R[$L:hot_p50]} / ${R[$L:hot_p99]}" "" ""
    row "HIT from SQLite, wrk req/s" "${R[$S:sqlite_rps]}" "${R[$L:sqlite_rps]}" "$(ratio "${R[$S:sqlite_rps]}" "${R[$L:sqlite_rps]}")" "(load-dependent)"
    row "HIT from SQLite, CPU µs/request" "${R[$S:sqlite_us]}" "${R[$L:sqlite_us]}" "$(ratio "${R[$S:sqlite_us]}" "${R[$L:sqlite_us]}")" "≤ 1.1x (load-dependent)"
    row "  of which the cache writer" "${R[$S:sqlite_writer_us]}" "${R[$L:sqlite_writer_us]}" "" ""
    row "HIT from SQLite, misses during the run" "${R[$S:sqlite_misses]}" "${R[$L:sqlite_misses]}" "" "0"
    row "start-up to /health, clean stop (ms)" "${R[$S:clean_ms]}" "${R[$L:clean_ms]}" "" "≤ 200"
    row "start-up to /health, after kill -9 (ms)" "${R[$S:kill_ms]}" "${R[$L:kill_ms]}" "" "≤ 200"
    row "index loaded in the background (s)" "${R[$S:load_s]}" "${R[$L:load_s]}" "" "≤ 15"
    row "integrity check after the load (s)" "${R[$S:integrity_s]}" "${R[$L:integrity_s]}" "" "(waited for before wrk)"
    row "RSS once loaded (MiB)" "${R[$S:rss_loaded]}" "${R[$L:rss_loaded]}" "" "≤ $rss_target"
    row "RSS after the hot HIT run (MiB)" "${R[$S:rss_after_hot]}" "${R[$L:rss_after_hot]}" "" ""
    row "RSS loaded, memory_bytes: 0 (MiB)" "${R[$S:rss_loaded_nomem]}" "${R[$L:rss_loaded_nomem]}" "" ""
    row "index loaded under valgrind (s)" "${R[$S:cg_load_s]}" "${R[$L:cg_load_s]}" "" ""
    for p in tag p1 p10; do
        case $p in tag) what="tag g7 (${R[$L:tagged]} at $L)" ;; p1) what="pattern 1 %" ;; p10) what="pattern 10 %" ;; esac
        row "$what: s (HTTP)" "${R[$S:${p}_s]} (${R[$S:${p}_code]})" "${R[$L:${p}_s]} (${R[$L:${p}_code]})" "" \
            "$([ $p = tag ] && echo "≤ 0.5 s for 100,000" || echo "≤ 1 s per million scanned")"
        row "  removed / expected" "${R[$S:${p}_removed]} / ${R[$S:${p}_expected]}" "${R[$L:${p}_removed]} / ${R[$L:${p}_expected]}" "" ""
        if [ "$p" != tag ]; then
            row "  s per million keys scanned" "${R[$S:${p}_per_m]}" "${R[$L:${p}_per_m]}" "" "≤ 1"
            row "  HIT p99 meanwhile (ms)" "${R[$S:${p}_p99]}" "${R[$L:${p}_p99]}" "" "≤ 2x hot p99"
        fi
    done
    row "reload, max_bytes at half the file: evicted" "${R[$S:reload_evicted]}" "${R[$L:reload_evicted]}" "" ""
    row "eviction: file, in use -> max_bytes (MiB)" "${R[$S:evict_from_mib]}, ${R[$S:evict_used_mib]} -> ${R[$S:evict_bound_mib]}" \
        "${R[$L:evict_from_mib]}, ${R[$L:evict_used_mib]} -> ${R[$L:evict_bound_mib]}" "" ""
    row "  under the bound, s after spawn" "${R[$S:evict_under_s]}" "${R[$L:evict_under_s]}" "" ""
    row "  last entry evicted, s after spawn" "${R[$S:evict_done_s]}" "${R[$L:evict_done_s]}" "" ""
    row "  index loaded first (s), entries evicted" "${R[$S:evict_load_s]}, ${R[$S:evicted]}" "${R[$L:evict_load_s]}, ${R[$L:evicted]}" "" ""
    row "  file after (MiB)" "${R[$S:evict_to_mib]}" "${R[$L:evict_to_mib]}" "" ""
    echo
    echo "reload reply ($L): ${R[$L:reload]}"
    echo
    echo "targets at $L entries:"
    [ "${R[$L:cg_hot]}" != n/a ] && echo "  HIT instructions within 1.1x, request path (hot, SQLite): $(verdict "${R[$L:cg_hot_path]} <= 1.1 * ${R[$S:cg_hot_path]}"), $(verdict "${R[$L:cg_sqlite_path]} <= 1.1 * ${R[$S:cg_sqlite_path]}")"
    echo "  HIT CPU within 1.1x (hot, SQLite; load-dependent): $(verdict "${R[$L:hot_us]} <= 1.1 * ${R[$S:hot_us]}"), $(verdict "${R[$L:sqlite_us]} <= 1.1 * ${R[$S:sqlite_us]}")"
    echo "  start-up ≤ 200 ms (clean, kill -9): $(verdict "$(maxof "${R[$L:clean_ms]}") <= 200"), $(verdict "$(maxof "${R[$L:kill_ms]}") <= 200")"
    echo "  background load ≤ 15 s: $(verdict "$(maxof "${R[$L:load_s]}") <= 15")"
    echo "  RSS ≤ memory_bytes + 48 B/entry ($rss_target MiB): $(verdict "${R[$L:rss_loaded]} <= $rss_target")"
    for p in p1 p10; do
        if [ "${R[$L:${p}_code]}" = 200 ]; then
            echo "  pattern $p: ≤ 1 s/million $(verdict "${R[$L:${p}_per_m]} <= 1"), p99 ≤ 2x $(verdict "${R[$L:${p}_p99]} <= 2 * ${R[$L:hot_p99]}")"
        else
            echo "  pattern $p: MISSED (HTTP ${R[$L:${p}_code]})"
        fi
    done
    echo "  tag invalidation of ${R[$L:tagged]} ≤ 0.5 s: $(verdict "${R[$L:tag_s]} <= 0.5")"
    echo
    echo "raw output (wrk, callgrind dumps with .top, invalidation replies): $OUT_DIR"
} | tee "$OUT_DIR/summary.txt"
