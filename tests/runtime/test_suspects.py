"""A suspect (a session whose workers died holding it `SUSPECT_CLAIMS` times in a row, none of
those deaths forgiven) is taken by any worker with a free slot, in a claim of its own: it
never waits for a worker that runs nothing. A worker runs one suspect at a time. Real SQLite
and the memory store; the leases of the dead workers run out by the store's clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.events import ModelResponded, ToolStarted
from tether.messages import Message, ToolCall
from tether.runtime import LocalRuntime, Worker
from tether.runtime.base import SessionRef
from tether.session.log import SessionLog
from tether.store.base import SUSPECT_CLAIMS, Lease, Store
from tether.store.memory import MemoryStore
from tether.store.sqlite import SQLiteStore
from tether.testing.runtime_conformance import Observer, spec

SHORT = 0.05  # a dead worker's lease, in seconds


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store = MemoryStore() if request.param == "memory" else SQLiteStore(str(tmp_path / "t.db"))
    yield s
    await s.close()


async def _killed_its_workers(store: Store, session_id: str) -> Lease:
    """`SUSPECT_CLAIMS` workers in a row claim the session and die holding it. The last one's
    lease is returned still live: the session becomes a suspect when `_runs_out` says."""
    for n in range(SUSPECT_CLAIMS - 1):
        await store.claim(session_id, f"dead-{n}", ttl=SHORT)
        await asyncio.sleep(SHORT * 2)
    return await store.claim(session_id, "dead-last", ttl=30.0)


async def _runs_out(store: Store, lease: Lease) -> None:
    await store.renew(lease, SHORT)
    await asyncio.sleep(SHORT * 2)


async def _completed(rt: LocalRuntime, ref: SessionRef) -> str:
    status = await Observer(rt, ref).settled()
    assert status.state == "completed", status
    return status.last_output


async def test_a_busy_worker_with_a_free_slot_takes_a_suspect(store: Store) -> None:
    async with LocalRuntime(store, workers=0) as rt:
        suspect = await rt.start(spec("echo s", end_after_turn=True))
        last = await _killed_its_workers(store, suspect.session_id)
        busy = await rt.start(spec("hang"))
        worker = Worker(store, concurrency=4, poll_interval=0.05)
        try:
            assert await worker.dispatch() == 1  # the hanging session: the suspect is held
            assert await store.current_lease(busy.session_id) is not None
            await _runs_out(store, last)
            # Running something, with free slots: it takes the suspect, by itself.
            assert await worker.dispatch() == 1
            assert worker.running == 2
            assert await _completed(rt, suspect) == "echo: s"
        finally:
            await worker.stop(hand_over=False)


async def test_a_worker_runs_one_suspect_at_a_time(store: Store) -> None:
    async with LocalRuntime(store, workers=0) as rt:
        # A suspect with a `read` call in flight at two deaths: struck, not forgiven. Its
        # call is run again and returns, and its model then never answers.
        first = await rt.start(spec("hang"))
        log = await SessionLog.load(store, first.session_id)
        answer = Message("assistant", (ToolCall("c1", "note", {"text": "x"}),))
        await log.append(
            ModelResponded(answer, stop="tool_calls"),
            ToolStarted("c1", "note", "read"),
            ToolStarted("c1", "note", "read"),
        )
        first_dead = await _killed_its_workers(store, first.session_id)
        second = await rt.start(spec("echo second", end_after_turn=True))
        second_dead = await _killed_its_workers(store, second.session_id)
        await _runs_out(store, first_dead)  # the older expiry: it goes first
        await _runs_out(store, second_dead)
        worker = Worker(store, concurrency=4, poll_interval=0.05)
        loop: asyncio.Task[None] | None = None
        try:
            assert await worker.dispatch() == 1
            assert await store.current_lease(first.session_id) is not None
            assert await worker.dispatch() == 0  # a second suspect waits for the first
            assert await store.current_lease(second.session_id) is None
            await rt.interrupt(first)  # the first suspect's run ends: the second may go
            loop = asyncio.create_task(worker.run())
            assert await _completed(rt, second) == "echo: second"
        finally:
            if loop is not None:
                loop.cancel()
                await asyncio.gather(loop, return_exceptions=True)
            await worker.stop(hand_over=False)
