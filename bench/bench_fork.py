"""Forking a long session costs what forking a short one does (issue 35): a fork references
its parent's prefix and copies none of it.

For a session of 100 events and one of 100,000 (closed turns of tool steps, written as a run
writes them, its snapshots as they come due), on SQLite and (with TETHER_TEST_POSTGRES_URL
set) PostgreSQL:

- fork at the end: `session.fork.fork` (it reads a window of the parent's log, writes the
  child's first event, link and catalog row, naming the parent's snapshot), median and
  fastest of FORKS forks, the sizes' forks taken in turns; beside the bare cost of a fork
  that copies: the parent's rows copied in one INSERT ... SELECT (plain sqlite3 / SQL);
- bytes the store grew per fork (the file's pages in use after a checkpoint /
  `pg_total_relation_size` of the tether tables), over BYTES_FORKS forks;
- the child's take-up (`snapshots.start`: snapshot, then the events after it) and a full
  read of its log by a fresh store object, beside the same for the parent (median of 3; of
  1 for the long session); and a bare read (sqlite3 SELECT + json.loads of the parent's
  rows).

Target: a fork of the 100,000-event session within 2x of a fork of the 100-event one.

    .venv/bin/python bench/bench_fork.py [EVENTS ...]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_turns import write_turns  # closed turns of tool steps, as a run writes them
from tether.session import snapshots
from tether.session.fork import fork
from tether.store import SQLiteStore, Store

FORKS = 15
# Forks whose bytes are counted: a page of a table or an index is taken whole (4 KiB on
# SQLite, 8 KiB on PostgreSQL), and a fork writes less than one, so many are averaged.
BYTES_FORKS = 100
SIZES = (100, 100_000)
PG_TABLES = (
    "tether_sessions",
    "tether_events",
    "tether_forks",
    "tether_catalog",
    "tether_catalog_text",
    "tether_catalog_metadata",
    "tether_catalog_counts",
    "tether_snapshots",
)


async def build(store: Store, events: int) -> str:
    """A session of about `events` events in closed turns (a fork point must close every
    call), written as a run writes them."""
    return (await write_turns(store, events)).session_id


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return time.perf_counter() - t0


class Backend:
    """How to open a store on the data, how big it is, and the bare copy and read."""

    name = ""

    async def open(self) -> Store:
        raise NotImplementedError

    async def size(self) -> int:
        raise NotImplementedError

    async def settle(self) -> None:
        """What the store does by itself a while after a bulk write (nothing, here)."""

    async def bare_copy(self, parent: str) -> float:
        raise NotImplementedError

    def bare_read(self, parent: str) -> float | None:
        return None


class SQLiteBackend(Backend):
    name = "SQLite"

    def __init__(self, path: str) -> None:
        self.path = path

    async def open(self) -> Store:
        return SQLiteStore(self.path)

    async def size(self) -> int:
        return await asyncio.to_thread(self._checkpointed_size)

    def _checkpointed_size(self) -> int:
        """The bytes of the file's pages in use (a fork may fill pages freed before, which
        the file's size would not show)."""
        conn = sqlite3.connect(self.path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        pages, free, size = (
            conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("page_count", "freelist_count", "page_size")
        )
        conn.close()
        return int((pages - free) * size)

    async def bare_copy(self, parent: str) -> float:
        conn = sqlite3.connect(self.path, isolation_level=None)
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO events (session_id, seq, id, time, thread, type, data) "
            "SELECT 'copy-' || session_id, seq, 'copy-' || id, time, thread, type, data "
            "FROM events WHERE session_id = ?",
            (parent,),
        )
        conn.execute("ROLLBACK")  # timed up to the copy: a copying fork writes at least this
        elapsed = time.perf_counter() - t0
        conn.close()
        return elapsed

    def bare_read(self, parent: str) -> float:
        conn = sqlite3.connect(self.path)
        t0 = time.perf_counter()
        rows = conn.execute(
            "SELECT seq, type, data FROM events WHERE session_id = ? ORDER BY seq", (parent,)
        ).fetchall()
        [json.loads(r[2]) for r in rows]
        elapsed = time.perf_counter() - t0
        conn.close()
        return elapsed


class PostgresBackend(Backend):
    name = "PostgreSQL"

    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self) -> Store:
        from tether.store.postgres import PostgresStore

        return PostgresStore(self.url)

    async def size(self) -> int:
        from psycopg import AsyncConnection

        async with await AsyncConnection.connect(self.url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT sum(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) t",
                (list(PG_TABLES),),
            )
            row = await cur.fetchone()
        return int(row[0]) if row is not None else 0

    async def settle(self) -> None:
        # Autovacuum analyzes and vacuums a table after a bulk write: a session that has
        # been around is forked after that, not while 100 MB just written is being vacuumed.
        from psycopg import AsyncConnection

        async with await AsyncConnection.connect(self.url, autocommit=True) as conn:
            await conn.execute("VACUUM ANALYZE")

    async def bare_copy(self, parent: str) -> float:
        from psycopg import AsyncConnection

        async with await AsyncConnection.connect(self.url) as conn:
            t0 = time.perf_counter()
            await conn.execute(
                "INSERT INTO tether_events SELECT 'copy-' || session_id, seq, 'copy-' || id, "
                "time, thread, type, data FROM tether_events WHERE session_id = %s",
                (parent,),
            )
            elapsed = time.perf_counter() - t0
            await conn.rollback()
        return elapsed


