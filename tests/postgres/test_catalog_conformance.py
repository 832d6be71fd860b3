"""The PostgreSQL store passes the catalog conformance suite from tether.testing."""

from __future__ import annotations

import pytest

from tether.store.postgres import PostgresStore
from tether.testing.catalog_conformance import CATALOG_CHECKS


@pytest.mark.parametrize("check", CATALOG_CHECKS, ids=lambda c: c.__name__)
async def test_catalog_conformance(check, pg_url: str) -> None:  # type: ignore[no-untyped-def]
    store = PostgresStore(pg_url)
    try:
        await check(store)
    finally:
        await store.close()
