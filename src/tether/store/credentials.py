"""Credentials kept beside a store: small secret records (OAuth tokens and client
registrations of MCP servers) per tenant under string keys, sealed at rest, in a table of
their own.

Owns the `tether_credentials` table in the database a store URL names (SQLite, PostgreSQL) or
a process's memory: its rows (tenant, key, value, version, a refresh claim), their migration
from the unscoped table of before, and `Credentials`, one tenant's view that seals what it
writes (`sealing`). It opens its own connection per operation (they are rare: a token request,
not a step) and shares nothing with the event store's connections. Records never enter the
event log.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import dataclass
from typing import Protocol

from tether.errors import ConfigError, StoreError
from tether.store.base import redact_url
from tether.store.open import backend_of, require_postgres, sqlite_path
from tether.store.sealing import Keyring, SecretKeyMissing

TABLE = "tether_credentials"
# The tenant of the CLI and of a library user's own process; a server tenant's name is never
# empty (`runtime.base.TENANT_NAME`), so no tenant reaches these rows, nor they its own.
DEFAULT_TENANT = ""
# `version` grows by one at every write of a record; `claimed_by`/`claimed_until` hold the
# turn to refresh it (`Credentials.claim`), until then by the database's clock.
_CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    tenant TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    version BIGINT NOT NULL,
    claimed_by TEXT,
    claimed_until DOUBLE PRECISION,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, key)
)"""
# From the table of before (key, value, updated_at): its rows become the default tenant's,
# as they were (plain: read only where plain text is allowed, until `tether db
# rotate-secrets` seals them). The store's own way: a new table filled, the old one dropped.
_UPGRADE = (
    _CREATE.replace(TABLE, f"{TABLE}_v2", 1),
    f"INSERT INTO {TABLE}_v2 (tenant, key, value, version, updated_at) "
    f"SELECT '{DEFAULT_TENANT}', key, value, 1, updated_at FROM {TABLE}",
    f"DROP TABLE {TABLE}",
    f"ALTER TABLE {TABLE}_v2 RENAME TO {TABLE}",
)
_NOW = "{now}"  # the database's clock, in seconds since the epoch (each backend says how)
_GET = (
    f"SELECT value, version, claimed_until IS NOT NULL AND claimed_until > {_NOW} "
    f"FROM {TABLE} WHERE tenant = ? AND key = ?"
)
_PUT = (
    f"INSERT INTO {TABLE} (tenant, key, value, version, updated_at) VALUES (?, ?, ?, 1, {_NOW}) "
    f"ON CONFLICT (tenant, key) DO UPDATE SET value = excluded.value, "
    f"version = {TABLE}.version + 1, claimed_by = NULL, claimed_until = NULL, "
    "updated_at = excluded.updated_at RETURNING version"
)
_REPLACE = f"UPDATE {TABLE} SET value = ? WHERE tenant = ? AND key = ? AND value = ? RETURNING 1"
_DELETE = f"DELETE FROM {TABLE} WHERE tenant = ? AND key = ?"
_CLAIM = (
    f"UPDATE {TABLE} SET claimed_by = ?, claimed_until = {_NOW} + ? "
    "WHERE tenant = ? AND key = ? AND version = ? "
    f"AND (claimed_until IS NULL OR claimed_until <= {_NOW}) RETURNING 1"
)
_RELEASE = (
    f"UPDATE {TABLE} SET claimed_by = NULL, claimed_until = NULL "
    "WHERE tenant = ? AND key = ? AND claimed_by = ?"
)
_PAGE = (
    f"SELECT tenant, key, value FROM {TABLE} WHERE tenant > ? OR (tenant = ? AND key > ?) "
    "ORDER BY tenant, key LIMIT ?"
)
_BUSY_TIMEOUT = 10.0  # seconds SQLite waits for another writer of the same file
_MIGRATION_LOCK = 0x7E7E_0002  # PostgreSQL: another fixed number than the store's