async def measure(backend: Backend, sizes: tuple[int, ...]) -> dict[int, dict[str, float]]:
    """Every figure of each size. The sessions of every size share the store, and their
    forks are timed in turns, so a busy machine weighs on each size alike."""
    store = await backend.open()
    parents = {n: await build(store, n) for n in sizes}
    await backend.settle()
    fork_s: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(FORKS):
        for n in sizes:
            fork_s[n].append(await timed(lambda: fork(store, parents[n])))  # noqa: B023
    results: dict[int, dict[str, float]] = {}
    for n in sizes:
        before = await backend.size()
        children = [(await fork(store, parents[n])).session_id for _ in range(BYTES_FORKS)]
        results[n] = {
            "events": float(await store.last_seq(parents[n])),
            "fork": statistics.median(fork_s[n]),
            "fork_min": min(fork_s[n]),
            "bytes": (await backend.size() - before) / BYTES_FORKS,
        }
        for who, sid in (("parent", parents[n]), ("child", children[-1])):
            takes, reads = [], []
            for _ in range(3 if n < 10_000 else 1):  # a long read takes seconds
                fresh = await backend.open()  # nothing of the session kept or decoded yet
                takes.append(await timed(lambda: snapshots.start(fresh, sid, kept=False)))  # noqa: B023
                await fresh.close()
                fresh = await backend.open()
                reads.append(await timed(lambda: fresh.read(sid)))  # noqa: B023
                await fresh.close()
            results[n][f"{who}_start"] = statistics.median(takes)
            results[n][f"{who}_read"] = statistics.median(reads)
        copies = [await backend.bare_copy(parents[n]) for _ in range(3)]
        results[n]["bare_copy"] = statistics.median(copies)
        bare = backend.bare_read(parents[n])
        results[n]["bare_read"] = -1.0 if bare is None else bare
    await store.close()
    return results


def report(name: str, results: dict[int, dict[str, float]]) -> None:
    sizes = sorted(results)
    small = results[sizes[0]]
    print(f"\nfork at the end of a session ({name}; {FORKS} forks of each, in turns)")
    print(f"  {'':38}" + "".join(f"{int(results[n]['events']):>14,} ev" for n in sizes))

    def line(label: str, key: str, scale: float, unit: str) -> None:
        cells = "".join(
            f"{results[n][key] * scale:>14,.1f} {unit}" if results[n][key] >= 0 else f"{'-':>17}"
            for n in sizes
        )
        print(f"  {label:<38}{cells}")

    line("fork (session.fork.fork), median", "fork", 1e3, "ms")
    line("fork, fastest", "fork_min", 1e3, "ms")
    line("bytes the store grew per fork", "bytes", 1 / 1024, "KiB")
    line("bare: copy the parent's rows (no fork)", "bare_copy", 1e3, "ms")
    line("take-up, parent (snapshots.start)", "parent_start", 1e3, "ms")
    line("take-up, child", "child_start", 1e3, "ms")
    line("full read, parent (fresh store)", "parent_read", 1e3, "ms")
    line("full read, child (fresh store)", "child_read", 1e3, "ms")
    line("bare: SELECT + json.loads, parent", "bare_read", 1e3, "ms")
    large = results[sizes[-1]]
    ratio = large["fork"] / small["fork"]
    verdict = "within" if ratio <= 2 else "NOT within"
    fastest = large["fork_min"] / small["fork_min"]
    print(
        f"  fork {sizes[-1]:,} / fork {sizes[0]:,}: {ratio:.2f}x median, {fastest:.2f}x fastest "
        f"({verdict} the 2x target)"
    )
    grew = large["bytes"] / small["bytes"] if small["bytes"] > 0 else float("nan")
    print(f"  bytes per fork {sizes[-1]:,} / {sizes[0]:,}: {grew:.2f}x")


async def main(sizes: tuple[int, ...]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        report("SQLite", await measure(SQLiteBackend(f"{directory}/fork.db"), sizes))
    url = os.environ.get("TETHER_TEST_POSTGRES_URL")
    if not url:
        print("\nPostgreSQL: skipped (set TETHER_TEST_POSTGRES_URL)")
        return
    async with scratch_schema(url) as scoped:
        report("PostgreSQL", await measure(PostgresBackend(scoped), sizes))


@contextlib.asynccontextmanager
async def scratch_schema(url: str) -> AsyncIterator[str]:
    """A schema of its own, dropped after, as the URL whose connections use it."""
    from urllib.parse import urlencode, urlsplit, urlunsplit

    from psycopg import AsyncConnection

    schema = f"bench_fork_{os.getpid()}_{time.monotonic_ns()}"
    async with await AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"CREATE SCHEMA {schema}")
    parts = urlsplit(url)
    options = urlencode({"options": f"-csearch_path={schema}"})
    try:
        yield urlunsplit(parts._replace(query="&".join(p for p in (parts.query, options) if p)))
    finally:
        async with await AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    asyncio.run(main(tuple(int(a) for a in sys.argv[1:]) or SIZES))
