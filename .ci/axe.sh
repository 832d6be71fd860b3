#!/usr/bin/env bash
# axe-core (npm) for the web view's accessibility scans, installed first if it is missing.
# Prints the line to evaluate:
#
#     eval "$(bash .ci/axe.sh)"     # exports TETHER_TEST_AXE (the path of axe.min.js)
#
# The tests evaluate that file in the page (through the DevTools protocol, which the page's
# policy does not govern) and fail on any serious or critical violation.
set -euo pipefail

log() { echo "axe.sh: $*" >&2; }

VERSION=4.14.1
DIR=${TETHER_AXE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tether-axe-$VERSION}
FILE=$DIR/node_modules/axe-core/axe.min.js
if [ ! -f "$FILE" ]; then
    if ! command -v npm >/dev/null; then
        if [ "$(id -u)" != 0 ]; then
            log "npm is not installed: run 'sudo apt-get install npm' first"
            exit 1
        fi
        log "installing npm (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >&2
        apt-get install -y -q npm >&2
    fi
    log "installing axe-core $VERSION (npm)"
    mkdir -p "$DIR"
    npm install --silent --no-audit --no-fund --prefix "$DIR" "axe-core@$VERSION" >&2
fi
log "axe-core is at $FILE"
echo "export TETHER_TEST_AXE=$FILE"
