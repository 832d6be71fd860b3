"""The SQLite side of wakeups: which sessions have work for a runner (docs/architecture.md: the store protocol).

A row per marked session, with a token bumped by every mark and the time of its first mark
(which orders the queue). Workers read it instead of folding every log; see `Store.runnable`.
"""

from __future__ import annotations

import sqlite3
import time

from tether.store.base import Wakeup

SCHEMA = """
CREATE TABLE IF NOT EXISTS wakeups (
    session_id TEXT PRIMARY KEY,
    token INTEGER NOT NULL,
    marked REAL NOT NULL
);
"""


def mark(conn: sqlite3.Connection, session_id: str) -> None:
    conn.execute(
        "INSERT INTO wakeups VALUES (?, 1, ?) "
        "ON CONFLICT(session_id) DO UPDATE SET token = token + 1",
        (session_id, time.time()),
    ).close()


def runnable(conn: sqlite3.Connection, limit: int) -> list[Wakeup]:
    rows = conn.execute(
        "SELECT w.session_id, w.token FROM wakeups w "
        "LEFT JOIN leases l ON l.session_id = w.session_id "
        "WHERE l.session_id IS NULL OR l.expires <= ? ORDER BY w.marked LIMIT ?",
        (time.time(), limit),
    ).fetchall()
    return [Wakeup(str(r[0]), int(r[1])) for r in rows]


def clear(conn: sqlite3.Connection, wakeup: Wakeup) -> bool:
    cursor = conn.execute(
        "DELETE FROM wakeups WHERE session_id = ? AND token = ?",
        (wakeup.session_id, wakeup.token),
    )
    return cursor.rowcount > 0
