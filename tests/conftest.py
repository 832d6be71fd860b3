"""Fixtures shared across the suite. `store`: each test that takes it runs on both embedded
stores, a fresh one each time (PostgreSQL has its own `pg_url` in tests/postgres)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.store import MemoryStore, SQLiteStore, Store


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    made: Store = (
        MemoryStore() if request.param == "memory" else SQLiteStore(str(tmp_path / "tether.db"))
    )
    yield made
    await made.close()
