"""Both embedded stores pass the one conformance suite from tether.testing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.store import MemoryStore, SQLiteStore, Store
from tether.testing import STORE_CHECKS


@pytest.fixture(params=["memory", "sqlite"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    counter = iter(range(10_000))

    def make() -> Store:
        if request.param == "memory":
            return MemoryStore()
        return SQLiteStore(str(tmp_path / f"store-{next(counter)}.db"))

    return make


@pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda c: c.__name__)
async def test_store_conformance(store_factory, check) -> None:  # type: ignore[no-untyped-def]
    store = store_factory()
    try:
        await check(store)
    finally:
        await store.close()
