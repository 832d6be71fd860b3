"""A store of schema version 3 with sessions in it migrates to the catalog: every session's
row is folded from its log (`catalog.row_for_log`), also when the process backfilling is
killed in the middle of a batch and another migration resumes it."""

from __future__ import annotations

import asyncio
import random
import signal
import sys
from pathlib import Path

from psycopg import AsyncConnection
from tests.postgres.catalog_support import session_log

from tether.store import catalog, pg_schema
from tether.store.base import payload_data
from tether.store.pg_conn import connect
from tether.store.postgres import PostgresStore

ROOT = Path(__file__).resolve().parents[2]


async def version_3_store(url: str, count: int) -> list[str]:
    """A database at schema version 3 holding `count` sessions, appended as version 3 did."""
    conn = await connect(url)
    await pg_schema.migrate(conn, upto=3)
    rng = random.Random(11)
    ids = [f"s{i:03d}" for i in range(count)]
    for session_id in ids:
        events = session_log(session_id, rng)
        await conn.execute(
            "SELECT * FROM tether_append(%s, 0, NULL, %s, %s, %s, %s, %s)",
            (
                session_id,
                [e.id for e in events],
                [e.time for e in events],
                [e.thread for e in events],
                [e.type for e in events],
                [payload_data(e.payload) for e in events],
            ),
        )
    await conn.close()
    return ids


async def assert_rows_are_the_logs_folds(store: PostgresStore, ids: list[str]) -> None:
    for session_id in ids:
        expected = catalog.row_for_log(await store.read(session_id))
        assert await store.catalog_row(session_id) == expected, session_id


async def backfill_state(url: str) -> tuple[str, bool]:
    async with await AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT after_id, done FROM tether_catalog_backfill")
        row = await cur.fetchone()
    assert row is not None
    return row[0], row[1]


async def test_a_version_3_store_gets_every_sessions_row_on_open(pg_url: str) -> None:
    ids = await version_3_store(pg_url, 40)
    store = PostgresStore(pg_url)
    listed = await store.sessions(100)  # the first use migrates, backfill included
    assert sorted(s.session_id for s in listed) == ids
    await assert_rows_are_the_logs_folds(store, ids)
    assert await backfill_state(pg_url) == ("s039", True)
    await store.close()


async def test_a_backfill_killed_mid_batch_is_resumed_and_loses_nothing(pg_url: str) -> None:
    ids = await version_3_store(pg_url, 30)
    async with await AsyncConnection.connect(pg_url) as blocker:
        # Hold s012's log row: the third batch (s010-s014) waits for it in its transaction.
        await blocker.execute("SELECT 1 FROM tether_sessions WHERE session_id = 's012' FOR UPDATE")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.postgres.backfill_worker",
            pg_url,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"5 30\n"
            assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"10 30\n"
            await until_waiting(pg_url)
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await blocker.rollback()
    await until_gone(pg_url)
    assert await backfill_state(pg_url) == ("s009", False)
    async with await AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute("SELECT session_id FROM tether_catalog ORDER BY session_id")
        assert [r[0] for r in await cur.fetchall()] == ids[:10]  # s010, s011 rolled back
    store = PostgresStore(pg_url)
    await store.count_sessions()  # migrating again resumes after s009
    await assert_rows_are_the_logs_folds(store, ids)
    assert await backfill_state(pg_url) == ("s029", True)
    await store.close()


async def until_waiting(url: str) -> None:
    """Until the backfilling process's transaction waits for a lock (the blocker's). Asked on
    a connection of its own, outside any transaction: one caches what it reads of
    pg_stat_activity until it ends."""
    async with asyncio.timeout(60), await AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = 'tether-backfill-test' AND wait_event_type = 'Lock'"
            )
            row = await cur.fetchone()
            if row is not None and row[0] == 1:
                return
            await asyncio.sleep(0.02)


async def until_gone(url: str) -> None:
    """Until the killed process's server backend has ended (its transaction rolled back)."""
    async with asyncio.timeout(60), await AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = 'tether-backfill-test'"
            )
            row = await cur.fetchone()
            if row is not None and row[0] == 0:
                return
            await asyncio.sleep(0.02)