@dataclass(frozen=True, slots=True)
class Row:
    """A stored record as the database holds it (sealed, or plain text)."""

    value: str
    version: int
    claimed: bool  # an unexpired claim to refresh it is held (by anyone)


class Rows(Protocol):
    """The table of one database: rows of every tenant, as stored."""

    where: str  # the database, for messages (a PostgreSQL URL without its password)
    at_rest: bool  # False for memory, where nothing outlives the process

    async def get(self, tenant: str, key: str) -> Row | None: ...

    async def put(self, tenant: str, key: str, value: str) -> int: ...

    async def replace(self, tenant: str, key: str, old: str, new: str) -> bool: ...

    async def delete(self, tenant: str, key: str) -> None: ...

    async def claim(
        self, tenant: str, key: str, version: int, holder: str, seconds: float
    ) -> bool: ...

    async def release(self, tenant: str, key: str, holder: str) -> None: ...

    async def page(self, after: tuple[str, str], limit: int) -> list[tuple[str, str, str]]: ...


@dataclass(frozen=True, slots=True)
class Kept:
    """A record as a tenant reads it: its plain text, version, and whether another process
    holds the turn to refresh it."""

    text: str
    version: int
    claimed: bool


class Credentials:
    """One tenant's secret records (`for_tenant` gives another's), sealed with `keyring`
    where they are at rest. A tenant's view reads and writes only its own rows, and a sealed
    value opens only in the row it was sealed for."""

    def __init__(self, rows: Rows, keyring: Keyring, tenant: str = DEFAULT_TENANT) -> None:
        self.rows = rows
        self.keyring = keyring
        self.tenant = tenant

    def for_tenant(self, tenant: str) -> Credentials:
        return Credentials(self.rows, self.keyring, tenant)

    def check_can_store(self) -> None:
        """Raise `SecretKeyMissing` now if a write would be refused for want of a key."""
        if self.rows.at_rest:
            self.keyring.check_can_store(self.rows.where)

    async def read(self, key: str) -> Kept | None:
        row = await self.rows.get(self.tenant, key)
        if row is None:
            return None
        if not self.rows.at_rest:
            return Kept(row.value, row.version, row.claimed)
        text, stale = self.keyring.open(row.value, self._place(key), self.rows.where)
        if stale:  # plain, or sealed with an old key: sealed with the current one now
            sealed = self.keyring.seal(text, self._place(key), self.rows.where)
            await self.rows.replace(self.tenant, key, row.value, sealed)
        return Kept(text, row.version, row.claimed)

    async def get(self, key: str) -> str | None:
        kept = await self.read(key)
        return None if kept is None else kept.text

    async def put(self, key: str, value: str) -> int:
        """Store `value` sealed; the record's new version."""
        return await self.rows.put(self.tenant, key, self._seal(key, value))

    async def delete(self, key: str) -> None:
        await self.rows.delete(self.tenant, key)

    async def claim(self, key: str, version: int, holder: str, seconds: float) -> bool:
        """Take the turn to refresh the record at `version` for `seconds` (by the database's
        clock): False if it changed or another holder's turn is running. A write ends it."""
        return await self.rows.claim(self.tenant, key, version, holder, seconds)

    async def release(self, key: str, holder: str) -> None:
        await self.rows.release(self.tenant, key, holder)

    def _place(self, key: str) -> str:
        return place_of(self.tenant, key)

    def _seal(self, key: str, value: str) -> str:
        if not self.rows.at_rest:
            return value
        return self.keyring.seal(value, self._place(key), self.rows.where)


def place_of(tenant: str, key: str) -> str:
    """What a sealed value is bound to (its associated data): the row it is kept in."""
    return f"{TABLE}\x00{tenant}\x00{key}"


