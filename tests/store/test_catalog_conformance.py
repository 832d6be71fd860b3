"""Both embedded stores pass the catalog conformance suite from tether.testing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.store import MemoryStore, SQLiteStore, Store
from tether.testing.catalog_conformance import CATALOG_CHECKS


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("check", CATALOG_CHECKS, ids=lambda c: c.__name__)
async def test_catalog_conformance(backend: str, check, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store: Store = MemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "store.db")
    try:
        await check(store)
    finally:
        await store.close()
