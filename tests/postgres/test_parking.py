"""Parking on PostgreSQL: the worker claims work there with SKIP LOCKED, so a parked
session's hold must keep those claims off it too, and a cancel must still close it at once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from runtime import test_parking as parking  # the module, so pytest collects nothing twice
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
