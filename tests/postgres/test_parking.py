"""Parking on PostgreSQL: the worker claims work there with SKIP LOCKED, so a parked
session's hold must keep those claims off it too, and a cancel must still close it at once."""

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


async def test_a_parked_sessions_hold_counts_no_claim(pg_store: PostgresStore) -> None:
    # A hold that counted as a claim would make the session, once the hold ran out, a
    # suspect of killing its worker: handed out only to an idle worker, one at a time.
    await pg_store.mark_runnable("s")
    lease = await pg_store.hold("s", "parked:w", 30.0)
    assert lease.owner == "parked:w" and await pg_store.claims("s") == 0
    held = await pg_store.current_lease("s")
    assert held is not None and held.owner == "parked:w"
    assert await pg_store.runnable() == []  # no worker takes it while it is held
    assert await take_work(pg_store, "w2", ttl=5.0, limit=5, alone=True) == []
