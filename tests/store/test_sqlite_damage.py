"""A SQLite file with torn pages: the thorough check finds it, the store is unready from then on,
the damaged session's reads name it and quote nothing stored, and every other session is read
and listed as ever."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tether.errors import CorruptLog, StoreUnavailable
from tether.events import UserMessage
from tether.messages import user
from tether.store import SQLiteStore
from tether.testing.store_conformance import make_events

MARK = "okapi-5523"  # stored text no error may quote


def _texts(text: str, count: int) -> list[UserMessage]:
    return [UserMessage(user(f"{text} {n}")) for n in range(count)]


async def _filled(path: Path) -> None:
    """Sound sessions, then the marked one between sessions that fill pages of their own (rows
    stand in append order: its pages hold none of the sound sessions' rows)."""
    store = SQLiteStore(str(path))
    sessions = [
        ("sound-a", _texts("sound a", 3)),
        ("spacer-1", _texts("spacer " * 300, 12)),
        ("marked", _texts(f"{MARK} " * 40, 6)),
        ("spacer-2", _texts("spacer " * 300, 12)),
        ("sound-b", _texts("sound b", 3)),
    ]
    for sid, payloads in sessions:
        await store.append(sid, make_events(sid, 1, payloads), 0)
    await store.close()  # the WAL checkpointed into the file


def _tear(path: Path) -> int:
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    pages, at = set(), data.find(MARK.encode())
    while at >= 0:
        pages.add(at // page)
        at = data.find(MARK.encode(), at + 1)
    noise = random.Random(3)
    for number in pages:
        data[number * page : (number + 1) * page] = noise.randbytes(page)
    path.write_bytes(bytes(data))
    return len(pages)


async def test_a_torn_file_is_found_named_and_the_sound_sessions_are_served(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    await _filled(path)
    assert _tear(path) >= 1
    store = SQLiteStore(str(path))
    with pytest.raises(CorruptLog, match="damaged") as found:
        await store.check_integrity()
    assert MARK not in str(found.value)
    with pytest.raises(StoreUnavailable, match="damaged"):
        await store.ready()
    with pytest.raises(CorruptLog, match="session marked") as unreadable:
        await store.read("marked")
    assert MARK not in str(unreadable.value)
    for sid in ("sound-a", "sound-b"):
        assert [e.seq for e in await store.read(sid)] == [1, 2, 3]
    listed = {i.session_id: i.last_seq for i in await store.sessions(limit=100)}
    assert listed["sound-a"] == listed["sound-b"] == 3
    await store.close()


async def test_a_read_that_meets_damage_makes_the_store_unready(tmp_path: Path) -> None:
    """No thorough check at open: the first read of the torn session finds it."""
    path = tmp_path / "t.db"
    await _filled(path)
    _tear(path)
    store = SQLiteStore(str(path))
    await store.ready()  # the newest pages are sound, and nothing read the torn ones yet
    with pytest.raises(CorruptLog, match="session marked"):
        await store.read("marked")
    with pytest.raises(StoreUnavailable, match="damaged"):
        await store.ready()
    await store.close()


async def test_the_newest_pages_torn_make_the_store_unready_at_once(tmp_path: Path) -> None:
    """`ready` reads the pages every append goes through: the newest events."""
    path = tmp_path / "t.db"
    store = SQLiteStore(str(path))
    await store.append("s", make_events("s", 1, _texts("first", 2)), 0)
    await store.append("newest", make_events("newest", 1, _texts(f"{MARK} " * 20, 2)), 0)
    await store.close()
    _tear(path)
    store = SQLiteStore(str(path))
    with pytest.raises(StoreUnavailable, match="damaged") as unready:
        await store.ready()
    assert MARK not in str(unready.value)
    await store.close()
