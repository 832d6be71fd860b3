"""Format 5, the session catalog: a format-4 file gets its catalog on open, backfilled in
chunks with progress logged, every row equal to the fold of its session's log; a file
opened by two stores at once is backfilled once, rightly; a new file owes nothing. (A
backfill killed part way: tests/crash/test_catalog_crash.py.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from catalog_files import assert_catalog_rebuilt, check_file, format_4_file, meta
from tether.events import Event, UserMessage
from tether.messages import user
from tether.store import SQLiteStore, sqlite_backfill
from tether.store.catalog import CatalogQuery, row_for_log

from .test_sqlite_format import open_at_once


async def test_a_format_4_file_is_backfilled_on_open_in_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "v4.db"
    ids = format_4_file(path, sessions=40)
    monkeypatch.setattr(sqlite_backfill, "BACKFILL_CHUNK", 7)
    with caplog.at_level(logging.INFO, logger="tether.store"):
        store = SQLiteStore(str(path))
    try:
        assert await assert_catalog_rebuilt(store) == len(ids) == 40
        progress = [r.getMessage() for r in caplog.records if "catalog backfill" in r.message]
        assert len(progress) == 40 // 7 + 1 + 1, progress  # each chunk, then "complete"
        assert progress[-1].endswith("catalog backfill complete")
        assert meta(path, "format") == "6"
        assert meta(path, sqlite_backfill.BACKFILL_KEY) is None
        # An append after the migration keeps the row current.
        sid = ids[0]
        last = await store.last_seq(sid)
        more = [
            Event(
                sid,
                last + 1,
                f"{sid}-more",
                "2026-03-01T00:00:00.000000Z",
                UserMessage(user("one more")),
            )
        ]
        await store.append(sid, more, last)
        assert await store.catalog_row(sid) == row_for_log(await store.read(sid))
        assert (await store.catalog(CatalogQuery(limit=1)))[0].session_id == sid
    finally:
        await store.close()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tether.store"):
        again = SQLiteStore(str(path))  # opened again: nothing owed, nothing logged
    try:
        assert await assert_catalog_rebuilt(again) == 40
    finally:
        await again.close()
    assert not [r for r in caplog.records if "catalog backfill" in r.message]


def test_two_stores_opening_a_format_4_file_at_once_backfill_it_rightly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_backfill, "BACKFILL_CHUNK", 5)
    for round_ in range(10):
        path = tmp_path / f"v4-{round_}.db"
        format_4_file(path, sessions=30, seed=round_)
        errors = open_at_once(path)
        assert not errors, (round_, errors)
        assert meta(path, sqlite_backfill.BACKFILL_KEY) is None
        assert check_file(path) == 30


async def test_a_new_file_owes_no_backfill(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    store = SQLiteStore(str(path))
    await store.close()
    assert meta(path, "format") == "6"
    assert meta(path, sqlite_backfill.BACKFILL_KEY) is None


async def test_a_session_that_cannot_be_read_is_left_out_and_the_file_opens(
    tmp_path: Path,
) -> None:
    import sqlite3

    path = tmp_path / "v4.db"
    ids = format_4_file(path, sessions=6)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET data = 'not json' WHERE session_id = ?", (ids[2],))
    conn.commit()
    conn.close()
    store = SQLiteStore(str(path))
    try:
        assert await store.catalog_row(ids[2]) is None
        for sid in ids[:2] + ids[3:]:
            assert await store.catalog_row(sid) == row_for_log(await store.read(sid))
    finally:
        await store.close()
