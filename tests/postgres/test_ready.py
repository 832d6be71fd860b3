"""PostgreSQL readiness: `ready` writes, so a database that takes no writes is not ready."""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import pytest

from tether.errors import StoreUnavailable
from tether.store.postgres import PostgresStore


def _read_only(url: str) -> str:
    """The URL with its sessions' transactions read-only by default (as on a standby)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["options"] = (query.get("options", "") + " -cdefault_transaction_read_only=on").strip()
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


async def test_a_store_taking_writes_is_ready(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        await store.ready()
        await store.ready()
    finally:
        await store.close()


async def test_a_read_only_database_is_not_ready(pg_url: str) -> None:
    migrated = PostgresStore(pg_url)
    await migrated.ready()  # brings the schema up first, on a connection that may write
    await migrated.close()
    store = PostgresStore(_read_only(pg_url), auto_migrate=False)
    try:
        assert await store.sessions() == []  # it reads
        with pytest.raises(StoreUnavailable, match="read-only"):
            await store.ready()
    finally:
        await store.close()


async def test_an_unreachable_database_is_not_ready(pg_url: str) -> None:
    del pg_url  # only so the test skips with the others when no server is configured
    store = PostgresStore("postgresql://nobody:secret@127.0.0.1:1/none")
    try:
        with pytest.raises(StoreUnavailable, match="cannot connect") as caught:
            await store.ready()
        assert "secret" not in str(caught.value)
    finally:
        await store.close()
