"""SQLite readiness and the file under the store: SQLite appends to a file deleted or replaced
under it (into a file nobody will open again), so the store looks at the file after every
commit and refuses to acknowledge one made there, and `ready` looks at it as well."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.errors import StoreError, StoreUnavailable
from tether.events import Event, UserMessage
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


# -- on the write path: nothing is acknowledged into a file the path no longer names ---------


def _session(sid: str, text: str = "hi") -> list[Event]:
    return make_events(sid, 1, [UserMessage(user(text))])


async def test_a_commit_after_the_file_was_deleted_is_refused_and_so_is_every_later_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    store = await _store(path)
    os.link(path, tmp_path / "kept.db")  # the original file, as a backup would keep it
    path.unlink()
    for sid in ("a", "b"):
        with pytest.raises(StoreUnavailable, match="deleted"):
            await store.append(sid, _session(sid), 0)
    with pytest.raises(StoreUnavailable, match="deleted"):
        await store.ready()
    with pytest.raises(StoreUnavailable, match="deleted"):
        await store.read("s")
    await store.close()
    # What was acknowledged is in the file the store opened: back at the path, all is there.
    os.link(tmp_path / "kept.db", path)
    again = SQLiteStore(str(path))
    assert [e.seq for e in await again.read("s")] == [1]
    await again.check_integrity()
    await again.ready()
    await again.close()


async def test_the_wal_of_a_deleted_file_is_moved_into_it_before_it_is_let_go(
    tmp_path: Path,
) -> None:
    """The WAL deleted with the file: what it held is written into the file the store opened
    (reached still through another link), not lost with the WAL."""
    path = tmp_path / "t.db"
    store = await _store(path)
    for n in range(20):
        await store.append(f"w{n}", _session(f"w{n}"), 0)
    os.link(path, tmp_path / "kept.db")
    for name in ("t.db", "t.db-wal", "t.db-shm"):
        (tmp_path / name).unlink()
    with pytest.raises(StoreUnavailable):
        await store.append("late", _session("late"), 0)
    await store.close()
    os.link(tmp_path / "kept.db", path)
    again = SQLiteStore(str(path))
    assert {i.session_id for i in await again.sessions(limit=100)} >= {"s"} | {
        f"w{n}" for n in range(20)
    }
    await again.check_integrity()
    await again.close()


async def test_a_replaced_file_keeps_its_own_sessions_and_never_gets_the_old_wal(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    store = await _store(path)
    for n in range(20):  # frames in the old file's WAL, not yet checkpointed
        await store.append(f"old{n}", _session(f"old{n}"), 0)
    other = SQLiteStore(str(tmp_path / "other.db"))
    await other.append("theirs", _session("theirs", "the replacement's own"), 0)
    await other.close()
    os.replace(tmp_path / "other.db", path)
    with pytest.raises(StoreUnavailable, match="replaced"):
        await store.append("new", _session("new"), 0)
    with pytest.raises(StoreUnavailable, match="replaced"):
        await store.ready()
    await store.close()
    again = SQLiteStore(str(path))
    assert [i.session_id for i in await again.sessions()] == ["theirs"]
    assert [e.payload for e in await again.read("theirs")] == [
        UserMessage(user("the replacement's own"))
    ]
    await again.check_integrity()
    await again.close()


async def test_a_file_replaced_while_idle_is_let_go_on_close_without_its_wal(
    tmp_path: Path,
) -> None:
    """No commit noticed the replacement: closing the store still empties the old WAL."""
    path = tmp_path / "t.db"
    store = await _store(path)
    for n in range(20):
        await store.append(f"old{n}", _session(f"old{n}"), 0)
    other = SQLiteStore(str(tmp_path / "other.db"))
    await other.append("theirs", _session("theirs"), 0)
    await other.close()
    os.replace(tmp_path / "other.db", path)
    await store.close()
    again = SQLiteStore(str(path))
    assert [i.session_id for i in await again.sessions()] == ["theirs"]
    await again.check_integrity()
    await again.close()
