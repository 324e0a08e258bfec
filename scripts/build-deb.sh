#!/usr/bin/env bash
# Assembles concierge_<version>_<arch>.deb with dpkg-deb from already built binaries
# (`make deb` builds them first: release, --static-swift-stdlib).
#
# Usage: scripts/build-deb.sh [OUTPUT_DIR]      (default: the repository root)
#   DEB_BUILD_DIR=.build-release/release   where concierge and concierge-sample-api are
#
# The version is the one the binary prints (`concierge --version`, ConciergeVersion.current).
# Depends: is computed from the binaries' shared libraries (ldd + dpkg -S); a libswift*.so
# among them is an error, since the package must run without a Swift toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${DEB_BUILD_DIR:-.build-release/release}
OUT=${1:-.}
for b in concierge concierge-sample-api; do
    [ -x "$BIN/$b" ] || { echo "build-deb: $BIN/$b is missing: run 'make deb' (or set DEB_BUILD_DIR)" >&2; exit 2; }
done

version=$("$BIN/concierge" --version)
arch=$(dpkg --print-architecture)
deb="$OUT/concierge_${version}_${arch}.deb"

# Shared libraries → Debian packages.
libs=$(ldd "$BIN/concierge" "$BIN/concierge-sample-api" | awk '/=> \// {print $3}' | sort -u)
if echo "$libs" | grep -q 'libswift\|/opt/swift\|/usr/lib/swift'; then
    echo "build-deb: the binaries link the Swift runtime dynamically (build with --static-swift-stdlib):" >&2
    echo "$libs" >&2
    exit 1
fi
depends=$(for lib in $libs; do
    real=$(readlink -f "$lib")
    dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null || dpkg -S "${lib#/usr}" 2>/dev/null || { echo "build-deb: no package owns $lib" >&2; exit 1; }
done | cut -d: -f1 | sort -u | paste -sd, | sed 's/,/, /g')

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/concierge" \
    "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" "$root/usr/share/doc/concierge" \
    "$root/usr/share/concierge/grafana" "$root/usr/share/concierge/prometheus"

install -m 0755 -s "$BIN/concierge" "$BIN/concierge-sample-api" "$root/usr/bin/"
sed 's#/usr/local/bin/concierge #/usr/bin/concierge #' systemd/concierge.service > "$root/lib/systemd/system/concierge.service"
chmod 0644 "$root/lib/systemd/system/concierge.service"
install -m 0644 Config/concierge.yaml "$root/etc/concierge/concierge.yaml"
"$BIN/concierge" --generate-completion-script bash > "$root/usr/share/bash-completion/completions/concierge"
"$BIN/concierge" --generate-completion-script zsh > "$root/usr/share/zsh/vendor-completions/_concierge"
chmod 0644 "$root/usr/share/bash-completion/completions/concierge" "$root/usr/share/zsh/vendor-completions/_concierge"
install -m 0644 README.md docs/*.md docs/openapi.yaml Config/demo.yaml "$root/usr/share/doc/concierge/"
# The Grafana dashboard and the Prometheus alerting rules with their unit tests (docs/operations.md).
install -m 0644 packaging/grafana/concierge.json "$root/usr/share/concierge/grafana/"
install -m 0644 packaging/prometheus/concierge-alerts.yaml packaging/prometheus/concierge-alerts.test.yaml \
    "$root/usr/share/concierge/prometheus/"
install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$root/DEBIAN/"
echo /etc/concierge/concierge.yaml > "$root/DEBIAN/conffiles"

cat > "$root/DEBIAN/control" <<CONTROL
Package: concierge
Version: $version
Architecture: $arch
Maintainer: Concierge maintainers <concierge@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends
Section: net
Priority: optional
Description: local caching reverse proxy for business JSON APIs
 Concierge sits between apps and a business JSON API on 127.0.0.1: it injects
 and refreshes access tokens, reads the business code inside the JSON
 envelope, caches logical successes in SQLite, coalesces misses, runs batch
 and chain requests and logs every call. It runs as a systemd service and is
 steered through an admin API and the concierge command line.
CONTROL

mkdir -p "$OUT"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
