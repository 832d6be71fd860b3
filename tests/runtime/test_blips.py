"""A store that blips loses nothing a worker knew: a leased commit that fails for a transient
reason is tried again with the same events (one that landed though its answer was lost is
accepted once), a refusal is never retried, and a lease that cannot be let go neither raises
nor leaves the session a suspect. Real SQLite (and PostgreSQL in tests/postgres)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from blipping import Blipping
from tether.errors import LeaseLost, StoreError
from tether.events import SessionCreated, UserMessage
from tether.messages import user
from tether.runtime import LocalRuntime, Worker
from tether.runtime.claims import take_work
from tether.session.log import SessionLog
from tether.store.base import Store
from tether.store.sqlite import SQLiteStore
from tether.testing.runtime_conformance import Observer, spec


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(str(tmp_path / "blips.db"))
    yield store
    await store.close()


async def _leased_log(store: Store, sid: str) -> SessionLog:
    log = SessionLog(store, sid)
    log.lease = await store.claim(sid, "w1", 30)
    await log.append(SessionCreated(model="scripted", system=None, tools={}))
    return log


@pytest.mark.parametrize("land", [False, True], ids=["lost", "landed"])
async def test_a_leased_commit_that_fails_for_a_blip_is_tried_again_and_lands_once(
    sqlite: SQLiteStore, land: bool
) -> None:
    blipping = Blipping(sqlite)
    log = await _leased_log(blipping, "s")  # type: ignore[arg-type]
    blipping.fail_appends, blipping.land = 3, land
    [event] = await log.append(UserMessage(user("hello")))
    assert blipping.appends_tried == 5  # the first, and three tries that failed, and one more
    stored = await sqlite.read("s")
    assert [(e.seq, e.id) for e in stored] == [(1, stored[0].id), (2, event.id)]
    assert log.folder.last_seq == 2


async def test_a_commit_under_a_lost_lease_is_not_retried_and_writes_nothing(
    sqlite: SQLiteStore,
) -> None:
    blipping = Blipping(sqlite)
    log = await _leased_log(blipping, "s")  # type: ignore[arg-type]
    await sqlite.release(log.lease)  # type: ignore[arg-type]
    await sqlite.claim("s", "w2", 30)  # another worker took it over
    with pytest.raises(LeaseLost):
        await log.append(UserMessage(user("late")))
    assert blipping.appends_tried == 2
    assert await sqlite.last_seq("s") == 1


async def test_a_commit_is_retried_no_longer_than_the_lease_lasts(sqlite: SQLiteStore) -> None:
    blipping = Blipping(sqlite)
    log = SessionLog(blipping, "s")  # type: ignore[arg-type]
    log.lease = await sqlite.claim("s", "w1", 0.5)
    blipping.fail_appends = 1_000
    with pytest.raises(StoreError):
        await log.append(SessionCreated(model="scripted", system=None, tools={}))
    assert 2 < blipping.appends_tried < 1_000
    assert await sqlite.last_seq("s") == 0


async def test_a_release_that_fails_raises_nothing_and_leaves_no_suspect(
    sqlite: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    blipping = Blipping(sqlite)
    blipping.fail_releases = True
    worker = Worker(blipping, poll_interval=0.02, lease_ttl=0.5, watch_interval=0.05)  # type: ignore[arg-type]
    async with LocalRuntime(sqlite, workers=0) as rt:
        ref = await rt.start(spec("echo hi", end_after_turn=False))
        task = asyncio.create_task(worker.run())
        try:
            done = await Observer(rt, ref).until("idle", lambda s: s.state == "idle")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await worker.stop()
    assert done.last_output == "echo: hi"
    assert worker.failures == 0
    sid = ref.session_id
    assert await sqlite.current_lease(sid) is not None  # not let go: it runs out instead
    await sqlite.mark_runnable(sid)
    await asyncio.sleep(0.6)
    # Taken over by a busy worker (its worker "died" once), and forgiven: nothing was in
    # flight, so its count of claims is back to this claim alone.
    [taken] = await take_work(sqlite, "busy", ttl=30, limit=1, alone=False)
    assert (taken.lease.session_id, taken.claims) == (sid, 1)
    # Handled where it happened, and said once; no run task ended with it unhandled.
    said = [r.getMessage() for r in caplog.records if "releasing lease" in r.getMessage()]
    assert len(said) == 1 and "runs out instead" in said[0], said
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
