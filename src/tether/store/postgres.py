"""The PostgreSQL store: many workers on many machines sharing one event log and its leases.

Each append, claim and token-bucket take is one statement calling a server-side function
(`pg_schema`), so it is atomic and costs one round trip; an append writes the session's
catalog row (`pg_catalog`) in the same statement, and admits a start under a tenant's
`max_running` there too. Lease expiry uses the database's
clock. Control-plane appends NOTIFY, so a worker hears of a message, a decision or a cancel
at once (`subscribe`). `claim_runnable` hands
runnable sessions to workers without contention (SKIP LOCKED); `defer` keeps one back for a while.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import cast
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from psycopg.rows import TupleRow

from tether.errors import (
    ConfigError,
    Conflict,
    CorruptLog,
    LeaseHeld,
    LeaseLost,
    QuotaExceeded,
    SessionNotFound,
    StoreError,
    StoreUnavailable,
    UsageError,
)
from tether.events import Event
from tether.store import catalog, pg_catalog, pg_forks
from tether.store.base import (
    READY_BLOB,
    UNDECODABLE,
    Claimed,
    DeferReason,
    ForkLink,
    Lease,
    Queued,
    SessionInfo,
    Snapshot,
    Wakeup,
    check_batch,
    check_claim,
    check_defer,
    check_limit,
    check_ttl,
    event_from_row,
    payload_data,
    redact_url,
    unreadable,
)
from tether.store.catalog import Admit, CatalogQuery, CatalogRow, ExperimentEntry, UsageEntry
from tether.store.lineage import check_fork
from tether.store.pg_conn import Conn, News, Pool, Subscription

DEFAULT_POOL_SIZE = 4
# How long a cancelled append still waits for its statement's outcome before giving up.
_APPEND_SETTLE = 30.0

# `Claimed` lives in store.base now; named here too for the modules that import it from here.
__all__ = ["DEFAULT_POOL_SIZE", "Claimed", "PostgresStore", "parse_url"]


# PostgreSQL's own values: what a commit has waited for when it returns (README, Durability).
SYNCHRONOUS_COMMIT = ("on", "off", "local", "remote_write", "remote_apply")


def parse_url(url: str) -> tuple[str, int]:
    """The connection string for psycopg and the pool size (`?pool_size=N`, ours).
    `?synchronous_commit=VALUE` becomes a setting of every connection the store opens (libpq's
    `options`, beside any the URL already has)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"not a PostgreSQL URL: {redact_url(url)}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    size = DEFAULT_POOL_SIZE
    rest: list[tuple[str, str]] = []
    synchronous: str | None = None
    ours = [key for key, _ in query if key in ("pool_size", "synchronous_commit")]
    for key in ours:
        if ours.count(key) > 1:  # never the last one silently winning
            raise ConfigError(f"{key} is given more than once in the store URL")
    for key, value in query:
        if key == "pool_size":
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"pool_size must be a positive integer, not {value!r}")
            size = int(value)
        elif key == "synchronous_commit":
            if value.lower() not in SYNCHRONOUS_COMMIT:
                raise ConfigError(
                    f"synchronous_commit must be one of {', '.join(SYNCHRONOUS_COMMIT)}, "
                    f"not {value!r}"
                )
            synchronous = value.lower()
        else:
            rest.append((key, value))
    if synchronous is not None:
        setting = f"-c synchronous_commit={synchronous}"
        options = [v for k, v in rest if k == "options"]
        rest = [(k, v) for k, v in rest if k != "options"]
        rest.append(("options", " ".join([*options, setting])))
    # quote, not quote_plus: libpq reads a "+" as itself, not as a space.
    return urlunsplit(parts._replace(query=urlencode(rest, quote_via=quote))), size


