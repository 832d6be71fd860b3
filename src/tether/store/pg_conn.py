"""Connections to PostgreSQL for one store: a small pool, and the LISTEN connection that
turns notifications into wake-ups.

Owns connecting (with a deadline), migrating once per store, handing connections out and
taking back only clean ones, and translating psycopg's errors into `StoreError`. It knows no
table: `postgres` and `tether.scheduler.shared_limits` write the queries.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow

from tether.errors import StoreError
from tether.store.base import redact_url
from tether.store.pg_schema import NEWS_CHANNEL, migrate

T = TypeVar("T")
Conn = AsyncConnection[TupleRow]

CONNECT_TIMEOUT = 10.0
_RECONNECT_DELAY = 1.0


async def connect(url: str) -> Conn:
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            return await AsyncConnection.connect(
                url, autocommit=True, connect_timeout=int(CONNECT_TIMEOUT)
            )
    except (psycopg.Error, TimeoutError) as exc:
        raise StoreError(f"cannot connect to {redact_url(url)}: {one_line(exc)}") from exc


def one_line(exc: BaseException) -> str:
    """libpq's messages run over several lines (the error, then a hint): one line of them."""
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())


class Pool:
    """At most `size` connections, opened when first needed; the first one migrates the
    schema (when `auto_migrate`). A connection that comes back mid-transaction, broken or
    from a cancelled call is closed rather than reused."""

    def __init__(self, url: str, size: int, *, auto_migrate: bool = True) -> None:
        self.url = url
        self.size = size
        self.auto_migrate = auto_migrate
        self._idle: list[Conn] = []
        self._slots: asyncio.Semaphore | None = None
        self._ready: asyncio.Lock | None = None
        self._migrated = False
        self.closed = False

    async def _open(self) -> Conn:
        if self._ready is None:
            self._ready = asyncio.Lock()
        conn = await connect(self.url)
        if self._migrated or not self.auto_migrate:
            return conn
        async with self._ready:
            if not self._migrated:
                try:
                    await migrate(conn)
                except BaseException:
                    await conn.close()
                    raise
                self._migrated = True
        return conn

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        if self.closed:
            raise StoreError(f"store {redact_url(self.url)} is closed")
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        async with self._slots:
            conn = self._idle.pop() if self._idle else await self._open()
            clean = False
            try:
                yield conn
                clean = True
            except psycopg.Error as exc:
                raise StoreError(f"store {redact_url(self.url)}: {one_line(exc)}") from exc
            except Exception:
                clean = True  # our own refusal (a conflict, a lost lease): the connection is fine
                raise
            finally:
                idle = not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE
                if clean and idle and not self.closed:
                    self._idle.append(conn)
                else:
                    await conn.close()

    async def run(self, body: Callable[[Conn], Awaitable[T]]) -> T:
        async with self.connection() as conn:
            return await body(conn)

    async def close(self) -> None:
        self.closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


class Subscription:
    """The sessions named in notifications since the last `wait`: a wake-up, never the only
    way news arrives (a caller still polls), so a lost notification only delays."""

    def __init__(self, news: News) -> None:
        self._news = news
        self._pending: set[str] = set()
        self._event = asyncio.Event()

    def _notify(self, session_id: str) -> None:
        self._pending.add(session_id)
        self._event.set()

    async def wait(self, seconds: float) -> set[str]:
        """Sessions with control-plane news; empty when `seconds` passed with none."""
        self._news.start()
        if not self._pending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._event.wait()
        self._event.clear()
        pending, self._pending = self._pending, set()
        return pending

    def close(self) -> None:
        self._news.subscriptions.discard(self)


class News:
    """One LISTEN connection per store, opened by the first subscription that waits, and
    reopened after a failure while anyone still listens."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.subscriptions: set[Subscription] = set()
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def subscribe(self) -> Subscription:
        sub = Subscription(self)
        self.subscriptions.add(sub)
        return sub

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._listen(), name="tether-pg-news"
            )

    async def _listen(self) -> None:
        while self.subscriptions:
            try:
                conn = await connect(self.url)
            except StoreError:
                await asyncio.sleep(_RECONNECT_DELAY)
                continue
            try:
                await conn.execute(f"LISTEN {NEWS_CHANNEL}")
                self.connected.set()
                async for note in conn.notifies():
                    for sub in list(self.subscriptions):
                        sub._notify(note.payload)
            except psycopg.Error:
                await asyncio.sleep(_RECONNECT_DELAY)  # the subscribers poll meanwhile
            finally:
                self.connected.clear()
                with contextlib.suppress(psycopg.Error):
                    await conn.close()

    async def close(self) -> None:
        self.subscriptions.clear()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
