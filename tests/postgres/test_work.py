"""Claiming runnable sessions on PostgreSQL: without contention, by the database's clock,
and parking a session that keeps killing its workers."""

from __future__ import annotations

import asyncio
import time

import pytest

from tether.events import ModelResponded, SessionCreated, ToolStarted, UserMessage
from tether.fold import Folder
from tether.messages import Message, ToolCall, user
from tether.runtime.claims import take_work
from tether.session.log import SessionLog
from tether.store.postgres import PostgresStore


async def test_workers_claiming_at_once_get_disjoint_sessions(pg_url: str) -> None:
    stores = [PostgresStore(pg_url) for _ in range(4)]
    for i in range(40):
        await stores[0].mark_runnable(f"s{i:02}")
    batches = await asyncio.gather(
        *(s.claim_runnable(f"w{n}", ttl=30, limit=15, alone=False) for n, s in enumerate(stores))
    )
    taken = [c.lease.session_id for batch in batches for c in batch]
    assert sorted(taken) == [f"s{i:02}" for i in range(40)], "a session was claimed twice or lost"
    assert all(c.claims == 1 and c.lease.owner == f"w{n}" for n, b in enumerate(batches) for c in b)
    assert await stores[0].runnable() == []  # all held now
    for s in stores:
        await s.close()


async def test_lease_expiry_follows_the_database_clock_not_the_workers(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(pg_url)
    db_now = await store.now()
    # This worker's clock is an hour fast: if the store trusted it, every lease would be
    # long expired (or, the other way round, never expire).
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    lease = await store.claim("s1", "worker-a", ttl=30)
    assert db_now + 29 < lease.expires < db_now + 31
    assert await store.current_lease("s1") == lease
    short = await store.claim("s2", "worker-a", ttl=0.2)
    assert await store.current_lease("s2") == short
    await asyncio.sleep(0.4)
    assert await store.current_lease("s2") is None
    await store.close()


async def _session_with_a_started_call(store: PostgresStore, sid: str) -> None:
    log = SessionLog(store, sid)
    answer = Message("assistant", (ToolCall("c1", "write", {}),))
    await log.append(SessionCreated(model="scripted", system=None, tools={}))
    await log.append(UserMessage(user("go")), ModelResponded(answer, stop="tool_calls"))
    await log.append(ToolStarted("c1", "write"))
    await store.mark_runnable(sid)


async def test_a_session_that_keeps_killing_its_workers_is_parked_failed(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url)
    await _session_with_a_started_call(store, "poison")
    await store.mark_runnable("other")
    # Three workers take it, run its call again and die of it (their leases just run out).
    for attempt in range(1, 4):
        await asyncio.sleep(0.15)
        got = await take_work(store, f"w{attempt}", ttl=0.1, limit=1, alone=True, max_claims=3)
        assert [c.lease.session_id for c in got] == ["poison"], attempt
        assert got[0].claims == attempt
        log = await SessionLog.load(store, "poison")
        log.lease = got[0].lease
        await log.append(ToolStarted("c1", "write"))
    await asyncio.sleep(0.15)
    got = await take_work(store, "w4", ttl=30, limit=5, alone=True, max_claims=3)
    assert [c.lease.session_id for c in got] == ["other"], "the other session was held back"
    view = Folder().apply_all(await store.read("poison")).view()
    assert view.state == "failed" and view.stop_reason == "error"
    assert view.stop_detail is not None and view.stop_detail.startswith("poisoned")
    assert "write (c1)" in view.stop_detail, "the reason does not name the call"
    events = await store.read("poison")
    finished = [e.payload for e in events if e.type == "tool.finished"]
    assert [(f.call_id, f.outcome) for f in finished] == [("c1", "unknown_effect")]  # type: ignore[union-attr]
    assert [w.session_id for w in await store.runnable()] == []
    assert await store.current_lease("poison") is None  # parked, and released
    await store.close()


async def test_a_suspect_goes_only_to_a_claim_that_may_take_one(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.mark_runnable("suspect")
    await store.claim_runnable("w1", ttl=0.1, limit=1)  # w1 dies holding it
    await asyncio.sleep(0.2)
    for i in range(3):
        await store.mark_runnable(f"fresh{i}")
    # Once or twice is a takeover: a busy worker takes it, first.
    for claims in (2, 3):
        [taken] = await store.claim_runnable("w2", ttl=0.1, limit=1, alone=False)
        assert (taken.lease.session_id, taken.claims) == ("suspect", claims)
        await asyncio.sleep(0.2)  # and dies holding it too, unforgiven
    busy = await store.claim_runnable("w2", ttl=30, limit=10, alone=False)
    assert sorted(c.lease.session_id for c in busy) == ["fresh0", "fresh1", "fresh2"]
    free = await store.claim_runnable("w3", ttl=30, limit=10, alone=True)
    assert [(c.lease.session_id, c.claims) for c in free] == [("suspect", 4)]
    await store.close()


async def test_a_version_1_database_migrates_and_its_marks_can_be_deferred(pg_url: str) -> None:
    from psycopg import AsyncConnection

    from tether.store.pg_schema import _BOOKKEEPING, MIGRATIONS

    # A database as version 1 left it: marks and a lease whose workers died holding it 3 times.
    async with await AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute(_BOOKKEEPING)
        await conn.execute(MIGRATIONS[0].sql.encode())
        await conn.execute("INSERT INTO tether_schema (version, description) VALUES (1, 'v1')")
        await conn.execute("SELECT tether_mark('old'), tether_mark('other')")
        await conn.execute("INSERT INTO tether_leases VALUES ('other', 'w0', 4, 0, 3)")
    store = PostgresStore(pg_url)  # migrates to the current version on first use
    assert [w.session_id for w in await store.runnable()] == ["old", "other"]
    await store.defer("old", 60, "backoff")
    queued = await store.queued("old")
    assert queued is not None and queued.reason == "backoff"
    assert await store.claim_runnable("w1", ttl=30, limit=5, alone=False) == []
    [suspect] = await store.claim_runnable("w1", ttl=30, limit=5, alone=True)
    assert (suspect.lease.session_id, suspect.lease.generation, suspect.claims) == ("other", 5, 4)
    async with await AsyncConnection.connect(pg_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT max(version) FROM tether_schema")
        row = await cur.fetchone()
    assert row is not None and row[0] == MIGRATIONS[-1].version == 5
    await store.close()


async def test_a_parked_session_is_not_claimed_and_a_message_does_not_wake_it_early(
    pg_url: str,
) -> None:
    stores = [PostgresStore(pg_url) for _ in range(3)]
    await stores[0].mark_runnable("parked")
    [seen] = await stores[0].runnable()
    await stores[0].defer("parked", 0.5, "parked")
    await stores[1].mark_runnable("parked")  # a message for it: the token moves, the time stays
    for s in stores:
        assert await s.claim_runnable("w", ttl=30, limit=5, alone=True) == []
    await asyncio.sleep(0.7)
    got = await asyncio.gather(
        *(s.claim_runnable(f"w{n}", ttl=30, limit=5, alone=True) for n, s in enumerate(stores))
    )
    taken = [c for batch in got for c in batch]
    assert [(c.lease.session_id, c.wakeup.token > seen.token, c.claims) for c in taken] == [
        ("parked", True, 1)
    ]
    for s in stores:
        await s.close()
