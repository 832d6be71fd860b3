"""`?synchronous_commit=` on a PostgreSQL URL reaches every connection the store opens."""

from __future__ import annotations

import pytest

from tether.store.postgres import PostgresStore


@pytest.mark.parametrize("value", ["off", "local", "remote_write", "on"])
async def test_synchronous_commit_reaches_the_connection(pg_url: str, value: str) -> None:
    store = PostgresStore(f"{pg_url}&synchronous_commit={value}")
    try:
        async with store.pool.connection() as conn:
            row = await (await conn.execute("SHOW synchronous_commit")).fetchone()
            search_path = await (await conn.execute("SHOW search_path")).fetchone()
        assert row is not None and row[0] == value
        # The URL's own options (the test schema) still hold beside it.
        assert search_path is not None and search_path[0].startswith("test_")
        await store.ready()
    finally:
        await store.close()


async def test_without_the_parameter_the_server_default_holds(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        async with store.pool.connection() as conn:
            row = await (await conn.execute("SHOW synchronous_commit")).fetchone()
        assert row is not None and row[0] == "on"
    finally:
        await store.close()
