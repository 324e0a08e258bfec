#!/usr/bin/env bash
# Checks the admin API of a live daemon against its description, as CI does:
#   1. schemathesis runs every operation of docs/openapi.yaml (as served at GET /openapi.yaml),
#      positive and negative cases, with the admin token: zero failures;
#   2. `promtool check metrics` on GET /metrics prints nothing.
# Starts the sample API and a daemon on ports the kernel picks (127.0.0.1 only), with state in a
# temp dir; stops both on exit.
#
# Usage: scripts/check-admin-api.sh
#   BUILD_DIR=.build/debug   where concierge and concierge-sample-api are (nothing is compiled)
#   ST=st                    the schemathesis command (default: st on PATH, else .venv-ci/bin/st)
#   ST_MAX_EXAMPLES=50       examples per operation and phase
#   ST_SEED=1                the random seed (fixed, so a CI failure can be replayed)
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-.build/debug}
ST=${ST:-$(command -v st || echo .venv-ci/bin/st)}
ST_MAX_EXAMPLES=${ST_MAX_EXAMPLES:-50}
TOKEN=check-admin-api-token
for b in concierge concierge-sample-api; do
    [ -x "$BUILD_DIR/$b" ] || { echo "check-admin-api: $BUILD_DIR/$b not built (swift build)" >&2; exit 2; }
done
[ -x "$ST" ] || { echo "check-admin-api: schemathesis not found (pip install schemathesis, or set ST)" >&2; exit 2; }
command -v promtool >/dev/null || { echo "check-admin-api: promtool not found (apt-get install prometheus)" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() {
    local pid i
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || continue
        for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# wait_for FILE REGEX PID: the first match of REGEX in FILE (bounded: 30 s; fails early if PID dies).
wait_for() {
    local file=$1 regex=$2 pid=$3 i line
    for ((i = 0; i < 300; i++)); do
        line=$(grep -m1 -E "$regex" "$file" 2>/dev/null || true)
        if [ -n "$line" ]; then echo "$line"; return 0; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "check-admin-api: no '$regex' from pid $pid; its output:" >&2
    cat "$file" >&2
    return 1
}

"$BUILD_DIR/concierge-sample-api" --port 0 > "$work/api.log" 2>&1 &
pids+=($!)
api_port=$(wait_for "$work/api.log" 'listening on http://127.0.0.1:[0-9]+' "${pids[-1]}" | sed 's/.*://')

cat > "$work/concierge.yaml" <<YAML
listen: { proxy: 127.0.0.1:0, admin: 127.0.0.1:0 }
admin: { token: $TOKEN }
storage: { path: $work/state/concierge.sqlite }
upstreams: { release: "http://127.0.0.1:$api_port", debug: "http://127.0.0.1:$api_port" }
session:
  inject: [{ query: accessToken }]
  capture: { endpoint: login, access_token: data.result.accessToken, refresh_token: data.result.refreshToken, user_id: data.result.userId }
  refresh: { path: /api/token/refresh, body: { refreshToken: "{refresh_token}" }, access_token: data.result.accessToken }
sessions:
  portal:
    per_client: { max: 100 }
    inject: [{ query: accessToken }]
    capture: { endpoint: portalLogin, access_token: data.result.accessToken, user_id: data.result.userId }
endpoints:
  - name: login
    match: POST /api/login
  - name: portalLogin
    match: POST /api/portal/login
  - name: userInfo
    match: GET /api/user/info
    login: required
    cache: { ttl: 5m }
  - name: itemList
    match: GET /api/items
    cache: { ttl: 60s }
log: { requests: false }
YAML
"$BUILD_DIR/concierge" serve --config "$work/concierge.yaml" > "$work/daemon.log" 2>&1 &
pids+=($!)
ready=$(wait_for "$work/daemon.log" 'ready admin_port=[0-9]+ proxy_port=[0-9]+' "${pids[-1]}")
admin_port=$(echo "$ready" | sed -E 's/.*admin_port=([0-9]+).*/\1/')
proxy_port=$(echo "$ready" | sed -E 's/.*proxy_port=([0-9]+).*/\1/')
admin=http://127.0.0.1:$admin_port
proxy=http://127.0.0.1:$proxy_port

# Some traffic, so entries, the session, counters and histograms all have values.
curl -fsS -o /dev/null --max-time 10 -X POST -d 'username=alice&password=secret' "$proxy/api/login"
for i in 1 2 3; do curl -fsS -o /dev/null --max-time 10 "$proxy/api/items?limit=$i"; done
curl -fsS -o /dev/null --max-time 10 "$proxy/api/items?limit=1"
curl -fsS -o /dev/null --max-time 10 "$proxy/api/user/info"

echo "== promtool check metrics ($admin/metrics)"
curl -fsS --max-time 10 -H "Authorization: Bearer $TOKEN" "$admin/metrics" > "$work/metrics.txt"
promtool check metrics < "$work/metrics.txt" > "$work/promtool.out" 2>&1 || true
if [ -s "$work/promtool.out" ]; then
    echo "promtool check metrics found problems:"; cat "$work/promtool.out"
    exit 1
fi
echo "promtool: no problems ($(grep -c '^concierge_' "$work/metrics.txt") samples)"

echo "== schemathesis $("$ST" --version 2>&1 | head -1) against $admin/openapi.yaml"
"$ST" run "$admin/openapi.yaml" \
    --header "Authorization: Bearer $TOKEN" \
    --checks all \
    --mode all \
    --max-examples "$ST_MAX_EXAMPLES" \
    --seed "${ST_SEED:-1}" \
    --request-timeout 10 \
    --generation-database none \
    --no-color