async def reseal(rows: Rows, keyring: Keyring, *, page: int = 500) -> int:
    """Seal every record of every tenant with `keyring`'s current key (plain rows and rows
    sealed with an old key alike); how many changed. A record written meanwhile is left as
    its writer sealed it. Reads the table a page at a time."""
    if keyring.current is None:
        raise SecretKeyMissing(
            "re-sealing needs the new key in TETHER_SECRET_KEY (or TETHER_SECRET_KEY_FILE, "
            "--secret-key-file), and the old one in TETHER_SECRET_KEY_OLD"
        )
    changed = 0
    after = ("", "")
    while batch := await rows.page(after, page):
        for tenant, key, stored in batch:
            place = place_of(tenant, key)
            text, stale = keyring.open(stored, place, rows.where, plain_ok=True)
            if stale and await rows.replace(
                tenant, key, stored, keyring.seal(text, place, rows.where)
            ):
                changed += 1
        after = batch[-1][:2]
    return changed


@dataclass(slots=True)
class _MemoryRow:
    value: str
    version: int
    holder: str | None = None
    until: float = 0.0  # the claim's end by the monotonic clock


class MemoryRows:
    """Kept for the life of the object (tests, `memory:` stores)."""

    where = "memory:"
    at_rest = False

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], _MemoryRow] = {}

    async def get(self, tenant: str, key: str) -> Row | None:
        row = self._rows.get((tenant, key))
        if row is None:
            return None
        return Row(row.value, row.version, row.holder is not None and row.until > time.monotonic())

    async def put(self, tenant: str, key: str, value: str) -> int:
        old = self._rows.get((tenant, key))
        row = self._rows[(tenant, key)] = _MemoryRow(value, 1 if old is None else old.version + 1)
        return row.version

    async def replace(self, tenant: str, key: str, old: str, new: str) -> bool:
        row = self._rows.get((tenant, key))
        if row is None or row.value != old:
            return False
        row.value = new
        return True

    async def delete(self, tenant: str, key: str) -> None:
        self._rows.pop((tenant, key), None)

    async def claim(self, tenant: str, key: str, version: int, holder: str, seconds: float) -> bool:
        found = await self.get(tenant, key)
        if found is None or found.version != version or found.claimed:
            return False
        row = self._rows[(tenant, key)]
        row.holder, row.until = holder, time.monotonic() + seconds
        return True

    async def release(self, tenant: str, key: str, holder: str) -> None:
        row = self._rows.get((tenant, key))
        if row is not None and row.holder == holder:
            row.holder = None

    async def page(self, after: tuple[str, str], limit: int) -> list[tuple[str, str, str]]:
        keys = sorted(k for k in self._rows if k > after)[:limit]
        return [(t, k, self._rows[(t, k)].value) for t, k in keys]


