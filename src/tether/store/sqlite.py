"""The embedded default store: one SQLite file in WAL mode, one transaction per batch.

Appends run on the event loop's own thread: a WAL commit takes tens of microseconds here,
less than handing work to another thread does (~75 µs), and commits happen on every step.
The batches of one loop turn share one commit (group_commit.py), and so do lease changes.
What this connection wrote or read under the write lock (a session's last seq, its lease) it
remembers, and trusts only while no other connection has committed since (`_begin`): so an
append needs no read, and nor does a reader asking for what it already has.
Reads, which can be long (a 10,000-event resume), run on a reader thread with a connection
of their own. Other processes may share the file; SQLite's lock and `expected_seq` keep
their appends apart. Every append writes its session's catalog row in the transaction of its
events (sqlite_catalog.py); a file from before the catalog is backfilled on open
(sqlite_backfill.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from tether.bounded import ByteLRU
from tether.errors import (
    ConfigError,
    Conflict,
    CorruptLog,
    LeaseHeld,
    QuotaExceeded,
    StoreError,
    StoreUnavailable,
)
from tether.events import Event
from tether.store import catalog, sqlite_backfill, sqlite_catalog, sqlite_forks, sqlite_wakeups
from tether.store.base import (
    Claimed,
    DeferReason,
    EventRow,
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
    event_to_row,
    is_retry,
    lease_refusal,
)
from tether.store.catalog import Admit, CatalogQuery, CatalogRow, ExperimentEntry, UsageEntry
from tether.store.group_commit import GroupCommit
from tether.store.sqlite_format import (
    EVENT_COLUMNS,
    MIGRATES_FROM,
    SCHEMA,
    STORE_FORMAT,
    migrate,
    stored_format,
)
from tether.store.sqlite_health import Trust, check_file, sanity_read

T = TypeVar("T")
log = logging.getLogger("tether.store")

# Past this many sessions remembered, forget them all: an unbounded server must not grow.
_KNOWN_MAX = 100_000
# The writer checkpoints when the WAL passes this many pages (SQLite's default is 1,000).
# Every checkpoint syncs twice, and a page appended to many times is copied once per
# checkpoint: fewer, larger ones cost a third less in all, for a WAL of up to 16 MiB.
# (One run on the reader thread instead saved no more, and slowed a lone session.)
_WAL_CHECKPOINT_PAGES = 4_000
# A read's first rows are read on the loop's thread (see `read`), the rest on the reader's.
_INLINE_ROWS = 64
# Events kept decoded, the oldest remembered forgotten first: at most this many, holding
# at most this many bytes of stored text (the decoded event holds about as much again).
# An event larger than an eighth of that is decoded at each read instead of kept.
_DECODED_MAX = 8_192
_DECODED_BYTES = 16 << 20
_ROW_OVERHEAD = 512  # what a kept row and its event cost beside the data's text
_WRITER_CACHE_KIB = -65_536  # negative: KiB, not pages; filled only as pages are used

# Each session with its last seq from the index alone, newest created first, its creation
# time standing in for its last update: `sessions` for a file whose catalog cannot be read.
_LISTING_DAMAGED = (
    "SELECT s.session_id, coalesce((SELECT max(seq) FROM events WHERE session_id = "
    "s.session_id), 0), s.created, s.created FROM sessions s ORDER BY s.created DESC LIMIT ?"
)

# A claim. `claims` counts claims since the last clean release (`Store.claim_runnable`'s
# suspects).
_CLAIM = (
    "INSERT INTO leases (session_id, owner, generation, expires, claims) "
    "VALUES (?, ?, ?, ?, 1) ON CONFLICT(session_id) DO UPDATE SET owner = excluded.owner, "
    "generation = excluded.generation, expires = excluded.expires, claims = leases.claims + 1"
)


# The durability settings a store may ask for (OFF and EXTRA are not offered: one loses
# commits to an OS crash even in WAL mode, the other adds nothing WAL needs).
SQLITE_SYNCHRONOUS = ("NORMAL", "FULL")

# How long opening a store waits out another connection that is setting the file up.
_OPEN_PATIENCE = 10.0


class _Locked(Exception):
    """SQLite said "locked" without waiting, while the store was being opened."""


class SQLiteStore:
    """`synchronous`: NORMAL (the default; with WAL a commit survives a crash of the process,
    and may be lost with the last moments before an OS crash or power loss) or FULL (each
    commit is synced to the disk first, so it survives those too)."""

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "NORMAL") -> None:
        path = os.fspath(path)  # a `pathlib.Path` as well as a string
        if synchronous.upper() not in SQLITE_SYNCHRONOUS:
            raise ConfigError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
        self._synchronous = synchronous.upper()
        self.url = f"sqlite:///{path}" + (
            "" if self._synchronous == "NORMAL" else f"?synchronous={self._synchronous.lower()}"
        )
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-sqlite-read")
        self._closed = False
        # Open now, so a bad path fails where the store is made.
        self._conn: sqlite3.Connection | None = self._connect()
        self._conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_CHECKPOINT_PAGES}")
        # Each session appends to its own last leaf page; with thousands running, 2 MiB of
        # page cache (the default) rereads them from the OS at every append.
        self._conn.execute(f"PRAGMA cache_size = {_WRITER_CACHE_KIB}")
        self._lineage = sqlite_forks.Lineage()  # every read of a log goes through it
        if sqlite_backfill.owed(self._conn):
            row_for = sqlite_backfill.row_of_log(self._lineage.rows, self.url)
            sqlite_backfill.backfill(self._conn, row_for, self.url)
        self._group = GroupCommit(
            self._db,
            self.url,
            on_begin=self._begin,
            on_commit=self._after_commit,
            on_rollback=self._rolled_back,
        )
        self._reader: sqlite3.Connection | None = self._connect()
        # The file opened: once the path names another file (or none), nothing is
        # acknowledged any more (`_after_commit`), and the store stays unavailable.
        # Damage met in it makes it unready.
        self._trust = Trust(self.url, path)
        # What the writer connection knows, valid while `data_version` stays `_version`.
        self._version: int | None = None
        self._last: dict[str, int] = {}
        self._leases: dict[str, Lease | None] = {}  # None: the session has no lease row
        # The indexed columns of each session's catalog row as the writer last wrote them.
        self._indexed: dict[str, sqlite_catalog.Indexed] = {}
        # Rows this process wrote or read lately, with their events (which are immutable).
        self._decoded: ByteLRU[tuple[str, int], tuple[EventRow, Event]] = ByteLRU(
            _DECODED_MAX, _DECODED_BYTES
        )

    # -- thread-side --------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        # Two processes opening one file at the same moment can meet where SQLite returns
        # "locked" at once rather than wait (switching a new file to WAL, a migration):
        # setting up is safe to repeat, so try again for a while before calling it an error.
        deadline = time.monotonic() + _OPEN_PATIENCE
        pause = 0.01
        while True:
            try:
                return self._connect_once()
            except _Locked:
                if time.monotonic() + pause > deadline:
                    raise ConfigError(
                        f"cannot open store sqlite:///{self.path}: database is locked "
                        f"(still, after {_OPEN_PATIENCE:g} s)"
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.25)

    def _connect_once(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot open store sqlite:///{self.path}: {exc}") from exc
        try:
            conn.execute("PRAGMA busy_timeout = 10000")
            # Before anything is changed: a file of a format this version cannot read is
            # refused as it is (not even switched to WAL).
            found = stored_format(conn)
            if found not in (None, STORE_FORMAT, *MIGRATES_FROM):
                raise ConfigError(
                    f"{self.path} has tether store format {found}, expected {STORE_FORMAT}"
                )
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.executescript(
                SCHEMA + sqlite_wakeups.SCHEMA + sqlite_catalog.SCHEMA + sqlite_forks.SCHEMA
            )
            conn.execute("INSERT OR IGNORE INTO tether_meta VALUES ('format', ?)", (STORE_FORMAT,))
            if stored_format(conn) in MIGRATES_FROM:
                migrate(conn)
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" in str(exc) or "busy" in str(exc):
                raise _Locked from exc
            raise ConfigError(f"cannot open store sqlite:///{self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            conn.close()
            raise ConfigError(f"cannot open store sqlite:///{self.path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _begin(self, conn: sqlite3.Connection) -> None:
        """Run first in every write transaction: if another connection (another process, or
        another store on the file) committed since the last one, forget what we knew."""
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            self._forget()
            self._version = version

    def _forget(self) -> None:
        self._last.clear()
        self._leases.clear()
        self._indexed.clear()

    def _rolled_back(self) -> None:
        self._forget()
        self._lineage.chains.clear()  # a chain read inside the group may not have landed

    def _learn(self, conn: sqlite3.Connection, session_id: str) -> None:
        """Read a session's last seq and lease, in one statement, under the write lock."""
        if len(self._last) > _KNOWN_MAX:
            self._forget()  # always safe: inside the transaction, the database answers alike
        row = conn.execute(
            "SELECT (SELECT max(seq) FROM events WHERE session_id = ?1), "
            "l.owner, l.generation, l.expires FROM (SELECT 1) "
            "LEFT JOIN leases l ON l.session_id = ?1",
            (session_id,),
        ).fetchone()
        self._last[session_id] = 0 if row[0] is None else int(row[0])
        self._leases[session_id] = (
            None if row[2] is None else Lease(session_id, row[1], int(row[2]), float(row[3]))
        )

    def _lease_of(self, conn: sqlite3.Connection, session_id: str) -> Lease | None:
        if session_id not in self._leases:
            self._learn(conn, session_id)
        return self._leases[session_id]

    def _known_last(self, session_id: str) -> int | None:
        """The session's last seq, if the writer knows it and no other connection has
        committed since: then a read after it needs no query."""
        last = self._last.get(session_id)
        if last is None or self._trust.failed is not None or self._conn is None:
            return None
        if self._conn.execute("PRAGMA data_version").fetchone()[0] != self._version:
            return None
        return last

    def _append_rows(self, conn: sqlite3.Connection, batch: _Batch) -> bool:
        """One batch, inside the group transaction; False for a retry that wrote nothing.
        Every refusal is raised before the first write, as group_commit.py requires."""
        session_id, rows, expected_seq, lease = batch.session_id, batch.rows, batch.seq, batch.lease
        last = self._last.get(session_id)
        if last is None or (lease is not None and session_id not in self._leases):
            self._learn(conn, session_id)
            last = self._last[session_id]
        if lease is not None:
            refusal = lease_refusal(session_id, self._leases[session_id], lease)
            if refusal is not None:
                raise refusal
        if last != expected_seq:
            stored = conn.execute(
                "SELECT id FROM events WHERE session_id = ? AND seq > ? AND seq <= ? ORDER BY seq",
                (session_id, expected_seq, expected_seq + len(rows)),
            ).fetchall()
            if is_retry([r[0] for r in stored], [r[2] for r in rows]):
                return False
            raise Conflict(session_id, expected_seq, last)
        if batch.admit is not None:
            running = sqlite_catalog.running(conn, batch.admit, session_id)
            if running >= batch.admit.max_running:
                raise QuotaExceeded(
                    catalog.refusal(batch.admit, running), catalog.RUNNING_RETRY_AFTER
                )
        row = batch.row
        if row is None:  # folded here, before the first write: decoding may refuse the log
            logged = self._lineage.rows(conn, session_id, 0, None) if expected_seq else []
            try:
                prior = [self._decode(r) for r in logged]
            except CorruptLog as exc:
                raise self._trust.damaged(exc, session_id, logged) from exc
            row = catalog.row_for_log([*prior, *batch.events])
        conn.executemany(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        if expected_seq == 0:
            conn.execute("INSERT INTO sessions VALUES (?, ?)", (session_id, rows[0][3]))
        sqlite_catalog.write(conn, row, self._indexed.get(session_id))
        self._indexed[session_id] = sqlite_catalog.indexed(row)
        self._last[session_id] = expected_seq + len(rows)
        return True

    def _db(self) -> sqlite3.Connection:
        if self._trust.failed is not None:  # an attribute read: this runs on every commit
            raise self._trust.unavailable()
        if self._conn is None:
            raise StoreError(f"store {self.url} is closed")
        return self._conn

    def _read_db(self) -> sqlite3.Connection:
        self._trust.refuse_if_failed()
        if self._reader is None:
            raise StoreError(f"store {self.url} is closed")
        return self._reader

    # -- a file that can no longer be trusted -------------------------------------------------
    def _after_commit(self, conn: sqlite3.Connection) -> None:
        """Run after every group's COMMIT, before any batch in it is acknowledged: a commit
        into a file the path no longer names is refused (it landed where nobody will look)."""
        file = self._trust.file
        moved = None if file is None else file.moved()
        if moved is not None:
            raise self._fail(moved)

    def _fail(self, reason: str) -> StoreUnavailable:
        """Refuse everything from now on, and let the file go (`_let_go`)."""
        if self._trust.fail(reason):
            # Not at once: the group that found it still rolls back on this connection.
            asyncio.get_running_loop().call_soon(self._let_go_soon)
        return self._trust.unavailable()

    def _let_go_soon(self) -> None:
        if not self._closed:  # else `close` lets it go
            self._executor.submit(self._let_go)

    def _let_go(self) -> None:
        """On the reader's thread, once the store refuses everything (the loop's thread no
        longer touches either connection): what the WAL holds is moved into the file this
        store opened, which any other link to it still reaches, and the WAL is emptied; then
        both connections close. SQLite does neither when it closes a moved file, and a WAL
        left behind would be read into whatever file the path names next."""
        self._shut_reader()
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            log.warning("store %s: emptying the WAL of the old file failed: %s", self.url, exc)
        conn.close()

    def _shut_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # -- async face ---------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., T], *args: object, session_id: str | None = None) -> T:
        if self._closed:
            raise StoreError(f"store {self.url} is closed")
        self._trust.refuse_if_failed()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except sqlite3.Error as exc:
            raise self._trust.error(exc, session_id) from exc

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
        rows = [event_to_row(e) for e in events]
        batch = _Batch(self, session_id, rows, events, expected_seq, lease, row, admit)
        if await self._submit(batch):
            self._remember(rows, events)

    async def fork(
        self, session_id: str, link: ForkLink, events: Sequence[Event], *, row: CatalogRow
    ) -> None:
        rows = sqlite_forks.checked(session_id, link, events, row)

        def body(conn: sqlite3.Connection) -> bool:
            if not self._lineage.write(conn, session_id, link, rows, row):
                return False
            self._indexed[session_id] = sqlite_catalog.indexed(row)
            self._last[session_id] = link.at + len(rows)
            return True

        if await self._submit(body):
            self._remember(rows, events)

    async def fork_link(self, session_id: str) -> ForkLink | None:
        chain = await self._run(self._lineage.chain, self._read_db(), session_id)
        return chain[0] if chain else None

    def _submit(self, body: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        if self._closed:
            raise StoreError(f"store {self.url} is closed")
        if self._trust.failed is not None:
            raise self._trust.unavailable()
        return self._group.submit(body)

    async def read(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        check_limit(limit)
        known = self._known_last(session_id)
        if limit == 0 or (known is not None and after_seq >= known):
            return []  # a runner catching up after its own appends: nothing new
        # The first events on this thread, through the writer's connection: a read of a
        # step's news costs less than the hop to the reader thread, which waits for the GIL
        # whenever the loop is busy (500 streams' news read one hop each took seconds).
        # Only what is left of a long read goes to the reader thread.
        first = _INLINE_ROWS if limit is None else min(limit, _INLINE_ROWS)
        try:
            rows = self._lineage.rows(self._db(), session_id, after_seq, first)
        except sqlite3.Error as exc:
            raise self._trust.error(exc, session_id) from exc
        if len(rows) == first and first != limit:
            after = int(rows[-1][1])
            rest = None if limit is None else limit - first
            rows += await self._run(
                self._lineage.rows, self._read_db(), session_id, after, rest, session_id=session_id
            )
        try:
            return [self._decode(r) for r in rows]
        except CorruptLog as exc:
            raise self._trust.damaged(exc, session_id, rows) from exc

    def _decode(self, row: EventRow) -> Event:
        """The row as an event, decoded once per process: a server reads each new event
        for a poll, a stream's start and the hub's news (a session's first event, the
        largest, cost more to decode than its whole step costs to commit)."""
        known = self._decoded.get((row[0], row[1]))
        if known is not None and known[0] == row:  # the same stored text decodes the same
            return known[1]
        event = event_from_row(row)
        self._remember((row,), (event,))
        return event

    def _remember(self, rows: Sequence[EventRow], events: Sequence[Event]) -> None:
        decoded = self._decoded
        for row, event in zip(rows, events, strict=True):
            decoded.put((row[0], row[1]), (row, event), len(row[6]) + _ROW_OVERHEAD)

    async def last_seq(self, session_id: str) -> int:
        known = self._known_last(session_id)
        if known is not None:
            return known
        row = await self._run(
            lambda: (
                self._read_db()
                .execute("SELECT max(seq) FROM events WHERE session_id = ?", (session_id,))
                .fetchone()
            )
        )
        return 0 if row[0] is None else int(row[0])

    async def last_seqs(self, session_ids: Sequence[str]) -> dict[str, int]:
        # The first 500 on this thread, as `read` does: the reader thread takes the GIL back
        # for every row it fetches, and waited for it each time while the loop was busy (an
        # event hub's round over 500 streams took seconds).
        ids = list(session_ids)
        try:
            out = sqlite_forks.last_seqs(self._db(), ids[:500])
        except sqlite3.Error as exc:
            raise self._trust.error(exc) from exc
        if len(ids) > 500:
            out.update(await self._run(sqlite_forks.last_seqs, self._read_db(), ids[500:]))
        return out

    async def sessions(self, limit: int = 100) -> list[SessionInfo]:
        try:
            rows = await self._run(lambda: sqlite_catalog.newest(self._read_db(), limit))
        except CorruptLog:
            # A damaged page of the catalog (which holds tasks, so shares pages with other
            # sessions): list every session from the sessions table and the events' index
            # alone, so the sound ones are still found.
            rows = await self._run(
                lambda: self._read_db().execute(_LISTING_DAMAGED, (limit,)).fetchall()
            )
        return [SessionInfo(*r) for r in rows]

    # -- the catalog (sqlite_catalog.py): written in the append's transaction, read by index --
    async def catalog(self, query: CatalogQuery) -> list[CatalogRow]:
        return await self._run(lambda: sqlite_catalog.page(self._read_db(), query))

    async def catalog_counts(self, query: CatalogQuery) -> dict[str, int]:
        return await self._run(lambda: sqlite_catalog.counts(self._read_db(), query))

    async def catalog_row(self, session_id: str) -> CatalogRow | None:
        return await self._run(lambda: sqlite_catalog.row_of(self._read_db(), session_id))

    async def catalog_experiments(
        self, tenant: str | None, limit: int = 100
    ) -> list[ExperimentEntry]:
        return await self._run(lambda: sqlite_catalog.experiments(self._read_db(), tenant, limit))

    async def catalog_usage(
        self, tenant: str | None, since: str, until: str, limit: int = 10_000
    ) -> list[UsageEntry]:
        return await self._run(
            lambda: sqlite_catalog.usage(self._read_db(), tenant, since, until, limit)
        )

    async def put_catalog_row(self, row: CatalogRow) -> bool:
        def body(conn: sqlite3.Connection) -> bool:
            last = conn.execute(
                "SELECT max(seq) FROM events WHERE session_id = ?", (row.session_id,)
            ).fetchone()[0]
            if last is None or int(last) != row.last_seq:
                return False
            sqlite_catalog.rewrite(conn, row)
            self._indexed[row.session_id] = sqlite_catalog.indexed(row)
            return True

        return await self._submit(body)

    async def session_ids(self, after: str = "", limit: int = 1000) -> list[str]:
        found = await self._run(
            lambda: (
                self._read_db()
                .execute(
                    "SELECT session_id FROM sessions WHERE session_id > ? "
                    "ORDER BY session_id LIMIT ?",
                    (after, limit),
                )
                .fetchall()
            )
        )
        return [str(r[0]) for r in found]

    async def count_sessions(self) -> int:
        found = await self._run(
            lambda: self._read_db().execute("SELECT count(*) FROM sessions").fetchone()
        )
        return int(found[0])

    # -- snapshots: the newest fold kept per session; a fork's, its parent's (sqlite_forks) ---
    async def put_snapshot(self, snapshot: Snapshot) -> None:
        await self._submit(lambda conn: sqlite_forks.put_snapshot(conn, snapshot))

    async def get_snapshot(self, session_id: str) -> Snapshot | None:
        return await self._run(sqlite_forks.get_snapshot, self._read_db(), session_id)

    # -- blobs: content-addressed, written in the group commit like events ------------------
    async def put_blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        blob = bytes(data)
        await self._submit(
            lambda conn: conn.execute(
                "INSERT OR IGNORE INTO blobs VALUES (?, ?)", (digest, blob)
            ).close()
        )
        return digest

    async def get_blob(self, digest: str) -> bytes | None:
        row = await self._run(
            lambda: (
                self._read_db()
                .execute("SELECT data FROM blobs WHERE hash = ?", (digest,))
                .fetchone()
            )
        )
        return None if row is None else bytes(row[0])

    # -- leases: written in the group commit too; a refusal is raised before any write -------
    async def claim(self, session_id: str, owner: str, ttl: float) -> Lease:
        check_ttl(ttl)

        def body(conn: sqlite3.Connection) -> Lease:
            now = time.time()
            held = self._lease_of(conn, session_id)
            if held is not None and held.expires > now and held.owner != owner:
                raise LeaseHeld(session_id, held.owner, held.expires)
            lease = Lease(session_id, owner, (held.generation if held else 0) + 1, now + ttl)
            conn.execute(_CLAIM, (session_id, owner, lease.generation, lease.expires))
            self._leases[session_id] = lease
            return lease

        return await self._submit(body)

    def subscribe(self) -> None:
        return None  # nothing is pushed: readers poll

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        check_ttl(ttl)

        def body(conn: sqlite3.Connection) -> Lease:
            refusal = lease_refusal(lease.session_id, self._lease_of(conn, lease.session_id), lease)
            if refusal is not None:
                raise refusal
            renewed = Lease(lease.session_id, lease.owner, lease.generation, time.time() + ttl)
            conn.execute(
                "UPDATE leases SET expires = ? WHERE session_id = ?",
                (renewed.expires, lease.session_id),
            )
            self._leases[lease.session_id] = renewed
            return renewed

        return await self._submit(body)

    async def release(self, lease: Lease) -> None:
        def body(conn: sqlite3.Connection) -> None:
            # Keep the row and its generation, so the next claim still gets a higher one.
            # A clean release also clears the claim count (the session killed no worker).
            conn.execute(
                "UPDATE leases SET expires = 0, owner = '', claims = 0 "
                "WHERE session_id = ? AND generation = ?",
                (lease.session_id, lease.generation),
            )
            self._leases.pop(lease.session_id, None)

        await self._submit(body)

    async def acquit(self, lease: Lease) -> None:
        def body(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE leases SET claims = 1 "
                "WHERE session_id = ? AND generation = ? AND owner <> ''",
                (lease.session_id, lease.generation),
            )

        await self._submit(body)

    async def current_lease(self, session_id: str) -> Lease | None:
        held = _held(self._db(), session_id)
        if held is None or held.expires <= time.time():
            return None
        return held

    # -- readiness: the file, a health row written by the writer and read back by the reader,
    # and a read of the newest pages -----------------------------------------------------------
    async def ready(self) -> None:
        trust = self._trust
        trust.refuse_if_failed()
        moved = trust.moved()
        if moved is not None:
            raise self._fail(moved)
        token = str(time.time_ns())
        try:
            if trust.damage is None:
                trust.damage = await self._run(lambda: sanity_read(self._read_db()))
            unready = trust.unready()
            if unready is not None:
                raise unready
            await self._submit(
                lambda conn: conn.execute(
                    "INSERT OR REPLACE INTO tether_meta VALUES ('ready', ?)", (token,)
                ).close()
            )
            row = await self._run(
                lambda: (
                    self._read_db()
                    .execute("SELECT value FROM tether_meta WHERE key = 'ready'")
                    .fetchone()
                )
            )
        except StoreError as exc:
            raise StoreUnavailable(str(exc)) from exc
        # Another check (of this process or another) may have written after ours: later is fine.
        if row is None or int(row[0]) < int(token):
            raise StoreUnavailable(f"store {self.url}: the health row written was not read back")

    async def check_integrity(self, *, whole: bool = True) -> None:
        # Not on the reader's thread: a check of a large file takes seconds (15 s for a
        # million sessions), and every long read would wait behind it.
        if self._closed:
            raise StoreError(f"store {self.url} is closed")
        self._trust.refuse_if_failed()
        try:
            found = await asyncio.to_thread(check_file, self.path, whole)
        except sqlite3.Error as exc:
            raise self._trust.error(exc) from exc
        if found is not None:
            self._trust.damage = found
            raise CorruptLog(f"store {self.url} is damaged: {found}")

    # -- wakeups: which sessions have work for a runner (sqlite_wakeups.py) ---------------
    async def mark_runnable(self, session_id: str) -> None:
        await self._submit(lambda conn: sqlite_wakeups.mark(conn, session_id))

    async def defer(self, session_id: str, seconds: float, reason: DeferReason) -> None:
        check_defer(seconds, reason)
        await self._submit(lambda conn: sqlite_wakeups.defer(conn, session_id, seconds, reason))

    async def queued(self, session_id: str) -> Queued | None:
        return await self._run(lambda: sqlite_wakeups.queued(self._read_db(), session_id))

    async def runnable(self, limit: int = 100) -> list[Wakeup]:
        return await self._run(lambda: sqlite_wakeups.runnable(self._read_db(), limit))

    async def claim_runnable(
        self, owner: str, ttl: float, limit: int = 1, *, alone: bool = True
    ) -> list[Claimed]:
        check_claim(ttl, limit)

        def body(conn: sqlite3.Connection) -> list[Claimed]:
            # One transaction under SQLite's write lock: another store (or process) on the
            # file claims before or after, never the same sessions.
            now = time.time()
            out: list[Claimed] = []
            for wakeup, generation, claims in sqlite_wakeups.free(conn, now, limit, alone):
                lease = Lease(wakeup.session_id, owner, generation + 1, now + ttl)
                conn.execute(_CLAIM, (lease.session_id, owner, lease.generation, lease.expires))
                self._leases[lease.session_id] = lease
                out.append(Claimed(wakeup, lease, claims + 1))
            return out

        return await self._submit(body)

    async def clear_runnable(self, wakeup: Wakeup) -> bool:
        return await self._submit(lambda conn: sqlite_wakeups.clear(conn, wakeup))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        moved = self._trust.moved()  # since the last commit: let it go alike
        if moved is not None:
            self._trust.fail(moved)
        shut = self._shut_reader if self._trust.failed is None else self._let_go
        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass(slots=True)
class _Batch:
    """An append waiting for its group: one object rather than a closure and its cells,
    since a thousand wait at once and each live object brings the next GC pass nearer."""

    store: SQLiteStore
    session_id: str
    rows: list[EventRow]
    events: Sequence[Event]
    seq: int  # the expected seq
    lease: Lease | None
    row: CatalogRow | None  # the session's catalog row after this batch; None: fold the log
    admit: Admit | None

    def __call__(self, conn: sqlite3.Connection) -> bool:
        return self.store._append_rows(conn, self)


def _held(conn: sqlite3.Connection, session_id: str) -> Lease | None:
    row = conn.execute(
        "SELECT owner, generation, expires FROM leases WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None else Lease(session_id, row[0], int(row[1]), float(row[2]))
