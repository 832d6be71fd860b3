"""The credentials table's checks (`tests/store/test_credentials.py`) on a real PostgreSQL
schema of their own, and the migration of the unscoped table of before there."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from store.test_credentials import CHECKS, SERVER, check_the_unscoped_rows_of_before


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
async def test_on_postgres(check: Callable[[str], Awaitable[None]], pg_url: str) -> None:
    await check(pg_url)


async def test_the_unscoped_table_of_before_becomes_the_default_tenants(pg_url: str) -> None:
    from psycopg import AsyncConnection

    from tether.store.postgres import parse_url

    async with await AsyncConnection.connect(parse_url(pg_url)[0], autocommit=True) as conn:
        await conn.execute(
            "CREATE TABLE tether_credentials "
            "(key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL)"
        )
        await conn.execute(
            "INSERT INTO tether_credentials VALUES (%s, '{\"old\": 1}', 0)", (SERVER,)
        )
    await check_the_unscoped_rows_of_before(pg_url)
