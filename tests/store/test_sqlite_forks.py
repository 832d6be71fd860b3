"""Forks in the SQLite store beyond the conformance suite: a long read across the fork point
(its first rows on the loop's thread, the rest on the reader's), the decoded-event cache
never handing a parent's event to a child's reader, a fork read and continued by another
store on the file, the parent filter served by its index, and a format-5 file migrated."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

from tether.events import Event, SessionForked
from tether.store import SQLiteStore, catalog
from tether.store.base import ForkLink
from tether.store.catalog import CatalogQuery
from tether.testing.fork_conformance import turn_events

TIME = "2026-01-01T00:00:00.000000Z"


async def _parent(store: SQLiteStore, n: int) -> list[Event]:
    events = turn_events("p", 1, n)
    await store.append("p", events, 0)
    return events


async def _fork(store: SQLiteStore, child: str, parent: str, at: int, own: int) -> list[Event]:
    prefix = await store.read(parent, 0, at)
    forked = SessionForked(parent, at, prefix[-1].id, "digest", model="m")
    events = [
        Event(child, at + 1, f"{child}-1", TIME, forked),
        *turn_events(child, at + 2, own - 1),
    ]
    whole = [dataclasses.replace(e, session_id=child) for e in prefix] + events
    await store.fork(child, ForkLink(parent, at), events, row=catalog.row_for_log(whole))
    return whole


async def test_a_long_read_crosses_the_fork_point_on_both_threads(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        await _parent(store, 300)
        whole = await _fork(store, "c", "p", 200, own=150)
        # The parent's events decoded and kept first: the child's reader must get its own.
        parent = await store.read("p")
        assert parent[0].session_id == "p"
        for after, limit in ((0, None), (10, None), (150, 100), (190, 64), (199, 70), (260, None)):
            got = await store.read("c", after, limit)
            end = None if limit is None else after + limit
            assert got == whole[after:end], (after, limit)
            assert {e.session_id for e in got} == {"c"}
        assert (await store.read("p"))[0].session_id == "p"
    finally:
        await store.close()


async def test_another_store_on_the_file_reads_and_continues_a_fork(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first = SQLiteStore(path)
    try:
        await _parent(first, 20)
        whole = await _fork(first, "c", "p", 12, own=3)
        grandchild = await _fork(first, "g", "c", 14, own=2)
    finally:
        await first.close()
    second = SQLiteStore(path)
    try:
        assert await second.read("g") == grandchild
        assert await second.read("c", 5, 9) == whole[5:14]
        assert await second.fork_link("g") == ForkLink("c", 14)
        assert await second.last_seq("c") == 15
        more = turn_events("c", 16, 2, "more")
        await second.append("c", more, 15)
        assert await second.read("c") == whole + more
        assert await second.catalog_row("c") == catalog.row_for_log(whole + more)
    finally:
        await second.close()


async def test_a_sessions_forks_are_found_by_the_parent_index(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        await _parent(store, 6)
        await _fork(store, "c", "p", 3, own=2)
        assert [r.session_id for r in await store.catalog(CatalogQuery(parent="p"))] == ["c"]
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    for tenant in ("", None):
        where = "c.parent = 'p' AND c.parent <> ''" + ("" if tenant is None else " AND tenant=''")
        plan = conn.execute(
            f"EXPLAIN QUERY PLAN SELECT * FROM catalog c WHERE {where} ORDER BY updated DESC"
        ).fetchall()
        assert "catalog_parent" in str(plan), plan
    conn.close()


async def test_a_format_5_file_is_migrated_and_takes_forks(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    store = SQLiteStore(path)
    parent = await _parent(store, 5)
    await store.close()
    conn = sqlite3.connect(path)  # as format 5 left a file: no forks table, no parent index
    conn.executescript(
        "DROP TABLE forks; DROP INDEX catalog_parent; "
        "UPDATE tether_meta SET value = '5' WHERE key = 'format';"
    )
    conn.close()
    store = SQLiteStore(path)
    try:
        assert await store.read("p") == parent
        whole = await _fork(store, "c", "p", 4, own=2)
        assert await store.read("c") == whole
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM tether_meta WHERE key = 'format'").fetchone() == ("6",)
    conn.close()