class PostgresStore:
    """`PostgresStore("postgresql://user:pass@host/db?pool_size=4")`. Opens nothing until
    first used; the first connection brings the schema up to date unless `auto_migrate` is
    False (then run `tether db migrate`)."""

    def __init__(self, url: str, *, pool_size: int | None = None, auto_migrate: bool = True):
        conninfo, size = parse_url(url)
        self.url = url
        self.pool = Pool(conninfo, pool_size or size, auto_migrate=auto_migrate)
        self._news = News(conninfo)
        self._lineage = pg_forks.Lineage()  # every read of a log goes through it

    # -- the log ------------------------------------------------------------------------------
    async def append(
        self,
        session_id: str,
        events: Sequence[Event],
        expected_seq: int,
        lease: Lease | None = None,
        *,
        row: CatalogRow | None = None,
        admit: Admit | None = None,
    ) -> None:
        check_batch(session_id, events, expected_seq)
        if row is None:
            # No fold handed in: fold the whole log here. Read and append are two statements;
            # an append between them makes this one a conflict, as it would be anyway.
            history = await self.read(session_id, 0, expected_seq)
            row = catalog.row_for_log([*history, *events])
        elif row.session_id != session_id or row.last_seq != expected_seq + len(events):
            raise UsageError(
                f"session {session_id}: the catalog row handed in is session "
                f"{row.session_id} at seq {row.last_seq}, not this batch's last seq "
                f"{expected_seq + len(events)}"
            )
        params = (
            session_id,
            expected_seq,
            None if lease is None else lease.generation,
            [e.id for e in events],
            [e.time for e in events],
            [e.thread for e in events],
            [e.type for e in events],
            [payload_data(e.payload) for e in events],
            pg_catalog.row_param(row),
            None if admit is None else admit.tenant,
            None if admit is None else admit.max_running,
        )
        # A cancel must not leave the caller unsure whether the connection was mid-commit:
        # the statement runs to its end, then the cancel goes on (the outcome is as after a
        # lost reply: a retry of the same batch is accepted once).
        task = asyncio.ensure_future(self.pool.run(lambda conn: _append(conn, params)))
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait({task}, timeout=_APPEND_SETTLE)
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: the caller is cancelled and hears of neither
            raise
        status, actual, owner, generation = result
        if status == "conflict":
            raise Conflict(session_id, expected_seq, int(actual))
        if status == "quota" and admit is not None:
            refusal = catalog.refusal(admit, int(actual))
            raise QuotaExceeded(refusal, catalog.RUNNING_RETRY_AFTER)
        if status == "lease" and lease is not None:
            held = f"generation {generation} ({owner or 'released'})" if generation else "no lease"
            raise LeaseLost(
                f"session {session_id}: lease generation {lease.generation} of {lease.owner} "
                f"is no longer current; the store holds {held}"
            )

    async def read(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        check_limit(limit)

        rows = await self.pool.run(
            lambda conn: self._lineage.rows(conn, session_id, after_seq, limit)
        )
        try:
            return [event_from_row(r) for r in rows]
        except CorruptLog as exc:
            raise unreadable(session_id, UNDECODABLE, rows) from exc

    async def fork(
        self, session_id: str, link: ForkLink, events: Sequence[Event], *, row: CatalogRow
    ) -> None:
        check_fork(session_id, link, events, row)
        params = (
            session_id,
            link.parent,
            link.at,
            [e.id for e in events],
            [e.time for e in events],
            [e.thread for e in events],
            [e.type for e in events],
            [payload_data(e.payload) for e in events],
            pg_catalog.row_param(row),
        )
        found = await self.fetch_one(
            "SELECT * FROM tether_fork(%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb)", params
        )
        status, actual = found if found is not None else ("missing", None)
        if status == "conflict":
            raise Conflict(session_id, 0, int(actual or 0))
        if status == "missing":
            raise SessionNotFound(f"session {link.parent} has no event at seq {link.at}")

    async def fork_link(self, session_id: str) -> ForkLink | None:
        chain = await self.pool.run(lambda conn: self._lineage.chain(conn, session_id))
        return chain[0] if chain else None

    async def last_seq(self, session_id: str) -> int:
        row = await self.fetch_one(
            "SELECT last_seq FROM tether_sessions WHERE session_id = %s", (session_id,)
        )
        return 0 if row is None else int(row[0])

    async def last_seqs(self, session_ids: Sequence[str]) -> dict[str, int]:
        rows = await self.fetch_all(
            "SELECT session_id, last_seq FROM tether_sessions WHERE session_id = ANY(%s)",
            (list(session_ids),),
        )
        return {r[0]: int(r[1]) for r in rows}

    async def sessions(self, limit: int = 100) -> list[SessionInfo]:
        rows = await self.fetch_all(
            "SELECT session_id, last_seq, created, updated FROM tether_catalog "
            "ORDER BY updated DESC, session_id DESC LIMIT %s",
            (limit,),
        )
        return [SessionInfo(r[0], int(r[1]), r[2], r[3]) for r in rows]

    # -- the catalog --------------------------------------------------------------------------
    async def catalog(self, query: CatalogQuery) -> list[CatalogRow]:
        sql, params = pg_catalog.page(query)
        return [pg_catalog.row_from(r) for r in await self.fetch_all(sql, tuple(params))]

    async def catalog_counts(self, query: CatalogQuery) -> dict[str, int]:
        sql, params = pg_catalog.counts(query)
        return {r[0]: int(r[1]) for r in await self.fetch_all(sql, tuple(params))}

    async def catalog_row(self, session_id: str) -> CatalogRow | None:
        row = await self.fetch_one(
            f"SELECT {pg_catalog.COLUMNS} FROM tether_catalog c WHERE c.session_id = %s",
            (session_id,),
        )
        return None if row is None else pg_catalog.row_from(row)

    async def catalog_experiments(
        self, tenant: str | None, limit: int = 100
    ) -> list[ExperimentEntry]:
        sql, params = pg_catalog.experiments(tenant, limit)
        rows = await self.fetch_all(sql, tuple(params))
        return [ExperimentEntry(r[0], int(r[1]), r[2], r[3]) for r in rows]

    async def catalog_usage(
        self, tenant: str | None, since: str, until: str, limit: int = 10_000
    ) -> list[UsageEntry]:
        sql, params = pg_catalog.usage(tenant, since, until, limit)
        rows = await self.fetch_all(sql, tuple(params))
        return [catalog.usage_entry(r[0], r[1], r[2:]) for r in rows]

    async def put_catalog_row(self, row: CatalogRow) -> bool:
        found = await self.fetch_one(
            "SELECT tether_put_catalog_row(%s::jsonb)", (pg_catalog.row_param(row),)
        )
        return bool(found and found[0])

    async def session_ids(self, after: str = "", limit: int = 1000) -> list[str]:
        rows = await self.fetch_all(
            "SELECT session_id FROM tether_sessions WHERE session_id > %s "
            "ORDER BY session_id LIMIT %s",
            (after, limit),
        )
        return [r[0] for r in rows]

    async def count_sessions(self) -> int:
        row = await self.fetch_one("SELECT count(*) FROM tether_sessions", ())
        return 0 if row is None else int(row[0])

    # -- fold snapshots -----------------------------------------------------------------------
    async def put_snapshot(self, snapshot: Snapshot) -> None:
        await self.execute(
            "SELECT tether_put_snapshot(%s, %s, %s, %s)",
            (snapshot.session_id, snapshot.seq, snapshot.version, bytes(snapshot.data)),
        )

    async def get_snapshot(self, session_id: str) -> Snapshot | None:
        row = await self.fetch_one(pg_forks.GET_SNAPSHOT, (session_id,) * 3)
        return None if row is None else Snapshot(session_id, int(row[0]), row[1], bytes(row[2]))

    # -- leases -------------------------------------------------------------------------------
    async def claim(self, session_id: str, owner: str, ttl: float) -> Lease:
        check_ttl(ttl)
        row = await self.fetch_one(
            "SELECT * FROM tether_claim(%s, %s, %s)", (session_id, owner, ttl)
        )
        if row is None:
            raise StoreError(f"session {session_id}: the claim returned nothing")
        won, held_owner, generation, expires, _claims = row
        if not won:
            raise LeaseHeld(session_id, held_owner, float(expires))
        return Lease(session_id, held_owner, int(generation), float(expires))

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        check_ttl(ttl)
        row = await self.fetch_one(
            "UPDATE tether_leases SET expires = tether_now() + %s "
            "WHERE session_id = %s AND generation = %s AND owner <> '' RETURNING expires",
            (ttl, lease.session_id, lease.generation),
        )
        if row is None:
            raise LeaseLost(
                f"session {lease.session_id}: lease generation {lease.generation} of "
                f"{lease.owner} was released or taken over; it cannot be renewed"
            )
        return Lease(lease.session_id, lease.owner, lease.generation, float(row[0]))

    async def release(self, lease: Lease) -> None:
        # Keep the row and its generation, so the next claim still gets a higher one; a clean
        # release also clears the claim count (the session did not kill its worker).
        await self.execute(
            "UPDATE tether_leases SET owner = '', expires = 0, claims = 0 "
            "WHERE session_id = %s AND generation = %s",
            (lease.session_id, lease.generation),
        )

    async def acquit(self, lease: Lease) -> None:
        await self.execute(
            "UPDATE tether_leases SET claims = 1 "
            "WHERE session_id = %s AND generation = %s AND owner <> ''",
            (lease.session_id, lease.generation),
        )

    async def current_lease(self, session_id: str) -> Lease | None:
        row = await self.fetch_one(
            "SELECT owner, generation, expires FROM tether_leases "
            "WHERE session_id = %s AND expires > tether_now()",
            (session_id,),
        )
        return None if row is None else Lease(session_id, row[0], int(row[1]), float(row[2]))

    async def claims(self, session_id: str) -> int:
        """Claims of the session's lease since its last clean release: 1 while its first
        worker runs it, more after workers died holding it."""
        row = await self.fetch_one(
            "SELECT claims FROM tether_leases WHERE session_id = %s", (session_id,)
        )
        return 0 if row is None else int(row[0])

    # -- runnable sessions ---------------------------------------------------------------------
    async def mark_runnable(self, session_id: str) -> None:
        await self.execute("SELECT tether_mark(%s)", (session_id,))

    async def defer(self, session_id: str, seconds: float, reason: DeferReason) -> None:
        check_defer(seconds, reason)
        await self.execute("SELECT tether_defer(%s, %s, %s)", (session_id, seconds, reason))

    async def queued(self, session_id: str) -> Queued | None:
        row = await self.fetch_one(
            "SELECT not_before, reason FROM tether_wakeups "
            "WHERE session_id = %s AND not_before > tether_now()",
            (session_id,),
        )
        if row is None:
            return None
        return Queued(session_id, float(row[0]), cast("DeferReason", row[1]))

    async def runnable(self, limit: int = 100) -> list[Wakeup]:
        rows = await self.fetch_all(
            "SELECT w.session_id, w.token FROM tether_wakeups w "
            "LEFT JOIN tether_leases l ON l.session_id = w.session_id "
            "WHERE (l.session_id IS NULL OR l.expires <= tether_now()) "
            "AND (w.not_before IS NULL OR w.not_before <= tether_now()) "
            "ORDER BY w.marked, w.session_id LIMIT %s",
            (limit,),
        )
        return [Wakeup(r[0], int(r[1])) for r in rows]

    async def clear_runnable(self, wakeup: Wakeup) -> bool:
        row = await self.fetch_one(
            "DELETE FROM tether_wakeups WHERE session_id = %s AND token = %s RETURNING 1",
            (wakeup.session_id, wakeup.token),
        )
        return row is not None

    async def claim_runnable(
        self, owner: str, ttl: float, limit: int = 1, *, alone: bool = True
    ) -> list[Claimed]:
        """Claim up to `limit` runnable sessions at once: takeovers oldest expiry first, then
        fresh work oldest mark first. Workers asking together get different sessions without
        waiting on each other (SKIP LOCKED).

        A suspect — a session whose workers died holding it `SUSPECT_CLAIMS` times in a row,
        no death forgiven (`acquit`) — goes only to a claim that may take one (`alone`: the
        worker runs no other suspect), and by itself."""
        check_claim(ttl, limit)
        rows = await self.fetch_all(
            "SELECT * FROM tether_claim_runnable(%s, %s, %s, %s)", (owner, ttl, limit, alone)
        )
        return [
            Claimed(Wakeup(r[0], int(r[1])), Lease(r[0], owner, int(r[2]), float(r[3])), int(r[4]))
            for r in rows
        ]

    # -- blobs --------------------------------------------------------------------------------
    async def put_blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        await self.execute(
            "INSERT INTO tether_blobs VALUES (%s, %s) ON CONFLICT (digest) DO NOTHING",
            (digest, bytes(data)),
        )
        return digest

    async def get_blob(self, digest: str) -> bytes | None:
        row = await self.fetch_one("SELECT data FROM tether_blobs WHERE digest = %s", (digest,))
        return None if row is None else bytes(row[0])

    async def check_integrity(self, *, whole: bool = True) -> None:
        return None  # PostgreSQL guards its own pages (data checksums, if the cluster has them)

    async def ready(self) -> None:
        # DO UPDATE, not DO NOTHING: a row version is written every time, so a database that
        # takes no writes (read-only, a standby, a full disk) fails here.
        digest = hashlib.sha256(READY_BLOB).hexdigest()
        try:
            await self.execute(
                "INSERT INTO tether_blobs VALUES (%s, %s) "
                "ON CONFLICT (digest) DO UPDATE SET data = EXCLUDED.data",
                (digest, READY_BLOB),
            )
            found = await self.get_blob(digest)
        except StoreError as exc:
            raise StoreUnavailable(str(exc)) from exc
        if found != READY_BLOB:
            raise StoreUnavailable(f"store {redact_url(self.url)}: a blob written was not read")

    # -- wake-ups -----------------------------------------------------------------------------
    def subscribe(self) -> Subscription:
        """Control-plane appends (messages, decisions, cancels) as they commit: `await
        sub.wait(timeout)` returns the sessions named since the last wait."""
        return self._news.subscribe()

    async def now(self) -> float:
        """The database's clock, in seconds since the epoch: the one leases expire by."""
        row = await self.fetch_one("SELECT tether_now()", ())
        return float(row[0]) if row is not None else 0.0

    # -- plumbing -----------------------------------------------------------------------------
    async def fetch_one(self, sql: str, params: tuple[object, ...]) -> TupleRow | None:
        async def body(conn: Conn) -> TupleRow | None:
            cur = await conn.execute(sql, params)
            return await cur.fetchone()

        return await self.pool.run(body)

    async def fetch_all(self, sql: str, params: tuple[object, ...]) -> list[TupleRow]:
        async def body(conn: Conn) -> list[TupleRow]:
            cur = await conn.execute(sql, params)
            return await cur.fetchall()

        return await self.pool.run(body)

    async def execute(self, sql: str, params: tuple[object, ...]) -> None:
        async def body(conn: Conn) -> None:
            await conn.execute(sql, params)

        await self.pool.run(body)

    async def close(self) -> None:
        await self._news.close()
        await self.pool.close()


async def _append(conn: Conn, params: tuple[object, ...]) -> TupleRow:
    cur = await conn.execute(
        "SELECT * FROM tether_append(%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s)", params
    )
    row = await cur.fetchone()
    if row is None:
        raise StoreError("tether_append returned nothing")
    return row
