"""What only the SQLite store promises: WAL, durability across reopen and processes, clear errors."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path

import pytest

from tether.errors import ConfigError, Conflict, CorruptLog
from tether.events import ToolFinished, UserMessage
from tether.messages import user
from tether.store import SQLiteStore, open_store
from tether.store.base import event_to_row
from tether.testing.store_conformance import make_events


async def test_the_database_runs_in_wal_mode(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "t.db"))
    await store.append("s", make_events("s", 1, [UserMessage(user("x"))]), 0)
    await store.close()
    mode = sqlite3.connect(tmp_path / "t.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


async def test_events_survive_closing_and_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "t.db")
    events = make_events("s", 1, [UserMessage(user("héllo")), ToolFinished("c", "ok", "42")])
    store = SQLiteStore(path)
    await store.append("s", events, 0)
    await store.close()
    again = SQLiteStore(path)
    assert await again.read("s") == events
    await again.close()


async def test_another_process_appending_first_makes_ours_a_conflict(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SQLiteStore(str(path))
    await store.append("s", make_events("s", 1, [UserMessage(user("a"))]), 0)
    script = f"""
import asyncio
from tether.store import SQLiteStore
from tether.events import UserMessage
from tether.messages import user
from tether.testing.store_conformance import make_events
async def main():
    s = SQLiteStore({str(path)!r})
    await s.append("s", make_events("s", 2, [UserMessage(user("other"))], tag="p2"), 1)
    await s.close()
asyncio.run(main())
"""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script)
    assert await asyncio.wait_for(proc.wait(), 60) == 0
    with pytest.raises(Conflict):
        await store.append("s", make_events("s", 2, [UserMessage(user("ours"))]), 1)
    assert [e.id for e in await store.read("s")] == ["s-a-1", "s-p2-2"]
    await store.close()


def test_a_path_that_cannot_be_opened_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nonexistent"):
        SQLiteStore(str(tmp_path / "nonexistent" / "t.db"))


def test_a_file_that_is_not_a_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 10)
    with pytest.raises(ConfigError, match=r"notes\.db"):
        SQLiteStore(str(path))
    assert path.read_text() == "these are my notes, not a database\n" * 10


async def test_a_corrupt_stored_event_is_reported_not_guessed(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SQLiteStore(str(path))
    await store.append("s", make_events("s", 1, [UserMessage(user("a"))]), 0)
    db = sqlite3.connect(path)
    db.execute("UPDATE events SET data = '{\"message\": 5}' WHERE seq = 1")
    db.commit()
    db.close()
    with pytest.raises(CorruptLog, match="seq"):
        await store.read("s")
    await store.close()


@pytest.mark.parametrize(
    ("url", "kind"),
    [("memory:", "MemoryStore"), ("sqlite:///x.db", "SQLiteStore"), ("y.db", "SQLiteStore")],
)
async def test_store_urls_choose_the_backend(
    url: str, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store(url)
    assert type(store).__name__ == kind
    await store.close()


def test_an_unknown_store_url_names_the_forms_it_takes() -> None:
    with pytest.raises(ConfigError, match="sqlite:///PATH"):
        open_store("mongodb://localhost")


def test_a_printed_store_url_hides_its_password() -> None:
    from tether.store.base import redact_url

    assert redact_url("postgresql://tether:s3cret@db:5432/t") == "postgresql://tether:***@db:5432/t"
    assert redact_url("postgresql://tether@db/t") == "postgresql://tether@db/t"
    assert redact_url("sqlite:///tether.db") == "sqlite:///tether.db"


@pytest.mark.parametrize(
    ("after_seq", "limit"), [(0, None), (0, 64), (0, 65), (10, 100), (100, None), (199, 5)]
)
async def test_a_read_past_what_the_loop_thread_reads_is_whole_and_in_order(
    tmp_path: Path, after_seq: int, limit: int | None
) -> None:
    """The first 64 events of a read come from the loop's thread, the rest from the reader's:
    the seam shows in neither the order nor the count."""
    store = SQLiteStore(str(tmp_path / "t.db"))
    events = make_events("s", 1, [UserMessage(user(f"m{i}")) for i in range(200)])
    await store.append("s", events, 0)
    other = SQLiteStore(str(tmp_path / "t.db"))  # knows nothing: every read queries
    try:
        end = None if limit is None else after_seq + limit
        for reader in (store, other):
            assert await reader.read("s", after_seq, limit) == events[after_seq:end]
    finally:
        await store.close()
        await other.close()


async def test_an_event_is_decoded_once_and_a_changed_row_again(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SQLiteStore(str(path))
    other = SQLiteStore(str(path))
    events = make_events("s", 1, [UserMessage(user("a")), UserMessage(user("b"))])
    try:
        await store.append("s", events, 0)
        assert (await store.read("s"))[0] is events[0]  # what it wrote, as it wrote it
        first = await other.read("s")
        assert first == events and (await other.read("s"))[1] is first[1]
        # A row changed under the same seq is decoded again (a file rewritten outside tether).
        replaced = make_events("s", 2, [UserMessage(user("c"))])[0]
        row = event_to_row(replaced)
        conn = sqlite3.connect(path)
        conn.execute(
            "UPDATE events SET id = ?, time = ?, data = ? WHERE session_id = 's' AND seq = 2",
            (row[2], row[3], row[6]),
        )
        conn.commit()
        conn.close()
        assert (await other.read("s", 1)) == [replaced]
    finally:
        await store.close()
        await other.close()


async def test_decoded_events_are_kept_within_their_byte_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.store import sqlite

    monkeypatch.setattr(sqlite, "_DECODED_BYTES", 256 << 10)
    store = SQLiteStore(str(tmp_path / "t.db"))
    events = {}
    for n in range(40):  # 40 sessions of a 20 KB first event: 800 KB, over the budget
        sid = f"s{n}"
        events[sid] = make_events(sid, 1, [UserMessage(user(f"{n}".ljust(20_000, "x")))])
        await store.append(sid, events[sid], 0)
        assert await store.read(sid) == events[sid]
    held = store._decoded
    assert held.bytes <= 256 << 10 and 0 < len(held) < 40
    huge = make_events("huge", 1, [UserMessage(user("h" * (64 << 10)))])  # past an eighth
    await store.append("huge", huge, 0)
    assert await store.read("huge") == huge and ("huge", 1) not in held
    for sid, written in events.items():  # the dropped ones are read and decoded again
        assert await store.read(sid) == written
    assert held.bytes <= 256 << 10
    await store.close()
