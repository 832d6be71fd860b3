"""The embedded default store: one SQLite file in WAL mode, one transaction per batch.

All database work runs on one thread of its own, so the event loop never blocks on the disk
and one connection serialises this process's writers. Other processes may share the file;
SQLite's lock and `expected_seq` keep their appends apart.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from tether.errors import ConfigError, Conflict, StoreError
from tether.events import Event
from tether.messages import canonical_json
from tether.store.base import SessionInfo, check_batch, is_retry

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tether_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    created TEXT NOT NULL,
    updated TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    time TEXT NOT NULL,
    thread TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_updated ON sessions (updated);
"""
STORE_FORMAT = "1"


class SQLiteStore:
    def __init__(self, path: str, *, synchronous: str = "NORMAL") -> None:
        self.url = f"sqlite:///{path}"
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-sqlite")
        self._synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        # Open now, on the store's thread, so a bad path fails where the store is made.
        self._executor.submit(self._connect).result()

    # -- thread-side --------------------------------------------------------------------------
    def _connect(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 10000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.executescript(_SCHEMA)
            row = conn.execute("SELECT value FROM tether_meta WHERE key='format'").fetchone()
            if row is None:
                conn.execute("INSERT OR IGNORE INTO tether_meta VALUES ('format', ?)", (STORE_FORMAT,))
            elif row[0] != STORE_FORMAT:
                raise ConfigError(f"{self.path} has tether store format {row[0]}, expected {STORE_FORMAT}")
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot open store sqlite:///{self.path}: {exc}") from exc
        self._conn = conn

    def _append(self, session_id: str, rows: list[tuple[str, int, str, str, str, str, str]], expected_seq: int) -> None:
        conn = self._db()
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(
                "SELECT last_seq FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            last = 0 if row is None else int(row[0])
            if last != expected_seq:
                stored = conn.execute(
                    "SELECT id FROM events WHERE session_id = ? AND seq > ? AND seq <= ? ORDER BY seq",
                    (session_id, expected_seq, expected_seq + len(rows)),
                ).fetchall()
                conn.execute("ROLLBACK")
                if is_retry([r[0] for r in stored], [r[2] for r in rows]):
                    return
                raise Conflict(session_id, expected_seq, last)
            conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            first_time, last_time, new_last = rows[0][3], rows[-1][3], rows[-1][1]
            if row is None:
                conn.execute(
                    "INSERT INTO sessions VALUES (?, ?, ?, ?)",
                    (session_id, new_last, first_time, last_time),
                )
            else:
                conn.execute(
                    "UPDATE sessions SET last_seq = ?, updated = ? WHERE session_id = ?",
                    (new_last, last_time, session_id),
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"store {self.url} is closed")
        return self._conn

    # -- async face ---------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._closed:
            raise StoreError(f"store {self.url} is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.url}: {exc}") from exc

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> None:
        check_batch(session_id, events, expected_seq)
        rows = [
            (e.session_id, e.seq, e.id, e.time, e.thread, e.type, canonical_json(e.to_json()["data"]))
            for e in events
        ]
        # The write is not cancelled with its caller: a commit in flight lands or fails whole.
        await asyncio.shield(self._run(self._append, session_id, rows, expected_seq))

    async def read(self, session_id: str, after_seq: int = 0) -> list[Event]:
        rows = await self._run(self._select_events, session_id, after_seq)
        return [
            Event.from_json(
                {"session_id": r[0], "seq": r[1], "id": r[2], "time": r[3], "thread": r[4],
                 "type": r[5], "data": json.loads(r[6])}
            )
            for r in rows
        ]

    def _select_events(self, session_id: str, after_seq: int) -> list[tuple[str, int, str, str, str, str, str]]:
        return self._db().execute(
            "SELECT session_id, seq, id, time, thread, type, data FROM events "
            "WHERE session_id = ? AND seq > ? ORDER BY seq",
            (session_id, after_seq),
        ).fetchall()

    async def last_seq(self, session_id: str) -> int:
        row = await self._run(
            lambda: self._db().execute(
                "SELECT last_seq FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        )
        return 0 if row is None else int(row[0])

    async def sessions(self, limit: int = 100) -> list[SessionInfo]:
        rows = await self._run(
            lambda: self._db().execute(
                "SELECT session_id, last_seq, created, updated FROM sessions "
                "ORDER BY updated DESC LIMIT ?",
                (limit,),
            ).fetchall()
        )
        return [SessionInfo(r[0], int(r[1]), r[2], r[3]) for r in rows]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)

