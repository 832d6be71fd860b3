"""Credentials kept beside a store: small secret records (OAuth tokens and client
registrations of MCP servers) under string keys, in a table of their own.

Owns the `tether_credentials` table in the database a store URL names (SQLite, PostgreSQL)
or a process's memory. It opens its own connection per operation (they are rare: a token
request, not a step) and shares nothing with the event store's connections. Records never
enter the event log; they are stored in plain text, as the database holds them.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Protocol

from tether.errors import ConfigError, StoreError
from tether.store.base import redact_url
from tether.store.open import backend_of, require_postgres, sqlite_path

TABLE = "tether_credentials"
_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} "
    "(key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL)"
)
_BUSY_TIMEOUT = 10.0  # seconds SQLite waits for another writer of the same file


class Credentials(Protocol):
    """A small key-value table of secrets."""

    async def get(self, key: str) -> str | None: ...

    async def put(self, key: str, value: str) -> None: ...

    async def delete(self, key: str) -> None: ...


class MemoryCredentials:
    """Kept for the life of the object (tests, `memory:` stores)."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}

    async def get(self, key: str) -> str | None:
        return self._values.get(key)

    async def put(self, key: str, value: str) -> None:
        self._values[key] = value

    async def delete(self, key: str) -> None:
        self._values.pop(key, None)


class SQLiteCredentials:
    """The table in a SQLite file (the store's own file, usually), on a worker thread."""

    def __init__(self, path: str) -> None:
        self.path = path

    async def get(self, key: str) -> str | None:
        rows = await asyncio.to_thread(
            self._run, f"SELECT value FROM {TABLE} WHERE key = ?", (key,)
        )
        return str(rows[0][0]) if rows else None

    async def put(self, key: str, value: str) -> None:
        await asyncio.to_thread(
            self._run,
            f"INSERT INTO {TABLE} (key, value, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
            "updated_at = excluded.updated_at",
            (key, value, time.time()),
        )

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._run, f"DELETE FROM {TABLE} WHERE key = ?", (key,))

    def _run(self, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        try:
            db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open credentials in sqlite:///{self.path}: {exc}") from exc
        try:
            with db:
                db.execute(_CREATE)
                return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"credentials in sqlite:///{self.path}: {exc}") from exc
        finally:
            db.close()


class PostgresCredentials:
    """The table in a PostgreSQL database (the store's), one short connection per operation."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._created = False

    async def get(self, key: str) -> str | None:
        rows = await self._run(f"SELECT value FROM {TABLE} WHERE key = %s", (key,))
        return str(rows[0][0]) if rows else None

    async def put(self, key: str, value: str) -> None:
        await self._run(
            f"INSERT INTO {TABLE} (key, value, updated_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
            "updated_at = excluded.updated_at",
            (key, value, time.time()),
        )

    async def delete(self, key: str) -> None:
        await self._run(f"DELETE FROM {TABLE} WHERE key = %s", (key,))

    async def _run(self, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        import psycopg

        from tether.store.pg_conn import connect
        from tether.store.postgres import parse_url

        conn = await connect(parse_url(self.url)[0])
        try:
            async with conn:
                if not self._created:
                    await conn.execute(_CREATE)
                    self._created = True
                cursor = await conn.execute(sql, params)
                return list(await cursor.fetchall()) if cursor.description else []
        except psycopg.Error as exc:
            raise StoreError(f"credentials in {redact_url(self.url)}: {exc}") from exc


def open_credentials(url: str) -> Credentials:
    """The credentials table in the database of a store URL (as `open_store` takes it)."""
    backend = backend_of(url)
    if backend == "memory":
        return MemoryCredentials()
    if backend == "postgres":
        require_postgres(url)
        return PostgresCredentials(url)
    path = sqlite_path(url)
    if path:
        return SQLiteCredentials(path)
    raise ConfigError(
        f"cannot keep credentials in {redact_url(url)}: use memory:, sqlite:///PATH "
        "or postgresql://USER:PASSWORD@HOST/DB"
    )
