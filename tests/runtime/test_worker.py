"""Workers: each session runs once however many workers share a store; a session no worker
can build fails with the reason; a session no runtime started is left alone; tenants."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from invariants import assert_log_invariants
from tether import Agent
from tether.errors import SessionNotFound
from tether.events import SessionEnded
from tether.runtime import (
    Capabilities,
    CapabilityRefused,
    LocalRuntime,
    SessionRef,
    Worker,
    validate_capabilities,
)
from tether.runtime.sessions import create_session, created_event
from tether.store import MemoryStore, SQLiteStore
from tether.store.base import Lease
from tether.testing import ScriptedModel
from tether.testing.runtime_conformance import WAIT, Observer, spec


async def test_sessions_shared_by_two_runtimes_on_one_store_each_run_exactly_once(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "shared.db")
    one, two = SQLiteStore(path), SQLiteStore(path)
    async with (
        LocalRuntime(one, workers=3, poll_interval=0.02) as a,
        LocalRuntime(two, workers=3, poll_interval=0.02) as b,
    ):
        refs = [
            await (a if i % 2 else b).start(spec("note 2", end_after_turn=True)) for i in range(12)
        ]
        for ref in refs:
            status = await Observer(a, ref).until("the end", lambda s: s.terminal)
            assert status.state == "completed" and status.view.steps == 3, status.to_json()
        for ref in refs:
            events = await one.read(ref.session_id)
            assert_log_invariants(events)
            assert [e.type for e in events].count("model.responded") == 3
        # A worker clears a session's wakeup once its run has ended, a moment after the end
        # is visible, and lets the lease go after that; `runnable` does not list a mark under
        # a live lease, so wait for the workers to be idle as well, bounded.
        assert a.worker is not None and b.worker is not None
        for _ in range(500):  # up to 10 s
            if not await one.runnable() and not a.worker.running and not b.worker.running:
                break
            await asyncio.sleep(0.02)
        assert await one.runnable() == []
        assert a.worker.turns_run + b.worker.turns_run >= len(refs)
    await one.close()
    await two.close()


class _MarkedAtRelease(MemoryStore):
    """A memory store that notes, at each release of a lease, whether its session was still
    marked: a mark standing when the lease goes is free for any worker to claim."""

    def __init__(self) -> None:
        super().__init__()
        self.marked: list[bool] = []

    async def release(self, lease: Lease) -> None:
        self.marked.append(lease.session_id in self._wakeups)
        await super().release(lease)


async def test_a_finished_run_clears_its_mark_before_its_lease_goes() -> None:
    store = _MarkedAtRelease()
    async with LocalRuntime(store, workers=0) as rt:
        ref = await rt.start(spec("note 2", end_after_turn=True))
        worker = Worker(store, poll_interval=0.02)
        assert await worker.dispatch() == 1
        await worker.stop(drain=WAIT)  # lets the run it started finish
        assert (await rt.poll(ref)).state == "completed"
    assert store.marked and not any(store.marked), store.marked
    assert await store.runnable() == []


async def test_a_session_whose_runner_cannot_be_built_fails_with_the_reason() -> None:
    store = MemoryStore()
    async with LocalRuntime(store, workers=0) as rt:
        good = spec("echo hi")
        model = ScriptedModel(["unused"])
        created = created_event(good, model, [], None, None)
        runner = dict(created.metadata["runner"])  # type: ignore[arg-type]
        runner["model"] = "python:tether_no_such_module:model"
        broken = dataclasses.replace(created, metadata={"runner": runner})
        sid = await create_session(store, good, broken, None, None, 0.0)
        worker = Worker(store, poll_interval=0.02)
        task = asyncio.create_task(worker.run())
        try:
            status = await Observer(rt, SessionRef(sid)).until("failed", lambda s: s.terminal)
        finally:
            task.cancel()
            await worker.stop()
    assert status.state == "failed" and status.stop_reason == "error"
    ended = (await store.read(sid))[-1].payload
    assert isinstance(ended, SessionEnded) and "tether_no_such_module" in (ended.detail or "")
    assert await store.runnable() == []


async def test_a_session_no_runtime_started_is_left_to_its_owner() -> None:
    store = MemoryStore()
    agent = Agent(ScriptedModel(["first", "second"]), store=store)
    result = await agent.run("hello")
    await store.mark_runnable(result.session_id)  # e.g. someone sent it a message
    before = await store.read(result.session_id)
    worker = Worker(store, poll_interval=0.02)
    assert await worker.dispatch() == 1
    await worker.stop(drain=WAIT)  # lets the run it started finish
    assert await store.runnable() == []
    assert await store.read(result.session_id) == before


async def test_a_tenant_sees_and_touches_only_its_own_sessions() -> None:
    async with LocalRuntime(MemoryStore(), workers=2, poll_interval=0.02) as rt:
        acme, globex = rt.for_tenant("acme"), rt.for_tenant("globex")
        ref = await acme.start(spec("echo mine"))
        assert (await Observer(acme, ref).settled()).last_output == "echo: mine"
        assert (
            await rt.poll(ref)
        ).view.session_id == ref.session_id  # the unscoped runtime sees all
        for attempt in (globex.poll(ref), globex.send(ref, "echo theirs"), globex.cancel(ref)):
            with pytest.raises(SessionNotFound):
                await attempt
        assert (await acme.poll(ref)).state == "idle"


def test_validate_capabilities_refuses_what_is_not_declared() -> None:
    declared = Capabilities(cancel=True, event_stream=True)
    validate_capabilities(declared, Capabilities(cancel=True))
    validate_capabilities(declared, Capabilities())
    with pytest.raises(CapabilityRefused, match="approvals, live_deltas"):
        validate_capabilities(declared, Capabilities(cancel=True, approvals=True, live_deltas=True))


async def test_the_worker_keeps_its_engines_within_their_byte_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tether.runtime import wire, worker
    from tether.runtime.base import AgentSpec
    from tether.runtime.sessions import Runner
    from tether.testing.runtime_fixtures import MODEL

    monkeypatch.setattr(worker, "ENGINE_BYTES", 400_000)
    running = worker.Worker(MemoryStore(), concurrency=1)
    for n in range(10):  # a 20,000-character sub-agent prompt each: charged 44 KB
        helper = AgentSpec(model=MODEL, system=f"{n}".ljust(20_000, "s"))
        agents = {"helper": wire.to_json(helper)}
        built = running._engine(Runner(MODEL, (), {}, True, agents=agents))
        assert running._engine(Runner(MODEL, (), {}, True, agents=agents)) is built  # kept
        assert running._engines.bytes <= 400_000
    assert 0 < len(running._engines) < 10
    await running.gateways.aclose()
