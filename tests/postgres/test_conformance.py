"""The PostgreSQL store passes the same conformance suite as memory and SQLite."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from tether.store.base import Store
from tether.store.postgres import PostgresStore
from tether.testing import STORE_CHECKS


@pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda c: c.__name__)
async def test_postgres_store_conformance(
    pg_url: str, check: Callable[[Store], Awaitable[None]]
) -> None:
    store = PostgresStore(pg_url)
    try:
        await check(store)
    finally:
        await store.close()
