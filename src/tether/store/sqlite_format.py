"""The SQLite store's file format: the schema of its tables, the format number a file carries,
and the migration of an older format's file, run when a store opens it (`sqlite.py`)."""

from __future__ import annotations

import sqlite3

from tether.store import sqlite_backfill, sqlite_wakeups

# Rows stand in append order (`pos`), not clustered by session: a group commit of a
# thousand running sessions then dirties the table's last few pages instead of a page per
# session, and only the small (session_id, seq) index takes scattered writes (at 1,000
# concurrent sessions, a third of the commit time; at 10,000, a quarter). A session's
# events are read through that index.
EVENTS_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
    pos INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    time TEXT NOT NULL,
    thread TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    UNIQUE (session_id, seq)
);
"""
EVENT_COLUMNS = "session_id, seq, id, time, thread, type, data"

SCHEMA = """
CREATE TABLE IF NOT EXISTS tether_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    created TEXT NOT NULL
);
{events}CREATE TABLE IF NOT EXISTS leases (
    session_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    generation INTEGER NOT NULL,
    expires REAL NOT NULL,
    claims INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS blobs (hash TEXT PRIMARY KEY, data BLOB NOT NULL);
""".replace("{events}", EVENTS_TABLE.format(name="events"))
STORE_FORMAT = "6"
# Format 2 clustered events by (session_id, seq) in a WITHOUT ROWID table: same columns.
# Format 3 had no claim count on leases and no not-before time on wakeups. Format 4 had no
# session catalog and no snapshots (sqlite_catalog.py): its sessions' rows are backfilled
# after the migration. Format 5 had no forks (sqlite_forks.py): its sessions are none.
# (An older tether refuses a newer format's file rather than write events that no catalog
# row follows, or read a fork's log without its prefix.)
MIGRATES_FROM = ("2", "3", "4", "5")


def stored_format(conn: sqlite3.Connection) -> str | None:
    """The format the file says it has; None for a file tether has not written yet."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'tether_meta'").fetchone() is None:
        return None
    row = conn.execute("SELECT value FROM tether_meta WHERE key = 'format'").fetchone()
    return None if row is None else str(row[0])


def migrate(conn: sqlite3.Connection) -> None:
    """Format 2, 3, 4 or 5 to 6, in one transaction: from 2, the events copied into the
    append-ordered table; from 2 or 3, the claim count and the not-before time added (nothing
    stored changes: no lease counts a claim, no mark is deferred); from 2, 3 or 4, a catalog
    backfill owed; from 5, the format number alone (the catalog's tables, the forks table
    and the catalog's parent index exist already: the schema script made them, and no
    session of an older file is a fork). Another process may migrate first: the format is
    read again under the write lock."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT value FROM tether_meta WHERE key='format'").fetchone()
        if row[0] == "2":
            conn.execute("DROP TABLE IF EXISTS events_new")
            conn.execute(EVENTS_TABLE.format(name="events_new"))
            conn.execute(
                f"INSERT INTO events_new ({EVENT_COLUMNS}) "
                f"SELECT {EVENT_COLUMNS} FROM events ORDER BY session_id, seq"
            )
            conn.execute("DROP TABLE events")
            conn.execute("ALTER TABLE events_new RENAME TO events")
        if row[0] in ("2", "3", "4"):
            columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(leases)")}
            if "claims" not in columns:
                conn.execute("ALTER TABLE leases ADD COLUMN claims INTEGER NOT NULL DEFAULT 0")
            sqlite_wakeups.add_columns(conn)
            conn.execute(
                "INSERT OR REPLACE INTO tether_meta VALUES (?, '')", (sqlite_backfill.BACKFILL_KEY,)
            )
        if row[0] in MIGRATES_FROM:
            conn.execute("UPDATE tether_meta SET value = ? WHERE key='format'", (STORE_FORMAT,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
