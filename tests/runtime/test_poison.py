"""Poison detection convicts only the guilty: a death counts against a session only when one
of its tool calls was in flight, and only deaths in a row; a session killed while it waited
on its model is forgiven, however often. Real SQLite and the memory store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.events import ModelResponded, SessionCreated, ToolFinished, ToolStarted, UserMessage
from tether.fold import Folder
from tether.messages import Message, ToolCall, user
from tether.runtime.claims import Probation, take_work
from tether.session.log import SessionLog
from tether.store.base import Lease, Store
from tether.store.memory import MemoryStore
from tether.store.sqlite import SQLiteStore

TTL = 0.1


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store = MemoryStore() if request.param == "memory" else SQLiteStore(str(tmp_path / "t.db"))
    yield s
    await s.close()


async def _waiting_on_its_model(store: Store, sid: str) -> SessionLog:
    log = SessionLog(store, sid)
    await log.append(SessionCreated(model="scripted", system=None, tools={}))
    await log.append(UserMessage(user("go")))
    await store.mark_runnable(sid)
    return log


async def _with_a_started_call(store: Store, sid: str, call: str = "c1") -> SessionLog:
    log = await _waiting_on_its_model(store, sid)
    answer = Message("assistant", (ToolCall(call, "write", {}),))
    await log.append(ModelResponded(answer, stop="tool_calls"), ToolStarted(call, "write"))
    return log


async def _dies(
    store: Store, worker: str, *, alone: bool = True, rerun: frozenset[str] = frozenset()
) -> list[str]:
    """`worker` takes what it is given and dies holding it: its leases run out. For the
    sessions in `rerun`, it first starts their call in flight again (as a re-run `read`
    does: the death happens with the call running, which is the evidence)."""
    got = await take_work(store, worker, ttl=TTL, limit=5, alone=alone, max_claims=3)
    for claimed in got:
        sid = claimed.lease.session_id
        if sid in rerun:
            log = await SessionLog.load(store, sid)
            log.lease = claimed.lease
            [call] = [c for c in log.folder.view().open_calls if c.id in log.folder.started]
            await log.append(ToolStarted(call.id, call.name))
    await asyncio.sleep(TTL * 1.5)
    return [c.lease.session_id for c in got]


async def test_a_session_killed_while_waiting_on_its_model_is_never_condemned(
    store: Store,
) -> None:
    await _waiting_on_its_model(store, "innocent")
    for n in range(6):  # twice the limit of workers killed under it
        assert await _dies(store, f"w{n}", alone=False) == ["innocent"], n
    [taken] = await take_work(store, "last", ttl=30, limit=5, alone=False, max_claims=3)
    assert taken.lease.session_id == "innocent"
    view = Folder().apply_all(await store.read("innocent")).view()
    assert view.state != "failed"


async def test_a_session_that_kills_its_workers_with_a_call_is_parked_naming_it(
    store: Store,
) -> None:
    await _with_a_started_call(store, "poison")
    await _waiting_on_its_model(store, "other")
    poison = frozenset({"poison"})
    assert sorted(await _dies(store, "w1")) == ["other", "poison"]
    # Taken over by busy workers, both, twice, each running the call again and dying with
    # it: "other" is forgiven, "poison" struck.
    assert sorted(await _dies(store, "w2", alone=False, rerun=poison)) == ["other", "poison"]
    assert sorted(await _dies(store, "w3", alone=False, rerun=poison)) == ["other", "poison"]
    # Struck twice and dead again, it is a suspect: a busy worker is handed only "other".
    [other] = await take_work(store, "busy", ttl=30, limit=5, alone=False, max_claims=3)
    assert other.lease.session_id == "other"
    await store.clear_runnable(other.wakeup)
    await store.release(other.lease)
    assert await take_work(store, "w4", ttl=30, limit=5, alone=True, max_claims=3) == []
    view = Folder().apply_all(await store.read("poison")).view()
    assert (view.state, view.stop_reason) == ("failed", "error")
    assert view.stop_detail is not None and "write (c1)" in view.stop_detail
    assert "3 times" in view.stop_detail, view.stop_detail
    assert await store.current_lease("poison") is None
    assert await store.runnable() == []


async def test_workers_killed_before_they_run_the_call_again_condemn_nothing(
    store: Store,
) -> None:
    """A `write` cut off by a death is never run again, and a worker killed from outside
    just after claiming its session ran nothing of it: deaths, however many in a row, with
    the call started only once are no evidence against the session."""
    await _with_a_started_call(store, "innocent")
    for n in range(6):  # twice the limit of workers killed holding it
        assert await _dies(store, f"w{n}") == ["innocent"], n
    [taken] = await take_work(store, "last", ttl=30, limit=5, alone=True, max_claims=3)
    assert taken.lease.session_id == "innocent"
    assert Folder().apply_all(await store.read("innocent")).view().state != "failed"


async def test_poison_after_sets_how_many_strikes_end_a_session(store: Store) -> None:
    await _with_a_started_call(store, "s")
    await take_work(store, "w1", ttl=TTL, limit=1, alone=True, max_claims=1)
    await asyncio.sleep(TTL * 1.5)
    assert await take_work(store, "w2", ttl=30, limit=1, alone=True, max_claims=1) == []
    view = Folder().apply_all(await store.read("s")).view()
    assert view.state == "failed" and "1 times" in (view.stop_detail or "")


async def test_a_struck_session_whose_call_returns_is_forgiven(store: Store) -> None:
    log = await _with_a_started_call(store, "s")
    assert await _dies(store, "w1") == ["s"]
    assert await _dies(store, "w2") == ["s"]  # strike 1: w1 died mid-call
    # w3 takes it (strike 2), and its call returns under w3 before w3 is killed.
    [taken] = await take_work(store, "w3", ttl=TTL, limit=1, alone=True, max_claims=3)
    assert taken.claims == 3
    forgiven: list[Lease] = []
    log.observers = (Probation(taken.lease, forgiven.append),)
    log.lease = taken.lease
    await log.refresh()
    await log.append(ToolFinished("c1", "ok", "done"))
    assert forgiven == [taken.lease]
    await store.acquit(taken.lease)  # what the worker does with it
    # A second call starts, and w3 is killed during it: strike 1 again, not 3.
    answer = Message("assistant", (ToolCall("c2", "write", {}),))
    await log.append(ModelResponded(answer, stop="tool_calls"), ToolStarted("c2", "write"))
    await asyncio.sleep(TTL * 1.5)
    [again] = await take_work(store, "w4", ttl=TTL, limit=1, alone=False, max_claims=3)
    assert again.claims == 2
    assert Folder().apply_all(await store.read("s")).view().state != "failed"
