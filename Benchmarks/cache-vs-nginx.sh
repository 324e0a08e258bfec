#!/usr/bin/env bash
# Former name of cache-vs-nginx-varnish.sh, kept for the Makefile, CI and older notes: runs
# the same benchmark (Concierge, nginx and Varnish; SERVERS="concierge nginx" for the two
# of the old script). Same environment variables; see that script's header.
exec "$(dirname "$0")/cache-vs-nginx-varnish.sh" "$@"
