# Concierge: build, install as a systemd service, check the unit, run the benchmarks.
#
#   make                      # = make build: release binaries in .build/release (~5 min from scratch;
#                             # RELEASE_FLAGS, below, are the compiler flags of release builds)
#   sudo make install         # binaries to /usr/local/bin, unit, /etc/concierge/{concierge.yaml,admin.token}
#   sudo systemctl enable --now concierge
#   sudo make uninstall       # binaries and unit go; /etc/concierge and the cache state stay
#   make deb                  # concierge_<version>_amd64.deb: release build with the Swift runtime
#                             # linked in (--static-swift-stdlib, in .build-release/), dpkg-deb
#   sudo make test-deb        # install that package here, check it, purge it (CI machines only)
#   make check-admin-api      # schemathesis + promtool against a live daemon (debug build)
#
# Variables:
#   PREFIX=/usr/local         binaries go to $(DESTDIR)$(PREFIX)/bin, the Grafana dashboard and
#                             the alerting rules to $(PREFIX)/share/concierge; the installed unit's
#                             ExecStart= is rewritten to match
#   DESTDIR=                  staging root for packaging; when set, nothing outside it is
#                             touched and systemctl is never called
#   BUILD_DIR=.build/release  where the binaries are taken from (tests use .build/debug)
#   CONFIG_SRC=Config/concierge.yaml
#   RELEASE_FLAGS=-Xswiftc -enforce-exclusivity=unchecked -Xswiftc -cross-module-optimization
#                             swift build flags of release builds (see the comment at the variable)
#
# The service runs as a DynamicUser, so it cannot read the root-only 0600 admin token;
# the unit passes it in with LoadCredential=admin.token:/etc/concierge/admin.token and the
# config names it as token_file: "${CREDENTIALS_DIRECTORY:-/etc/concierge}/admin.token",
# which is the credential under systemd and /etc/concierge/admin.token for root's
# `concierge stats` etc. from a shell.

PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
BUILD_DIR  ?= .build/release
SWIFT      ?= swift
INSTALL    ?= install
CONFIG_SRC ?= Config/concierge.yaml
UNIT_SRC   ?= systemd/concierge.service
# Release builds (build, deb-binaries, the benchmarks) leave out Swift's run-time exclusivity
# checks, in every module (SwiftNIO's too): they were 13% of the instructions of a request
# (callgrind, hit and miss alike). Debug builds, which the tests run, keep them.
# Cross-module optimization lets the compiler specialize SwiftNIO's generic code for
# Concierge's types (no run-time metadata lookups in its decoders' loops): 5.7% fewer
# instructions on a miss's event loop, 2% on a hit (docs/benchmarks.md), for a longer build.
RELEASE_FLAGS ?= -Xswiftc -enforce-exclusivity=unchecked -Xswiftc -cross-module-optimization
# The static release build for the package has its own scratch path, so it never mixes with
# the dynamically linked .build/release.
DEB_SCRATCH ?= .build-release
DEB_OUT     ?= .

DATADIR    ?= $(PREFIX)/share/concierge
CONFDIR    := /etc/concierge
UNITDIR    := /etc/systemd/system
STATE_PATH := /var/lib/concierge/concierge.sqlite
CRED_DIR   := /run/credentials/concierge.service
BINARIES   := concierge concierge-sample-api

