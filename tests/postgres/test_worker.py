"""The runtime's worker on PostgreSQL takes work the store's way: new work wakes it by
NOTIFY rather than at its next poll, and a session whose workers were killed while it waited
on its model is run, not condemned (one that killed them: `test_work.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator

from tether.runtime import LocalRuntime, Worker
from tether.store.postgres import PostgresStore
from tether.testing.runtime_conformance import WAIT, Observer, spec


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[None]:
    task = asyncio.create_task(worker.run())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await worker.stop()


async def _listening(store: PostgresStore, application_name: str) -> None:
    async with asyncio.timeout(WAIT):
        while True:
            row = await store.fetch_one(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = %s AND query LIKE 'LISTEN%%'",
                (application_name,),
            )
            if row is not None and int(row[0]) > 0:
                return
            await asyncio.sleep(0.02)


async def test_new_work_wakes_the_worker_at_once_not_at_its_next_poll(pg_url: str) -> None:
    name = f"tether-test-{secrets.token_hex(4)}"
    worker_store = PostgresStore(f"{pg_url}&application_name={name}")
    control = PostgresStore(pg_url)
    # It looks for work once at the start, then only every two minutes, unless told.
    worker = Worker(worker_store, poll_interval=120.0, watch_interval=0.1)
    async with running(worker), LocalRuntime(control, workers=0) as rt:
        await _listening(control, name)
        asked = time.monotonic()
        ref = await rt.start(spec("echo at once", end_after_turn=True))
        status = await Observer(rt, ref).until("the end", lambda s: s.terminal)
        took = time.monotonic() - asked
    assert (status.state, status.last_output) == ("completed", "echo: at once")
    assert took < WAIT, f"the worker took {took:.1f} s to hear of the session"
    await worker_store.close()
    await control.close()


async def test_a_session_whose_workers_died_while_it_waited_on_its_model_is_not_condemned(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url)
    async with LocalRuntime(store, workers=0) as rt:
        innocent = await rt.start(spec("echo innocent", end_after_turn=True))
        fine = await rt.start(spec("echo fine", end_after_turn=True))
        # Three workers took it, one after the other, and were killed holding it, with no
        # call of its in flight: none of it is the session's doing.
        for n in range(3):
            await store.claim(innocent.session_id, f"dead-{n}", ttl=0.05)
            await asyncio.sleep(0.1)
        worker = Worker(store, poll_interval=0.05, max_claims=3)
        async with running(worker):
            ran = await Observer(rt, innocent).until("done", lambda s: s.terminal)
            done = await Observer(rt, fine).until("done", lambda s: s.terminal)
    assert (ran.state, ran.last_output) == ("completed", "echo: innocent")
    assert (done.state, done.last_output) == ("completed", "echo: fine")
    assert await store.runnable() == []
    for ref in (innocent, fine):
        assert await store.current_lease(ref.session_id) is None  # released, not left to expire
        assert await store.claims(ref.session_id) == 0
    await store.close()
