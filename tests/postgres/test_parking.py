"""Parking on PostgreSQL: the worker claims work there with SKIP LOCKED, so a parked
session's deferral must keep those claims off it too, and a cancel must still close it at once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from runtime import test_parking as parking  # the module, so pytest collects nothing twice
from tether.runtime.claims import take_work
from tether.store.postgres import PostgresStore


@pytest.fixture
async def pg_store(pg_url: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(pg_url, pool_size=8)
    yield store
    await store.close()


async def test_a_parked_session_runs_again_when_the_wait_is_over_on_postgres(
    pg_store: PostgresStore,
) -> None:
    await parking.test_a_parked_session_runs_again_when_the_wait_is_over(pg_store)


async def test_a_parked_session_frees_its_slot_on_postgres(pg_store: PostgresStore) -> None:
    await parking.test_a_parked_session_frees_its_slot_for_other_work(pg_store)


async def test_a_parked_session_is_deferred_on_the_queue_and_counts_no_claim(
    pg_store: PostgresStore,
) -> None:
    # Parking takes no lease: a lease that counted as a claim would make the session, once it
    # ran out, a suspect of killing its worker, handed out only by itself.
    await pg_store.mark_runnable("s")
    await pg_store.defer("s", 30.0, "parked")
    assert await pg_store.current_lease("s") is None and await pg_store.claims("s") == 0
    queued = await pg_store.queued("s")
    assert queued is not None and queued.reason == "parked"
    assert await pg_store.runnable() == []  # no worker takes it while it is deferred
    assert await take_work(pg_store, "w2", ttl=5.0, limit=5, alone=True) == []
    await pg_store.defer("s", 0.0, "parked")  # the wait is over
    [taken] = await take_work(pg_store, "w2", ttl=5.0, limit=5, alone=True)
    assert taken.lease.session_id == "s" and taken.claims == 1
