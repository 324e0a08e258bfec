#!/usr/bin/env bash
# Checks systemd/concierge.service:
#   1. systemd-analyze verify: must exit 0 and print no warning about the unit
#      (verify exits 0 even on an unknown key, so its output is checked too);
#   2. systemd-analyze security --offline=true: overall exposure must be <= MAX_EXPOSURE (2.0).
# verify insists that ExecStart's binary exists and is executable, so it runs on a copy
# of the unit whose ExecStart points at a built binary (.build/release or .build/debug),
# or at a stub when nothing is built yet.
#
# Usage: scripts/check-unit.sh [UNIT_FILE]     (env: MAX_EXPOSURE=2.0, CONCIERGE_BIN=path)
# Installs Debian's `systemd` package when systemd-analyze is missing and we are root.
set -euo pipefail

cd "$(dirname "$0")/.."
UNIT=${1:-systemd/concierge.service}
MAX_EXPOSURE=${MAX_EXPOSURE:-2.0}

if ! command -v systemd-analyze >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "systemd-analyze missing: installing Debian's systemd package" >&2
        apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >&2
    else
        echo "systemd-analyze not found (apt-get install systemd)" >&2
        exit 2
    fi
fi
[ -f "$UNIT" ] || { echo "no unit file at $UNIT" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failed=0

# 1. verify ------------------------------------------------------------------------
bin=${CONCIERGE_BIN:-}
if [ -z "$bin" ]; then
    for candidate in .build/release/concierge .build/debug/concierge; do
        if [ -x "$candidate" ]; then bin="$PWD/$candidate"; break; fi
    done
fi
if [ -z "$bin" ]; then
    bin="$work/concierge"
    printf '#!/bin/sh\nexit 0\n' > "$bin"
    chmod 0755 "$bin"
fi
mkdir -p "$work/unit"
# The copy keeps the unit's name: verify derives the unit type and name from it.
sed "s#^\(Exec[A-Za-z]*=[-@:+!]*\)/usr/local/bin/concierge #\1$bin #" "$UNIT" > "$work/unit/concierge.service"
set +e
verify_out=$(systemd-analyze verify --man=no "$work/unit/concierge.service" 2>&1)
verify_rc=$?
set -e
# Warnings about other units (the host's own) are not ours to fix; any line naming
# this unit is.
unit_lines=$(printf '%s\n' "$verify_out" | grep -E 'concierge\.service' || true)
if [ "$verify_rc" -ne 0 ] || [ -n "$unit_lines" ]; then
    echo "verify: FAILED (exit $verify_rc) for $UNIT (ExecStart checked against $bin)"
    printf '%s\n' "$verify_out" | sed "s#$work/unit/#$(dirname "$UNIT")/#; s/^/  /"
    failed=1
else
    echo "verify: OK: systemd-analyze verify exit 0, no warnings ($UNIT, ExecStart checked against $bin)"
fi

# 2. security ----------------------------------------------------------------------
set +e
security_out=$(systemd-analyze security --offline=true --no-pager "$UNIT" 2>&1)
security_rc=$?
set -e
summary=$(printf '%s\n' "$security_out" | grep -E 'Overall exposure level' || true)
if [ -z "$summary" ]; then
    echo "security: FAILED: no overall exposure line (exit $security_rc)"
    printf '%s\n' "$security_out" | sed 's/^/  /'
    failed=1
else
    exposure=$(printf '%s\n' "$summary" | sed -E 's/.*: ([0-9]+\.[0-9]+) .*/\1/')
    echo "security: ${summary#→ }"
    echo "  still exposed (✗, weight):"
    printf '%s\n' "$security_out" | grep -E '^✗' | sed -E 's/^✗ ([^ ]+) +(.*[^ ]) +([0-9.]+)$/    \1  \3  (\2)/'
    if awk -v e="$exposure" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(e + 0 <= m + 0) }'; then
        echo "security: OK: exposure $exposure <= $MAX_EXPOSURE"
    else
        echo "security: FAILED: exposure $exposure > $MAX_EXPOSURE"
        failed=1
    fi
fi

exit "$failed"
