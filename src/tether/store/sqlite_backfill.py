"""The catalog backfill of a SQLite file from before the catalog (format 4 and older): every
session's row written from its log, in chunks, resumable after a kill, safe with two
processes at once. `sqlite_format.migrate` leaves it owed; the opening store pays it."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable

from tether.errors import CorruptLog
from tether.store import catalog, sqlite_catalog
from tether.store.base import EventRow, event_from_row
from tether.store.catalog import CatalogRow

log = logging.getLogger("tether.store")

# The backfill's progress, kept while one is owed: the last session id done ("" for none).
BACKFILL_KEY = "catalog_backfill"
BACKFILL_CHUNK = 500


def owed(conn: sqlite3.Connection) -> bool:
    found = conn.execute("SELECT 1 FROM tether_meta WHERE key = ?", (BACKFILL_KEY,)).fetchone()
    return found is not None


LogOf = Callable[[sqlite3.Connection, str], CatalogRow | None]
Rows = Callable[[sqlite3.Connection, str, int, int | None], list[EventRow]]


def row_of_log(rows: Rows, where: str) -> LogOf:
    """The row of a session's whole log as `rows` reads it (a fork's with its prefix); None
    for a log that cannot be read (that session stays out of the catalog until `tether db
    rebuild-catalog` after a repair, rather than the file failing to open)."""

    def row_for(conn: sqlite3.Connection, session_id: str) -> CatalogRow | None:
        logged = rows(conn, session_id, 0, None)
        try:
            return catalog.row_for_log([event_from_row(r) for r in logged]) if logged else None
        except CorruptLog as exc:
            log.warning("store %s: catalog backfill skipped a session: %s", where, exc)
            return None

    return row_for


def backfill(conn: sqlite3.Connection, row_for: LogOf, where: str, chunk: int | None = None) -> int:
    """Write the row of every session the file holds, `chunk` sessions per transaction,
    each with the progress made, so a kill loses at most one chunk and the next open goes
    on from there. Another process may be doing the same: the progress is read again under
    the write lock, so the two take chunks in turn, and a session whose row already stands
    at its log's end is left alone. Returns the sessions written by this call."""
    chunk = chunk or BACKFILL_CHUNK
    written = seen = 0
    total = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            mark = conn.execute(
                "SELECT value FROM tether_meta WHERE key = ?", (BACKFILL_KEY,)
            ).fetchone()
            if mark is None:  # done (by another process, maybe)
                conn.execute("COMMIT")
                return written
            ids = [
                str(r[0])
                for r in conn.execute(
                    "SELECT session_id FROM sessions WHERE session_id > ? "
                    "ORDER BY session_id LIMIT ?",
                    (mark[0], chunk),
                )
            ]
            for session_id in ids:
                stands = conn.execute(
                    "SELECT c.last_seq = (SELECT max(seq) FROM events WHERE session_id = ?1) "
                    "FROM catalog c WHERE c.session_id = ?1",
                    (session_id,),
                ).fetchone()
                if stands is not None and stands[0]:
                    continue  # an append wrote it since the format changed
                row = row_for(conn, session_id)
                if row is not None:
                    sqlite_catalog.rewrite(conn, row)
                    written += 1
            if ids:
                conn.execute(
                    "UPDATE tether_meta SET value = ? WHERE key = ?", (ids[-1], BACKFILL_KEY)
                )
            else:
                conn.execute("DELETE FROM tether_meta WHERE key = ?", (BACKFILL_KEY,))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        seen += len(ids)
        if ids:
            log.info("store %s: catalog backfill, %d of %d sessions (this run)", where, seen, total)
        else:
            log.info("store %s: catalog backfill complete", where)
