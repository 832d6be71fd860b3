"""The PostgreSQL store's session catalog answers every query as the reference
(`catalog.page_of`, `counts_of`, `experiments_of`) does over the same rows, writes each row
in the append's transaction, folds the log itself for an append without one, admits under
`max_running` before writing, and keeps fold snapshots."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random

import pytest
from psycopg import AsyncConnection
from tests.postgres.catalog_support import TENANTS, at_seq, crafted_row, session_log

from tether.errors import QuotaExceeded, UsageError
from tether.store import catalog
from tether.store.base import Snapshot
from tether.store.catalog import Admit, CatalogQuery, CatalogRow
from tether.store.postgres import PostgresStore
from tether.testing.store_conformance import _sample, make_events

QUERIES = [
    CatalogQuery(),
    CatalogQuery(states=frozenset({"running", "idle"})),
    CatalogQuery(stop_reasons=frozenset({""})),
    CatalogQuery(stop_reasons=frozenset({"end_turn"}), models=frozenset({"m2"})),
    CatalogQuery(id_prefix="r01"),
    CatalogQuery(text="report"),
    CatalogQuery(text="bug_4"),
    CatalogQuery(text="50%_"),
    CatalogQuery(created_after="2026-01-01T00:02:00.000000Z"),
    CatalogQuery(created_before="2026-01-01T00:03:00.000000Z"),
    CatalogQuery(metadata=(("env", "prod"),)),
    CatalogQuery(metadata=(("env", "50%_off"), ("team", "a"))),
    CatalogQuery(metadata=(("nothing", "x"),)),
    CatalogQuery(experiment="exp1"),
    CatalogQuery(experiment=""),
]


async def filled(url: str, count: int = 90) -> tuple[PostgresStore, list[CatalogRow]]:
    store = PostgresStore(url)
    rng = random.Random(7)
    rows = [crafted_row(i, rng) for i in range(count)]
    for row in rows:
        await store.append(row.session_id, make_events(row.session_id, 1, _sample(1)), 0, row=row)
    return store, rows


async def test_every_page_of_every_query_is_the_references(pg_url: str) -> None:
    store, rows = await filled(pg_url)
    checked = 0
    for base, tenant, sort in itertools.product(QUERIES, [None, *TENANTS], catalog.SORTS):
        query = CatalogQuery(**{**_fields(base), "tenant": tenant, "sort": sort, "limit": 7})
        expected = catalog.page_of(rows, query)
        while True:
            got = await store.catalog(query)
            assert got == expected, (query, [r.session_id for r in got])
            if not got:
                break
            checked += len(got)
            query = CatalogQuery(**{**_fields(query), "after": catalog.sort_key(got[-1], sort)})
            expected = catalog.page_of(rows, query)
        assert await store.catalog_counts(query) == catalog.counts_of(rows, query)
    assert checked > 1000  # the queries let rows through, not only empty pages
    for tenant in (None, *TENANTS):
        assert await store.catalog_experiments(tenant) == catalog.experiments_of(rows, tenant, 100)
    await store.close()


async def test_counts_follow_sessions_that_change_state_and_tenant(pg_url: str) -> None:
    store, rows = await filled(pg_url, 40)
    rng = random.Random(9)
    for round_ in range(3):
        for i, row in enumerate(rows):
            moved = dataclasses.replace(
                row,
                state=rng.choice(["idle", "running", "completed", "canceled"]),
                tenant=rng.choice(TENANTS) if round_ == 1 and i % 7 == 0 else row.tenant,
                last_seq=row.last_seq + 1,
            )
            batch = make_events(row.session_id, moved.last_seq, _sample(2)[1:])
            await store.append(row.session_id, batch, row.last_seq, row=moved)
            rows[i] = moved
        for tenant in (None, *TENANTS):
            query = CatalogQuery(tenant=tenant)
            assert await store.catalog_counts(query) == catalog.counts_of(rows, query)
    await store.close()


async def test_concurrent_rebuilds_of_one_row_count_it_once(pg_url: str) -> None:
    store, rows = await filled(f"{pg_url}&pool_size=8", 8)
    for i, row in enumerate(rows):  # each row written again by 8 writers at once
        moved = dataclasses.replace(row, state="canceled" if i % 2 else "running")
        assert sum(await asyncio.gather(*(store.put_catalog_row(moved) for _ in range(8)))) == 8
        rows[i] = moved
    for tenant in (None, *TENANTS):
        query = CatalogQuery(tenant=tenant)
        assert await store.catalog_counts(query) == catalog.counts_of(rows, query)
    await store.close()


def _fields(query: CatalogQuery) -> dict[str, object]:
    return {name: getattr(query, name) for name in query.__slots__}


async def test_sessions_and_rows_are_answered_from_the_catalog(pg_url: str) -> None:
    store, rows = await filled(pg_url, 20)
    newest = catalog.page_of(rows, CatalogQuery(limit=5))
    listed = await store.sessions(5)
    assert [(s.session_id, s.last_seq, s.updated) for s in listed] == [
        (r.session_id, r.last_seq, r.updated) for r in newest
    ]
    assert await store.catalog_row("r003") == rows[3]
    assert await store.catalog_row("nothing") is None
    assert await store.session_ids() == sorted(r.session_id for r in rows)
    assert await store.session_ids("r010", 3) == ["r011", "r012", "r013"]
    assert await store.count_sessions() == 20
    await store.close()


async def test_an_append_without_a_row_has_the_store_fold_the_whole_log(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    events = session_log("s1", random.Random(3))
    await store.append("s1", events[:1], 0)
    await store.append("s1", events[1:], 1)
    assert await store.catalog_row("s1") == catalog.row_for_log(await store.read("s1"))
    await store.close()


async def test_a_row_that_does_not_describe_the_batch_is_refused_and_nothing_written(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url)
    row = crafted_row(0, random.Random(1))
    with pytest.raises(UsageError, match="not this batch's last seq 2"):
        await store.append("r000", make_events("r000", 1, _sample(2)), 0, row=row)
    assert await store.last_seq("r000") == 0 and await store.catalog_row("r000") is None
    await store.close()


async def test_text_postgresql_cannot_hold_is_stored_replaced_and_the_append_stands(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url)
    row = crafted_row(0, random.Random(1))
    odd = at_seq(row, 1).__class__(**{**_row_fields(row), "task": "a\x00b\ud800c"})
    await store.append("r000", make_events("r000", 1, _sample(1)), 0, row=odd)
    stored = await store.catalog_row("r000")
    assert stored is not None and stored.task == "a\ufffdb\ufffdc"
    assert [r.session_id for r in await store.catalog(CatalogQuery(text="b\ufffdc"))] == ["r000"]
    await store.close()


def _row_fields(row: CatalogRow) -> dict[str, object]:
    return {name: getattr(row, name) for name in row.__slots__}


async def test_put_catalog_row_writes_only_while_the_log_ends_at_its_seq(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    events = session_log("s1", random.Random(5))
    await store.append("s1", events, 0)
    current = catalog.row_for_log(events)
    stale = catalog.row_for_log(events[:1])
    assert not await store.put_catalog_row(stale)
    assert await store.catalog_row("s1") == current
    assert await store.put_catalog_row(current)
    assert not await store.put_catalog_row(
        at_seq(current, 0).__class__(**{**_row_fields(current), "session_id": "nobody"})
    )
    await store.close()


async def test_a_refused_admission_writes_nothing(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    rng = random.Random(2)
    admit = Admit("acme", 2)
    for i in range(3):
        row = CatalogRow(
            **{**_row_fields(crafted_row(i, rng)), "tenant": "acme", "state": "running"}
        )
        first = make_events(row.session_id, 1, _sample(1))
        if i < 2:
            await store.append(row.session_id, first, 0, row=row, admit=admit)
            continue
        with pytest.raises(QuotaExceeded, match="tenant acme has 2 sessions running") as refused:
            await store.append(row.session_id, first, 0, row=row, admit=admit)
        assert refused.value.retry_after == catalog.RUNNING_RETRY_AFTER
        assert await store.last_seq(row.session_id) == 0
        assert await store.catalog_row(row.session_id) is None
    # A running session's own next batch is never counted against it.
    again = CatalogRow(
        **{
            **_row_fields(crafted_row(0, rng)),
            "session_id": "r000",
            "tenant": "acme",
            "state": "running",
            "last_seq": 2,
        }
    )
    await store.append("r000", make_events("r000", 2, _sample(2)[1:]), 1, row=again, admit=admit)
    # Another tenant's sessions are not counted either.
    other = CatalogRow(
        **{**_row_fields(again), "session_id": "o1", "tenant": "globex", "last_seq": 1}
    )
    await store.append(
        "o1", make_events("o1", 1, _sample(1)), 0, row=other, admit=Admit("globex", 1)
    )
    await store.close()


async def test_the_running_states_of_the_schema_are_catalog_running(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.count_sessions()  # migrated
    async with await AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute(
            "SELECT pg_get_expr(indpred, indrelid) FROM pg_index "
            "WHERE indexrelid = 'tether_catalog_running'::regclass"
        )
        row = await cur.fetchone()
    assert row is not None
    assert set(s for s in catalog.RESTING) == {
        part.split("'")[1] for part in str(row[0]).split(",")
    }
    await store.close()


async def test_a_snapshot_is_kept_unless_a_later_one_is(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    assert await store.get_snapshot("s1") is None
    await store.put_snapshot(Snapshot("s1", 5, "v1", b"\x00five"))
    await store.put_snapshot(Snapshot("s1", 3, "v1", b"three"))
    assert await store.get_snapshot("s1") == Snapshot("s1", 5, "v1", b"\x00five")
    await store.put_snapshot(Snapshot("s1", 8, "v2", b"eight"))
    assert await store.get_snapshot("s1") == Snapshot("s1", 8, "v2", b"eight")
    await store.close()


async def test_text_search_has_its_trigram_index(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.count_sessions()
    async with await AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute("SELECT to_regclass('tether_catalog_text_trgm') IS NOT NULL")
        row = await cur.fetchone()
    assert row == (True,)
    await store.close()
