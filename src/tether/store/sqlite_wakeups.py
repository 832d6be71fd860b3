"""The SQLite side of the work queue: which sessions have work for a runner (docs/architecture.md: the store protocol).

A row per marked session, with a token bumped by every mark, the time of its first mark
(which orders the queue), and a not-before time with its reason while the session is deferred
(parked, or backing off after a failed run). Workers read it instead of folding every log;
see `Store.runnable` and `Store.claim_runnable`. Times are `time.time()`: the store's clock.
"""

from __future__ import annotations

import sqlite3
import time
from typing import cast

from tether.store.base import SUSPECT_CLAIMS, DeferReason, Queued, Wakeup

SCHEMA = """
CREATE TABLE IF NOT EXISTS wakeups (
    session_id TEXT PRIMARY KEY,
    token INTEGER NOT NULL,
    marked REAL NOT NULL,
    not_before REAL,
    reason TEXT
);
"""

# A session may be handed out: no live lease holds it, no deferral keeps it back.
_FREE = (
    "FROM wakeups w LEFT JOIN leases l ON l.session_id = w.session_id "
    "WHERE (l.session_id IS NULL OR l.expires <= ?1) "
    "AND (w.not_before IS NULL OR w.not_before <= ?1) "
)


def add_columns(conn: sqlite3.Connection) -> None:
    """Format 3 to 4, inside the caller's transaction: wakeups get their not-before time."""
    columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(wakeups)")}
    if "not_before" not in columns:
        conn.execute("ALTER TABLE wakeups ADD COLUMN not_before REAL")
    if "reason" not in columns:
        conn.execute("ALTER TABLE wakeups ADD COLUMN reason TEXT")


def mark(conn: sqlite3.Connection, session_id: str) -> None:
    # A new mark keeps the row's place and its not-before time: only the token moves.
    conn.execute(
        "INSERT INTO wakeups (session_id, token, marked) VALUES (?, 1, ?) "
        "ON CONFLICT(session_id) DO UPDATE SET token = token + 1",
        (session_id, time.time()),
    ).close()


def defer(conn: sqlite3.Connection, session_id: str, seconds: float, reason: DeferReason) -> None:
    now = time.time()
    conn.execute(
        "INSERT INTO wakeups (session_id, token, marked, not_before, reason) "
        "VALUES (?, 1, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE "
        "SET not_before = excluded.not_before, reason = excluded.reason",
        (session_id, now, now + seconds, reason),
    ).close()


def queued(conn: sqlite3.Connection, session_id: str) -> Queued | None:
    row = conn.execute(
        "SELECT not_before, reason FROM wakeups WHERE session_id = ? AND not_before > ?",
        (session_id, time.time()),
    ).fetchone()
    if row is None:
        return None
    return Queued(session_id, float(row[0]), cast("DeferReason", row[1]))


def runnable(conn: sqlite3.Connection, limit: int) -> list[Wakeup]:
    rows = conn.execute(
        f"SELECT w.session_id, w.token {_FREE}ORDER BY w.marked, w.session_id LIMIT ?2",
        (time.time(), limit),
    ).fetchall()
    return [Wakeup(str(r[0]), int(r[1])) for r in rows]


def free(
    conn: sqlite3.Connection, now: float, limit: int, alone: bool
) -> list[tuple[Wakeup, int, int]]:
    """What `claim_runnable` takes, as (wakeup, the lease's generation now, its claims now):
    a suspect (`SUSPECT_CLAIMS` or more on a lease that ran out) by itself, only when `alone`,
    otherwise up to `limit` others: takeovers (one claim on a lease that ran out) oldest
    expiry first, then fresh work oldest mark first. Run under the write lock, so nobody
    else takes them before the caller writes their leases."""
    rows = conn.execute(
        "SELECT w.session_id, w.token, coalesce(l.generation, 0), coalesce(l.claims, 0) "
        f"{_FREE}AND (?2 OR coalesce(l.claims, 0) < ?4) "
        "ORDER BY coalesce(l.claims, 0) >= ?4 DESC, coalesce(l.claims, 0) > 0 DESC, "
        "CASE WHEN coalesce(l.claims, 0) > 0 THEN l.expires END, w.marked, w.session_id "
        "LIMIT ?3",
        (now, alone, limit, SUSPECT_CLAIMS),
    ).fetchall()
    if rows and int(rows[0][3]) >= SUSPECT_CLAIMS:
        rows = rows[:1]  # suspects sort first: the oldest goes out by itself
    return [(Wakeup(str(r[0]), int(r[1])), int(r[2]), int(r[3])) for r in rows]


def clear(conn: sqlite3.Connection, wakeup: Wakeup) -> bool:
    cursor = conn.execute(
        "DELETE FROM wakeups WHERE session_id = ? AND token = ?",
        (wakeup.session_id, wakeup.token),
    )
    return cursor.rowcount > 0
