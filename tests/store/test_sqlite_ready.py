"""SQLite readiness: a store whose file was deleted, replaced or made read-only under it still
appends (into a file nobody will open again), so `ready` looks at the file as well."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.errors import StoreError, StoreUnavailable
from tether.events import UserMessage
from tether.messages import user
from tether.store import SQLiteStore
from tether.testing.store_conformance import make_events


async def _store(path: Path) -> SQLiteStore:
    store = SQLiteStore(str(path))
    await store.append("s", make_events("s", 1, [UserMessage(user("hi"))]), 0)
    await store.ready()
    return store


async def test_a_deleted_file_makes_the_store_unready(tmp_path: Path) -> None:
    store = await _store(tmp_path / "t.db")
    for name in ("t.db", "t.db-wal", "t.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    with pytest.raises(StoreUnavailable, match="deleted"):
        await store.ready()
    await store.close()


async def test_a_file_replaced_under_the_store_makes_it_unready(tmp_path: Path) -> None:
    store = await _store(tmp_path / "t.db")
    other = SQLiteStore(str(tmp_path / "other.db"))
    await other.close()
    os.replace(tmp_path / "other.db", tmp_path / "t.db")
    with pytest.raises(StoreUnavailable, match="replaced"):
        await store.ready()
    await store.close()


async def test_a_read_only_file_makes_the_store_unready_until_writable_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    store = await _store(path)
    path.chmod(0o444)
    try:
        with pytest.raises(StoreUnavailable, match="read-only"):
            await store.ready()
    finally:
        path.chmod(0o644)
    await store.ready()
    await store.close()


async def test_a_closed_store_is_unready(tmp_path: Path) -> None:
    store = await _store(tmp_path / "t.db")
    await store.close()
    with pytest.raises(StoreUnavailable, match="closed") as caught:
        await store.ready()
    assert isinstance(caught.value, StoreError)