# systemctl only for a real install (no DESTDIR) by root on a host that runs systemd.
SYSTEMCTL_OK = [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1

.PHONY: all build install uninstall check-unit test-install deb deb-binaries test-deb check-admin-api bench bench-invalidate help

all: build

help:
	@sed -n '1,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

build:
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product concierge
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product concierge-sample-api

install:
	@for b in $(BINARIES); do \
	  [ -x "$(BUILD_DIR)/$$b" ] || { echo "make install: $(BUILD_DIR)/$$b is missing: run 'make build' first (or set BUILD_DIR)" >&2; exit 1; }; \
	done
	$(INSTALL) -d -m 0755 "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(UNITDIR)"
	$(INSTALL) -m 0755 $(addprefix $(BUILD_DIR)/,$(BINARIES)) "$(DESTDIR)$(BINDIR)/"
	sed 's#/usr/local/bin/concierge #$(BINDIR)/concierge #' "$(UNIT_SRC)" > "$(DESTDIR)$(UNITDIR)/concierge.service.tmp"
	chmod 0644 "$(DESTDIR)$(UNITDIR)/concierge.service.tmp"
	mv -f "$(DESTDIR)$(UNITDIR)/concierge.service.tmp" "$(DESTDIR)$(UNITDIR)/concierge.service"
	@# The Grafana dashboard and the Prometheus alerting rules (docs/operations.md, "Dashboards and alerts").
	$(INSTALL) -d -m 0755 "$(DESTDIR)$(DATADIR)/grafana" "$(DESTDIR)$(DATADIR)/prometheus"
	$(INSTALL) -m 0644 packaging/grafana/concierge.json "$(DESTDIR)$(DATADIR)/grafana/"
	$(INSTALL) -m 0644 packaging/prometheus/concierge-alerts.yaml packaging/prometheus/concierge-alerts.test.yaml "$(DESTDIR)$(DATADIR)/prometheus/"
	$(INSTALL) -d -m 0755 "$(DESTDIR)$(CONFDIR)"
	@# The config is read by the service's dynamic user: 0644 (keep secrets out of it; use
	@# environment variables set with Environment=/LoadCredential=). Never overwrite an operator's config.
	@if [ -e "$(DESTDIR)$(CONFDIR)/concierge.yaml" ]; then \
	  echo "keeping existing $(DESTDIR)$(CONFDIR)/concierge.yaml"; \
	  if ! cmp -s "$(CONFIG_SRC)" "$(DESTDIR)$(CONFDIR)/concierge.yaml"; then \
	    echo "  (the shipped $(CONFIG_SRC) differs; compare with: diff -u $(DESTDIR)$(CONFDIR)/concierge.yaml $(CONFIG_SRC))"; \
	  fi; \
	else \
	  echo "$(INSTALL) -m 0644 $(CONFIG_SRC) $(DESTDIR)$(CONFDIR)/concierge.yaml"; \
	  $(INSTALL) -m 0644 "$(CONFIG_SRC)" "$(DESTDIR)$(CONFDIR)/concierge.yaml"; \
	fi
	@# Admin token: 32 random bytes as hex, root-only 0600; never replaced.
	@if [ -e "$(DESTDIR)$(CONFDIR)/admin.token" ]; then \
	  echo "keeping existing $(DESTDIR)$(CONFDIR)/admin.token"; \
	else \
	  ( umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$(DESTDIR)$(CONFDIR)/admin.token.tmp" ) && \
	  chmod 0600 "$(DESTDIR)$(CONFDIR)/admin.token.tmp" && \
	  mv "$(DESTDIR)$(CONFDIR)/admin.token.tmp" "$(DESTDIR)$(CONFDIR)/admin.token" && \
	  echo "created $(DESTDIR)$(CONFDIR)/admin.token (0600)"; \
	fi
	@# The service can write only under StateDirectory= and read the token only through
	@# LoadCredential=: check that the installed config agrees (the real loader does it).
	@out=$$(env -u CONCIERGE_ADMIN_TOKEN CREDENTIALS_DIRECTORY=$(CRED_DIR) \
	        "$(BUILD_DIR)/concierge" check-config --config "$(DESTDIR)$(CONFDIR)/concierge.yaml" 2>&1) || \
	  { echo "WARNING: $(DESTDIR)$(CONFDIR)/concierge.yaml does not validate:"; echo "$$out" | sed 's/^/  /'; }; \
	echo "$$out" | grep -q '^storage: $(STATE_PATH),' || \
	  echo "WARNING: storage.path in $(DESTDIR)$(CONFDIR)/concierge.yaml is not $(STATE_PATH) (the service may write only there)"; \
	echo "$$out" | grep -q '^admin token: from $(CRED_DIR)/admin.token$$' || \
	  echo 'WARNING: admin.token_file in $(DESTDIR)$(CONFDIR)/concierge.yaml should be "$${CREDENTIALS_DIRECTORY:-/etc/concierge}/admin.token" (the service user cannot read the 0600 token file itself)'
	@if $(SYSTEMCTL_OK); then \
	  systemctl daemon-reload; \
	  echo "installed; start with: systemctl enable --now concierge"; \
	else \
	  echo "installed into $(if $(DESTDIR),$(DESTDIR),/) (systemctl not called)"; \
	fi

uninstall:
	@if $(SYSTEMCTL_OK); then systemctl disable --now concierge.service 2>/dev/null || true; fi
	rm -f $(addprefix "$(DESTDIR)$(BINDIR)/,$(addsuffix ",$(BINARIES))) "$(DESTDIR)$(UNITDIR)/concierge.service"
	rm -rf "$(DESTDIR)$(DATADIR)"
	@if $(SYSTEMCTL_OK); then systemctl daemon-reload; fi
	@echo "kept $(DESTDIR)$(CONFDIR) (config, admin token) and the cache state (/var/lib/private/concierge)"

check-unit:
	scripts/check-unit.sh

deb-binaries:
	$(SWIFT) build -c release $(RELEASE_FLAGS) --static-swift-stdlib --scratch-path $(DEB_SCRATCH) --product concierge
	$(SWIFT) build -c release $(RELEASE_FLAGS) --static-swift-stdlib --scratch-path $(DEB_SCRATCH) --product concierge-sample-api

deb: deb-binaries
	DEB_BUILD_DIR=$(DEB_SCRATCH)/release scripts/build-deb.sh $(DEB_OUT)

test-deb:
	scripts/test-deb.sh "$$(ls -t $(DEB_OUT)/concierge_*.deb | head -1)"

check-admin-api:
	scripts/check-admin-api.sh

test-install:
	scripts/test-install.sh

bench:
	Benchmarks/cache-vs-nginx.sh

bench-invalidate:
	Benchmarks/invalidate-1m.sh
