"""The catalog rows of the sessions a PostgreSQL store held before it had a catalog (schema
version 4): each session's log folded once and its row written, as the last step of
migrating.

It walks the sessions in id order, a batch per transaction, each under the migration lock
and each moving the cursor kept in `tether_catalog_backfill` in the same commit. A kill loses
at most the batch in flight, and the next migration resumes after the last one committed;
two processes migrating at once take the batches in turns. A row is written only where the
session has none yet and only while its log still ends at the row's last seq
(`tether_put_catalog_row`), so an append made meanwhile (which writes its own row) always
wins. Progress goes to the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from tether.errors import CorruptLog
from tether.fold import Folder
from tether.store.base import event_from_row
from tether.store.catalog import row_of
from tether.store.pg_catalog import row_param

log = logging.getLogger("tether.store.postgres")

BATCH = 200  # sessions per transaction
_PAGE = 1000  # events read at once, so one long log never sits in memory whole
_LOG_EVERY = 5.0  # seconds between progress lines

Progress = Callable[[int, int], None]


async def backfill(
    conn: AsyncConnection[TupleRow],
    lock: int,
    *,
    batch: int = BATCH,
    progress: Progress | None = None,
) -> int:
    """Write the missing rows, resuming where the last run stopped; returns the sessions
    folded by this call (0 once the backfill is done)."""
    state = await _one(conn, "SELECT after_id, done FROM tether_catalog_backfill")
    if state is None or state[1]:
        return 0
    total = int((await _one(conn, "SELECT count(*) FROM tether_sessions") or (0,))[0])
    seen = int(
        (
            await _one(
                conn, "SELECT count(*) FROM tether_sessions WHERE session_id <= %s", (state[0],)
            )
            or (0,)
        )[0]
    )
    log.info("catalog backfill: %d of %d sessions to fold", total - seen, total)
    folded = 0
    last_line = time.monotonic()
    while True:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
            state = await _one(
                conn, "SELECT after_id, done FROM tether_catalog_backfill FOR UPDATE"
            )
            if state is None or state[1]:
                return folded  # another process finished it
            cur = await conn.execute(
                "SELECT s.session_id, c.session_id IS NULL FROM tether_sessions s "
                "LEFT JOIN tether_catalog c ON c.session_id = s.session_id "
                "WHERE s.session_id > %s ORDER BY s.session_id LIMIT %s",
                (state[0], batch),
            )
            ids = await cur.fetchall()
            if not ids:
                await conn.execute("UPDATE tether_catalog_backfill SET done = true")
                log.info("catalog backfill: done, %d sessions folded", folded)
                return folded
            missing = [session_id for session_id, absent in ids if absent]
            # Hold their log rows before writing any row (and so any state counter): an
            # append takes a log row first and a counter after, so the same order here
            # cannot deadlock with one.
            await conn.execute(
                "SELECT 1 FROM tether_sessions WHERE session_id = ANY(%s) "
                "ORDER BY session_id FOR UPDATE",
                (missing,),
            )
            for session_id in missing:
                await _fold_one(conn, session_id)
                folded += 1
            await conn.execute("UPDATE tether_catalog_backfill SET after_id = %s", (ids[-1][0],))
        seen += len(ids)
        if progress is not None:
            progress(seen, total)
        if time.monotonic() - last_line >= _LOG_EVERY:
            last_line = time.monotonic()
            log.info("catalog backfill: %d of %d sessions", seen, total)


async def _fold_one(conn: AsyncConnection[TupleRow], session_id: str) -> None:
    folder = Folder()
    after = 0
    while True:
        cur = await conn.execute(
            "SELECT session_id, seq, id, time, thread, type, data FROM tether_events "
            "WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s",
            (session_id, after, _PAGE),
        )
        rows = await cur.fetchall()
        try:
            for row in rows:
                folder.apply(event_from_row(row))
        except CorruptLog:
            # Its log cannot be read, so it has no row to list it by; the rest go on.
            log.warning("catalog backfill: session %s has a log that does not decode", session_id)
            return
        if len(rows) < _PAGE:
            break
        after = int(rows[-1][1])
    if folder.last_seq:
        await conn.execute("SELECT tether_put_catalog_row(%s::jsonb)", (row_param(row_of(folder)),))


async def _one(
    conn: AsyncConnection[TupleRow], sql: str, params: tuple[object, ...] = ()
) -> TupleRow | None:
    cur = await conn.execute(sql, params)
    return await cur.fetchone()
