#!/usr/bin/env bash
# Start a PostgreSQL server on loopback for the tests, installing it first if it is missing.
# Idempotent: a server this script started already is reused. Prints the line to evaluate:
#
#     eval "$(bash .ci/postgres.sh)"     # exports TETHER_TEST_POSTGRES_URL
#
# Works as root (CI: the server then runs as the `postgres` user, since initdb refuses root)
# and as a developer's own user. Settings: TETHER_PG_DIR (data), TETHER_PG_PORT.
#
#     bash .ci/postgres.sh stop      # stops the server of TETHER_PG_DIR (fast: clients cut)
#     bash .ci/postgres.sh destroy   # stops it at once and deletes TETHER_PG_DIR
#
# (tests/postgres/test_outage.py runs a server of its own this way, to stop it mid-run.)
set -euo pipefail
MODE="${1:-start}"
# Every path below is absolute; the server's tools run as `postgres`, who may not be able to
# enter the caller's directory (a private temporary clone), and would say so on every call.
cd /

PGDIR="${TETHER_PG_DIR:-/tmp/tether-postgres}"
PORT="${TETHER_PG_PORT:-55432}"
URL="postgresql://tether:tether@127.0.0.1:${PORT}/tether"

log() { echo "postgres.sh: $*" >&2; }

pg_bindir() {
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then echo "$dir"; return; fi
    command -v initdb >/dev/null 2>&1 && dirname "$(command -v initdb)"
}

BIN=$(pg_bindir || true)
if [ -z "$BIN" ]; then
    if [ "$(id -u)" != 0 ]; then
        log "PostgreSQL is not installed: run 'sudo apt-get install postgresql' first"
        exit 1
    fi
    log "installing PostgreSQL (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends postgresql >&2
    BIN=$(pg_bindir)
fi

# As root, run the server's tools as `postgres`; otherwise as ourselves.
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql postgres
    as_pg() { runuser -u postgres -- "$@"; }
    mkdir -p "$PGDIR" && chown postgres "$PGDIR" && chmod 700 "$PGDIR"
else
    as_pg() { "$@"; }
    mkdir -p "$PGDIR" && chmod 700 "$PGDIR"
fi

case "$MODE" in
    start) ;;
    stop)
        as_pg "$BIN/pg_ctl" -D "$PGDIR" -m fast -w -t 60 stop >/dev/null
        exit 0 ;;
    destroy)
        as_pg "$BIN/pg_ctl" -D "$PGDIR" -m immediate -w stop >/dev/null 2>&1 || true
        rm -rf "$PGDIR"
        exit 0 ;;
    *) log "unknown mode $MODE (start, stop or destroy)"; exit 2 ;;
esac

psql_admin() { as_pg "$BIN/psql" -X -q -h "$PGDIR" -p "$PORT" -d postgres -v ON_ERROR_STOP=1 "$@"; }

start() {
    if [ ! -f "$PGDIR/PG_VERSION" ]; then
        log "initdb in $PGDIR"
        as_pg "$BIN/initdb" -D "$PGDIR" -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
    fi
    if as_pg "$BIN/pg_ctl" -D "$PGDIR" status >/dev/null 2>&1; then
        return 0
    fi
    # Loopback only; the socket lives in the data directory, so no system path is needed.
    as_pg "$BIN/pg_ctl" -D "$PGDIR" -l "$PGDIR/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$PGDIR -c max_connections=200" \
        >/dev/null
}

if ! start; then
    # A data directory left half made (a killed initdb, another version): make it anew once.
    log "could not start the server (see $PGDIR/server.log); making the data directory anew"
    tail -n 20 "$PGDIR/server.log" >&2 2>/dev/null || true
    as_pg "$BIN/pg_ctl" -D "$PGDIR" -m immediate stop >/dev/null 2>&1 || true
    find "$PGDIR" -mindepth 1 -delete
    start
fi

psql_admin <<'SQL'
SELECT 'CREATE ROLE tether LOGIN PASSWORD ''tether'' CREATEDB'
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tether') \gexec
SELECT 'CREATE DATABASE tether OWNER tether'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'tether') \gexec
SQL

log "PostgreSQL is up at $URL"
echo "export TETHER_TEST_POSTGRES_URL=$URL"
