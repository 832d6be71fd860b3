#!/usr/bin/env bash
# tmux for the tests that drive `tether chat` on a real terminal, installed first if it is
# missing. Prints the line to evaluate:
#
#     eval "$(bash .ci/tmux.sh)"     # exports TETHER_TEST_TMUX
set -euo pipefail

log() { echo "tmux.sh: $*" >&2; }

BIN=$(command -v tmux || true)
if [ -z "$BIN" ]; then
    if [ "$(id -u)" != 0 ]; then
        log "tmux is not installed: run 'sudo apt-get install tmux' first"
        exit 1
    fi
    log "installing tmux (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q tmux >&2
    BIN=$(command -v tmux)
fi
log "tmux is at $BIN"
echo "export TETHER_TEST_TMUX=$BIN"
