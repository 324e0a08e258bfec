#!/usr/bin/env bash
# Tests `make install` / `make uninstall` into temporary DESTDIRs (no root side effects:
# a fake systemctl on PATH fails the test if it is ever called).
#
# Usage: scripts/test-install.sh
#   BUILD_DIR=.build/debug    binaries to install (default: .build/release if built, else
#                             .build/debug); nothing is compiled here
#   CONFIG_SRC=path           config to ship instead of Config/concierge.yaml
# Prints one line per check and "N passed, M failed"; exits 1 when any check failed.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

if [ -z "${BUILD_DIR:-}" ]; then
    if [ -x .build/release/concierge ] && [ -x .build/release/concierge-sample-api ]; then
        BUILD_DIR=.build/release
    else
        BUILD_DIR=.build/debug
    fi
fi
CONFIG_SRC=${CONFIG_SRC:-Config/concierge.yaml}
for b in concierge concierge-sample-api; do
    [ -x "$BUILD_DIR/$b" ] || { echo "test-install: $BUILD_DIR/$b not built (swift build, or set BUILD_DIR)" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Any systemctl call during a DESTDIR install is a failure.
mkdir -p "$work/fakebin"
cat > "$work/fakebin/systemctl" <<EOF
#!/bin/sh
echo "systemctl \$*" >> "$work/systemctl-calls"
exit 0
EOF
chmod +x "$work/fakebin/systemctl"
export PATH="$work/fakebin:$PATH"

passed=0
failed=0
check() { # check "description" command...
    local what=$1; shift
    if "$@" >/dev/null 2>&1; then
        passed=$((passed + 1)); echo "ok    $what"
    else
        failed=$((failed + 1)); echo "FAIL  $what"
    fi
}
mode_is() { [ "$(stat -c %a "$2")" = "$1" ]; }
no_systemctl() { [ ! -e "$work/systemctl-calls" ]; }
run_make() { # run_make LOGFILE args...
    local log=$1; shift
    make -s -C "$ROOT" "$@" BUILD_DIR="$BUILD_DIR" CONFIG_SRC="$CONFIG_SRC" > "$log" 2>&1
}

D="$work/root"
mkdir -p "$D"
B="$D/usr/local/bin"
U="$D/etc/systemd/system/concierge.service"
C="$D/etc/concierge"

# 1. First install ---------------------------------------------------------------
check "make install DESTDIR=... PREFIX=/usr/local exits 0" run_make "$work/install1.log" install DESTDIR="$D" PREFIX=/usr/local
check "concierge installed 0755"                   mode_is 755 "$B/concierge"
check "concierge-sample-api installed 0755"        mode_is 755 "$B/concierge-sample-api"
check "installed concierge is the built one"       cmp "$BUILD_DIR/concierge" "$B/concierge"
check "unit installed 0644"                        mode_is 644 "$U"
check "unit is systemd/concierge.service as is for PREFIX=/usr/local" cmp systemd/concierge.service "$U"
check "unit ExecStart runs /usr/local/bin/concierge" grep -qx 'ExecStart=/usr/local/bin/concierge serve --config /etc/concierge/concierge.yaml' "$U"
check "config installed 0644 and equal to $CONFIG_SRC" sh -c "[ \$(stat -c %a '$C/concierge.yaml') = 644 ] && cmp '$CONFIG_SRC' '$C/concierge.yaml'"
check "admin.token created 0600"                   mode_is 600 "$C/admin.token"
check "admin.token is 64 hex digits"               grep -Eqx '[0-9a-f]{64}' "$C/admin.token"
check "installed tree holds exactly the expected files" sh -c "
    cd '$D' && [ \"\$(find . -type f | sort | tr '\n' ' ')\" = './etc/concierge/admin.token ./etc/concierge/concierge.yaml ./etc/systemd/system/concierge.service ./usr/local/bin/concierge ./usr/local/bin/concierge-sample-api ./usr/local/share/concierge/grafana/concierge.json ./usr/local/share/concierge/prometheus/concierge-alerts.test.yaml ./usr/local/share/concierge/prometheus/concierge-alerts.yaml ' ]"
check "no systemctl call with DESTDIR set"         no_systemctl
check "install says systemctl was not called"      grep -q 'systemctl not called' "$work/install1.log"

# 2. The installed config, as the service and as root's shell would load it ------------
cfgcheck() { env -u CONCIERGE_ADMIN_TOKEN "$@" "$B/concierge" check-config --config "$C/concierge.yaml" 2>&1; }
storage_ok() { cfgcheck env | grep -q '^storage: /var/lib/concierge/concierge.sqlite,'; }
token_service() { cfgcheck env CREDENTIALS_DIRECTORY=/run/credentials/concierge.service | grep -qx 'admin token: from /run/credentials/concierge.service/admin.token'; }
token_shell() { cfgcheck env -u CREDENTIALS_DIRECTORY | grep -qx 'admin token: from /etc/concierge/admin.token'; }
check "installed config passes check-config"       cfgcheck env
check "config storage.path is /var/lib/concierge/concierge.sqlite (StateDirectory=)" storage_ok
check "config admin token under systemd = LoadCredential'd /run/credentials/concierge.service/admin.token" token_service
check "config admin token from a root shell = /etc/concierge/admin.token" token_shell
check "install warns about nothing"                sh -c "! grep -q WARNING '$work/install1.log'"

# 3. Second install keeps the operator's config and the token -------------------------
echo "# edited by the operator" >> "$C/concierge.yaml"
cp "$C/concierge.yaml" "$work/edited.yaml"
cp "$C/admin.token" "$work/token.before"
check "second make install exits 0"                run_make "$work/install2.log" install DESTDIR="$D" PREFIX=/usr/local
check "second install keeps the edited config"     cmp "$work/edited.yaml" "$C/concierge.yaml"
check "second install keeps the existing token"    cmp "$work/token.before" "$C/admin.token"
check "token still 0600"                           mode_is 600 "$C/admin.token"
check "second install says it kept both"           sh -c "grep -q 'keeping existing .*concierge.yaml' '$work/install2.log' && grep -q 'keeping existing .*admin.token' '$work/install2.log'"

# 4. PREFIX=/usr rewrites ExecStart -----------------------------------------------------
D2="$work/root-usr"
check "make install PREFIX=/usr exits 0"           run_make "$work/install3.log" install DESTDIR="$D2" PREFIX=/usr
check "PREFIX=/usr: binaries in /usr/bin"          test -x "$D2/usr/bin/concierge" -a -x "$D2/usr/bin/concierge-sample-api"
check "PREFIX=/usr: ExecStart=/usr/bin/concierge"  grep -qx 'ExecStart=/usr/bin/concierge serve --config /etc/concierge/concierge.yaml' "$D2/etc/systemd/system/concierge.service"

# 5. Missing binaries: clear error, nothing installed ----------------------------------
D3="$work/root-missing"
check "install without built binaries fails"       sh -c "! make -s -C '$ROOT' install DESTDIR='$D3' BUILD_DIR='$work/nothing' > '$work/install4.log' 2>&1"
check "... saying to run make build, installing nothing" sh -c "grep -q 'make build' '$work/install4.log' && [ ! -e '$D3' ]"

# 6. Uninstall keeps config, token and state -------------------------------------------
check "make uninstall exits 0"                     run_make "$work/uninstall.log" uninstall DESTDIR="$D" PREFIX=/usr/local
check "uninstall removed the binaries"             test ! -e "$B/concierge" -a ! -e "$B/concierge-sample-api"
check "uninstall removed the unit"                 test ! -e "$U"
check "uninstall removed the dashboard and rules"  test ! -e "$D/usr/local/share/concierge"
check "uninstall kept config and token"            test -f "$C/concierge.yaml" -a -f "$C/admin.token"
check "still no systemctl call"                    no_systemctl

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
