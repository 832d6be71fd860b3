"""A fresh, empty PostgreSQL schema per test, on the server `.ci/postgres.sh` starts.

Tests here need `TETHER_TEST_POSTGRES_URL`; without it they skip, saying how to get one,
except under CI, where a missing server is a failure rather than a silent skip.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from urllib.parse import urlencode, urlsplit, urlunsplit

import pytest

BASE_URL = os.environ.get("TETHER_TEST_POSTGRES_URL", "")
HOW = 'start one on loopback with: eval "$(bash .ci/postgres.sh)"'


def with_schema(url: str, schema: str) -> str:
    """The URL with its connections' search_path set to `schema`: tables made there."""
    parts = urlsplit(url)
    query = "&".join(
        p for p in (parts.query, urlencode({"options": f"-csearch_path={schema}"})) if p
    )
    return urlunsplit(parts._replace(query=query))


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    if not BASE_URL:
        if os.environ.get("CI"):
            pytest.fail(f"TETHER_TEST_POSTGRES_URL is not set in CI: {HOW}")
        pytest.skip(f"TETHER_TEST_POSTGRES_URL is not set: {HOW}")
    from psycopg import AsyncConnection

    schema = f"test_{secrets.token_hex(6)}"
    async with await AsyncConnection.connect(BASE_URL, autocommit=True) as conn:
        await conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield with_schema(BASE_URL, schema)
    finally:
        async with await AsyncConnection.connect(BASE_URL, autocommit=True) as conn:
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")
