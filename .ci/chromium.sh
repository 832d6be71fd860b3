#!/usr/bin/env bash
# Debian's Chromium for the web view's browser tests, installed first if it is missing.
# Prints the line to evaluate:
#
#     eval "$(bash .ci/chromium.sh)"     # exports TETHER_TEST_CHROMIUM
#
# The tests drive it with Playwright (a dev dependency) through its executable path: a
# browser download of Playwright's own is neither needed nor possible here.
set -euo pipefail

log() { echo "chromium.sh: $*" >&2; }

BIN=$(command -v chromium || true)
if [ -z "$BIN" ]; then
    if [ "$(id -u)" != 0 ]; then
        log "Chromium is not installed: run 'sudo apt-get install chromium' first"
        exit 1
    fi
    log "installing Chromium (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q chromium >&2
    BIN=$(command -v chromium)
fi
log "Chromium is at $BIN"
echo "export TETHER_TEST_CHROMIUM=$BIN"
