"""The SQLite file's format: a format-2 file (events clustered by session) or a format-3 one
(no claim counts, no not-before times) is brought to the current format (events in append
order, claims counted, wakeups deferrable, a session catalog: test_sqlite_catalog_format.py)
when first opened, losing nothing; an unknown format is refused and left as it was."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from tether.errors import ConfigError
from tether.events import Event, ToolFinished, UserMessage
from tether.messages import user
from tether.store import SQLiteStore
from tether.store.base import event_to_row
from tether.store.catalog import row_for_log
from tether.store.sqlite import STORE_FORMAT
from tether.testing.store_conformance import make_events

# The events table as format 2 wrote it, kept here as the shape old files have.
FORMAT_2 = """
CREATE TABLE tether_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sessions (session_id TEXT PRIMARY KEY, created TEXT NOT NULL);
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    time TEXT NOT NULL,
    thread TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE leases (
    session_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    generation INTEGER NOT NULL,
    expires REAL NOT NULL
);
CREATE TABLE blobs (hash TEXT PRIMARY KEY, data BLOB NOT NULL);
INSERT INTO tether_meta VALUES ('format', '2');
"""


def format_2_file(path: Path) -> dict[str, list[Event]]:
    logs = {
        sid: make_events(
            sid,
            1,
            [UserMessage(user(f"hello from {sid}")), ToolFinished("c", "ok", "é ✓ 42")],
        )
        for sid in ("ses_b", "ses_a", "ses_c")
    }
    conn = sqlite3.connect(path)
    conn.executescript(FORMAT_2)
    for sid, events in logs.items():
        conn.execute("INSERT INTO sessions VALUES (?, ?)", (sid, events[0].time))
        conn.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)", [event_to_row(e) for e in events]
        )
    conn.execute("INSERT INTO leases VALUES ('ses_a', 'w1', 3, 0)")
    conn.commit()
    conn.close()
    return logs


def stored_format(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("SELECT value FROM tether_meta WHERE key='format'").fetchone()[0])
    finally:
        conn.close()


async def test_a_format_2_file_is_migrated_on_open_and_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    logs = format_2_file(path)

    store = SQLiteStore(str(path))
    try:
        for sid, events in logs.items():
            assert await store.read(sid) == events
        assert {i.session_id for i in await store.sessions()} == set(logs)
        lease = await store.claim("ses_a", "w2", ttl=30)
        assert lease.generation == 4  # the lease row came across too
        more = make_events("ses_a", 3, [UserMessage(user("after the move"))])
        await store.append("ses_a", more, 2, lease)
        assert await store.read("ses_a") == logs["ses_a"] + more
        for sid in logs:  # the catalog was backfilled, and the append kept ses_a's current
            assert await store.catalog_row(sid) == row_for_log(await store.read(sid))
    finally:
        await store.close()

    assert stored_format(path) == STORE_FORMAT == "6"
    conn = sqlite3.connect(path)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(events)")]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert columns[0] == "pos", columns
    assert "events_new" not in tables

    again = SQLiteStore(str(path))  # opening a migrated file again changes nothing
    try:
        assert await again.read("ses_b") == logs["ses_b"]
    finally:
        await again.close()


def open_at_once(path: Path) -> list[BaseException]:
    """Two stores opening `path` at the same moment, from two threads; what they raised."""
    errors: list[BaseException] = []
    stores: list[SQLiteStore] = []
    start = threading.Barrier(2)

    def open_it() -> None:
        start.wait()
        try:
            stores.append(SQLiteStore(str(path)))
        except BaseException as exc:  # reported to the caller
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    async def close_all() -> None:
        for s in stores:
            await s.close()

    asyncio.run(close_all())
    return errors


def test_two_stores_opening_an_old_file_at_once_migrate_it_once(tmp_path: Path) -> None:
    # Racing openers of a file still in rollback-journal mode meet where SQLite answers
    # "locked" at once (about 1 try in 8 here): the store must wait that out. 20 rounds.
    for round_ in range(20):
        path = tmp_path / f"old{round_}.db"
        logs = format_2_file(path)
        errors = open_at_once(path)
        assert not errors, (round_, errors)
        conn = sqlite3.connect(path)
        count = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        conn.close()
        assert count == sum(len(e) for e in logs.values())
        assert stored_format(path) == STORE_FORMAT


def test_a_file_of_an_unknown_format_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    format_2_file(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE tether_meta SET value = '9' WHERE key = 'format'")
    conn.commit()
    conn.close()
    before = path.read_bytes()

    with pytest.raises(ConfigError, match="format 9, expected 6"):
        SQLiteStore(str(path))
    assert path.read_bytes() == before


# Format 3 as it was written: events in append order; leases without a claim count, wakeups
# without a not-before time.
FORMAT_3 = """
CREATE TABLE tether_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sessions (session_id TEXT PRIMARY KEY, created TEXT NOT NULL);
CREATE TABLE events (
    pos INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    time TEXT NOT NULL,
    thread TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    UNIQUE (session_id, seq)
);
CREATE TABLE leases (
    session_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    generation INTEGER NOT NULL,
    expires REAL NOT NULL
);
CREATE TABLE blobs (hash TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE wakeups (
    session_id TEXT PRIMARY KEY,
    token INTEGER NOT NULL,
    marked REAL NOT NULL
);
INSERT INTO tether_meta VALUES ('format', '3');
"""


def format_3_file(path: Path) -> list[Event]:
    events = make_events("ses_a", 1, [UserMessage(user("hello"))])
    conn = sqlite3.connect(path)
    conn.executescript(FORMAT_3)
    conn.execute("INSERT INTO sessions VALUES ('ses_a', ?)", (events[0].time,))
    conn.executemany(
        "INSERT INTO events (session_id, seq, id, time, thread, type, data) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [event_to_row(e) for e in events],
    )
    # ses_a's worker died holding it (its lease ran out); ses_b and ses_c wait, marked.
    conn.execute("INSERT INTO leases VALUES ('ses_a', 'w1', 3, 1.0)")
    conn.execute("INSERT INTO wakeups VALUES ('ses_a', 2, 1.0), ('ses_b', 1, 2.0)")
    conn.execute("INSERT INTO wakeups VALUES ('ses_c', 5, 3.0)")
    conn.commit()
    conn.close()
    return events


async def test_a_format_3_file_gets_claim_counts_and_not_before_times_on_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v3.db"
    events = format_3_file(path)

    store = SQLiteStore(str(path))
    try:
        assert await store.read("ses_a") == events
        # The marks came across in their order, none deferred; no old lease counts a claim,
        # so none is a suspect and a worker running others may take all three.
        assert [(w.session_id, w.token) for w in await store.runnable()] == [
            ("ses_a", 2),
            ("ses_b", 1),
            ("ses_c", 5),
        ]
        await store.defer("ses_c", 60, "parked")
        queued = await store.queued("ses_c")
        assert queued is not None and queued.reason == "parked"
        claimed = await store.claim_runnable("w2", ttl=30, limit=5, alone=False)
        assert [(c.lease.session_id, c.lease.generation, c.claims) for c in claimed] == [
            ("ses_a", 4, 1),
            ("ses_b", 1, 1),
        ]
        more = make_events("ses_a", 2, [UserMessage(user("after the move"))])
        await store.append("ses_a", more, 1, claimed[0].lease)
    finally:
        await store.close()

    assert stored_format(path) == STORE_FORMAT
    again = SQLiteStore(str(path))  # opening it again changes nothing
    try:
        assert await again.read("ses_a") == events + more
        assert await again.queued("ses_c") is not None
    finally:
        await again.close()