class _SqlRows:
    """The statements both databases run, each backend running them its own way."""

    at_rest = True
    where: str

    async def _run(self, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        raise NotImplementedError

    async def get(self, tenant: str, key: str) -> Row | None:
        rows = await self._run(_GET, (tenant, key))
        return Row(str(rows[0][0]), int(str(rows[0][1])), bool(rows[0][2])) if rows else None

    async def put(self, tenant: str, key: str, value: str) -> int:
        return int(str((await self._run(_PUT, (tenant, key, value)))[0][0]))

    async def replace(self, tenant: str, key: str, old: str, new: str) -> bool:
        return bool(await self._run(_REPLACE, (new, tenant, key, old)))

    async def delete(self, tenant: str, key: str) -> None:
        await self._run(_DELETE, (tenant, key))

    async def claim(self, tenant: str, key: str, version: int, holder: str, seconds: float) -> bool:
        return bool(await self._run(_CLAIM, (holder, seconds, tenant, key, version)))

    async def release(self, tenant: str, key: str, holder: str) -> None:
        await self._run(_RELEASE, (tenant, key, holder))

    async def page(self, after: tuple[str, str], limit: int) -> list[tuple[str, str, str]]:
        rows = await self._run(_PAGE, (after[0], after[0], after[1], limit))
        return [(str(t), str(k), str(v)) for t, k, v in rows]


class SQLiteRows(_SqlRows):
    """The table in a SQLite file (the store's own file, usually), on a worker thread."""

    _NOW_SQL = "((julianday('now') - 2440587.5) * 86400.0)"

    def __init__(self, path: str) -> None:
        self.path = path
        self.where = f"sqlite:///{path}"
        self._ready = False

    async def _run(self, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        return await asyncio.to_thread(self._run_here, sql.replace(_NOW, self._NOW_SQL), params)

    def _run_here(self, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        try:
            db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open credentials in {self.where}: {exc}") from exc
        try:
            # What a write replaces is overwritten, not left in free pages (a plain row of
            # before, a secret sealed with a retired key).
            db.execute("PRAGMA secure_delete = ON")
            if not self._ready:
                self._prepare(db)
                self._ready = True
            return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"credentials in {self.where}: {exc}") from exc
        finally:
            db.close()

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Create the table, or bring one of before up to date, under the write lock (another
        process may do it first: the columns are read again once it is held)."""
        if "tenant" in _sqlite_columns(db):
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            columns = _sqlite_columns(db)
            if not columns:
                db.execute(_CREATE)
            elif "tenant" not in columns:
                for statement in _UPGRADE:
                    db.execute(statement)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


def _sqlite_columns(db: sqlite3.Connection) -> set[str]:
    return {str(r[1]) for r in db.execute(f"PRAGMA table_info({TABLE})")}


class PostgresRows(_SqlRows):
    """The table in a PostgreSQL database (the store's), one short connection per operation."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = redact_url(url)
        self._ready = False

    async def _run(self, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        import psycopg

        from tether.store.pg_conn import connect, one_line
        from tether.store.postgres import parse_url

        sql = sql.replace(_NOW, "extract(epoch from clock_timestamp())::double precision")
        conn = await connect(parse_url(self.url)[0])
        try:
            async with conn:
                if not self._ready:
                    await self._prepare(conn)
                    self._ready = True
                cursor = await conn.execute(sql.replace("?", "%s").encode(), params)
                return list(await cursor.fetchall()) if cursor.description else []
        except psycopg.Error as exc:
            raise StoreError(f"credentials in {self.where}: {one_line(exc)}") from exc

    async def _prepare(self, conn: object) -> None:
        from psycopg import AsyncConnection

        assert isinstance(conn, AsyncConnection)
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            cursor = await conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = %s",
                (TABLE,),
            )
            columns = {str(r[0]) for r in await cursor.fetchall()}
            if not columns:
                await conn.execute(_CREATE.encode())
            elif "tenant" not in columns:
                for statement in _UPGRADE:
                    await conn.execute(statement.encode())


def open_rows(url: str) -> Rows:
    """The credentials table in the database of a store URL (as `open_store` takes it)."""
    backend = backend_of(url)
    if backend == "memory":
        return MemoryRows()
    if backend == "postgres":
        require_postgres(url)
        return PostgresRows(url)
    path = sqlite_path(url)
    if path:
        return SQLiteRows(path)
    raise ConfigError(
        f"cannot keep credentials in {redact_url(url)}: use memory:, sqlite:///PATH "
        "or postgresql://USER:PASSWORD@HOST/DB"
    )


def open_credentials(
    url: str, keyring: Keyring | None = None, *, tenant: str = DEFAULT_TENANT
) -> Credentials:
    """`tenant`'s credentials in the database of a store URL, sealed with `keyring` (none:
    the keys the environment gives, `Keyring.from_env`)."""
    return Credentials(open_rows(url), keyring or Keyring.from_env(), tenant)


def MemoryCredentials(tenant: str = DEFAULT_TENANT) -> Credentials:
    """Credentials kept in this process only (nothing at rest, so nothing sealed)."""
    return Credentials(MemoryRows(), Keyring(), tenant)
