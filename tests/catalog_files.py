"""SQLite files for the catalog's migration and crash tests: a format-4 file (the format
before the catalog) holding generated sessions, and the check that a file's catalog equals a
rebuild from its logs, row for row."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from tether.store import SQLiteStore
from tether.store.base import event_to_row
from tether.store.catalog import row_for_log
from tether.store.sqlite import _SCHEMA
from tether.store.sqlite_wakeups import SCHEMA as WAKEUPS_SCHEMA
from tether.testing.catalog_conformance import generate

FORMAT_4_SCHEMA = _SCHEMA + WAKEUPS_SCHEMA  # format 5 added only sqlite_catalog.SCHEMA


def format_4_file(path: Path, sessions: int = 48, seed: int = 7) -> list[str]:
    """A format-4 file with `sessions` generated sessions: format 4's tables (those of
    format 5 but the catalog's), written straight into the file, fast."""
    made = generate(seed, sessions)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(FORMAT_4_SCHEMA)
    for g in made:
        conn.execute("INSERT INTO sessions VALUES (?, ?)", (g.session_id, g.events[0].time))
        conn.executemany(
            "INSERT INTO events (session_id, seq, id, time, thread, type, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [event_to_row(e) for e in g.events],
        )
    conn.execute("INSERT INTO tether_meta VALUES ('format', '4')")
    conn.commit()
    conn.close()
    return sorted(g.session_id for g in made)


def meta(path: Path, key: str) -> str | None:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT value FROM tether_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()


def catalog_size(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM catalog").fetchone()[0])
    finally:
        conn.close()


async def assert_catalog_rebuilt(store: SQLiteStore) -> int:
    """Every session's row is the fold of its whole log, and no row stands without a log.
    Returns the sessions checked."""
    ids = await store.session_ids(limit=1_000_000)
    for session_id in ids:
        expected = row_for_log(await store.read(session_id))
        assert await store.catalog_row(session_id) == expected, session_id
    assert len(await store.sessions(limit=1_000_000)) == len(ids)
    return len(ids)


def check_file(path: Path) -> int:
    async def check() -> int:
        store = SQLiteStore(str(path))
        try:
            return await assert_catalog_rebuilt(store)
        finally:
            await store.close()

    return asyncio.run(check())
