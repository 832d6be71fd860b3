"""A step's last tool result is held (`SessionLog.hold`) and committed with the next request,
one commit less per step, without changing what the log says or what survives: another
writer's event, a failed commit and a cancel during the commit each leave the fold equal to
the store's, and a context policy that waits commits the result before it waits."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tether import Agent, tool
from tether.context.view import ContextView
from tether.errors import CorruptLog
from tether.events import (
    Event,
    ModelRequested,
    ModelResponded,
    SessionCreated,
    ToolFinished,
    ToolStarted,
    UserMessage,
)
from tether.fold import Folder
from tether.messages import ToolCall, assistant, user
from tether.session import control
from tether.session.lease import claim_lease
from tether.session.log import SessionLog
from tether.store import MemoryStore
from tether.store.base import Lease
from tether.store.sqlite import SQLiteStore
from tether.testing import ScriptedModel, call, say


@tool(effect="read")
async def look() -> str:
    """Look around."""
    return "ok"


class BatchesStore(SQLiteStore):
    """The real SQLite store, noting the event types of each batch it commits."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.batches: list[list[str]] = []

    async def append(  # type: ignore[override]
        self,
        session_id: str,
        events: list[Event],
        expected: int,
        lease: Lease | None = None,
        **catalog: Any,
    ) -> None:
        await super().append(session_id, events, expected, lease, **catalog)
        self.batches.append([e.payload.type for e in events])


async def test_a_steps_last_result_commits_with_the_next_request(tmp_path: Path) -> None:
    store = BatchesStore(tmp_path / "s.db")
    model = ScriptedModel([say("", call("look"), call("look")), call("look"), "done"])
    result = await Agent(model, tools=[look], store=store).run("go")
    assert result.stop_reason == "end_turn"
    assert store.batches[2:] == [
        ["model.responded", "tool.started", "tool.started"],
        ["tool.finished"],  # the first of two parallel calls commits as it returns
        ["tool.finished", "model.requested"],  # the step's last rides with the next request
        ["model.responded", "tool.started"],
        ["tool.finished", "model.requested"],
        ["model.responded", "turn.ended"],
    ]
    events = await store.read(result.session_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    await store.close()


ANSWER = ModelResponded(assistant(calls=[ToolCall("c1", "look", {})]), stop="tool_use")
RESULT = ToolFinished("c1", "ok", "ok", 1.0)
REQUEST = ModelRequested("m", "h", 10)


async def _held_log(store: MemoryStore) -> tuple[SessionLog, list[Event]]:
    """A worker's log of a session whose one call just returned, its result held."""
    seen: list[Event] = []
    log = SessionLog(store, "s", observers=(seen.append,))
    await log.append(SessionCreated("m"), UserMessage(user("go")))
    log.lease = await claim_lease(store, "s", "worker", 30.0, 0.0)
    await log.append(REQUEST, ANSWER, ToolStarted("c1", "look", "read"))
    assert log.hold(RESULT)
    assert log.held and not log.folder.open_calls  # folded: the next request sees it
    assert [e.payload.type for e in seen][-1] == "tool.started"  # but nobody was told yet
    return log, seen


def _same_fold(log: SessionLog, events: list[Event]) -> None:
    fresh = Folder().apply_all(events)
    assert log.folder.view() == fresh.view()
    assert log.folder.messages == fresh.messages
    assert log.folder.last_seq == events[-1].seq


async def test_another_writers_event_goes_first_and_the_held_result_after_it() -> None:
    store = MemoryStore()
    log, seen = await _held_log(store)
    await control.request_stop(store, "s", "turn")  # a cancel lands while the result is held
    await log.append(REQUEST)
    events = await store.read("s")
    assert [e.payload.type for e in events[-3:]] == [
        "cancel.requested",
        "tool.finished",
        "model.requested",
    ]
    _same_fold(log, events)
    assert log.folder.cancel_scope == "turn"
    assert [e.seq for e in seen] == [e.seq for e in events]  # each told once, in order


class RefusingStore(MemoryStore):
    """A memory store that refuses the next append for good (not a blip, tried again)."""

    refuse = False

    async def append(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def, override]
        if self.refuse:
            self.refuse = False
            raise CorruptLog("the page is damaged")
        await super().append(*args, **kwargs)


async def test_a_refused_commit_loses_the_held_result_and_the_fold_follows_the_store() -> None:
    store = RefusingStore()
    log, seen = await _held_log(store)
    store.refuse = True
    with pytest.raises(CorruptLog, match="damaged"):
        await log.append(REQUEST)
    await log.refresh()
    events = await store.read("s")
    assert events[-1].payload.type == "tool.started"  # nothing of the batch was stored
    _same_fold(log, events)
    assert [c.id for c in log.folder.open_calls] == ["c1"]  # open again, as the store says
    assert "tool.finished" not in [e.payload.type for e in seen]
    assert not log.held


class SlowStore(MemoryStore):
    async def append(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def, override]
        await asyncio.sleep(0.02)
        await super().append(*args, **kwargs)


async def test_a_cancel_during_the_commit_still_lands_the_held_result() -> None:
    store = SlowStore()
    log, _ = await _held_log(store)
    committing = asyncio.create_task(log.append(REQUEST))
    await asyncio.sleep(0.005)
    committing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await committing
    await asyncio.sleep(0.05)  # the shielded commit goes on
    events = await store.read("s")
    assert [e.payload.type for e in events[-2:]] == ["tool.finished", "model.requested"]
    await log.refresh()
    _same_fold(log, events)


async def test_a_log_without_a_lease_or_with_a_thread_open_does_not_hold() -> None:
    store = MemoryStore()
    log = SessionLog(store, "s")
    await log.append(SessionCreated("m"), UserMessage(user("go")))
    assert not log.hold(RESULT)  # a control-plane writer appends what it has
    log.lease = await claim_lease(store, "s", "worker", 30.0, 0.0)
    branch = log.branch(Folder("t1"))
    assert not log.hold(RESULT)
    branch.close()
    assert log.hold(RESULT)


@pytest.mark.parametrize("waits", [True, False])
async def test_a_policy_that_waits_commits_the_held_result_first(waits: bool) -> None:
    store = MemoryStore()
    last_stored: list[str] = []

    async def policy(view: ContextView) -> list[object]:
        if waits:
            await asyncio.sleep(0)  # as a summary's model call would
        last_stored.append((await store.read(view.session_id))[-1].payload.type)
        return []

    model = ScriptedModel([call("look"), "done"])
    result = await Agent(model, tools=[look], store=store, context=policy).run("go")
    assert result.stop_reason == "end_turn"
    # Before the second request: the result is stored first only for a policy that waits.
    assert last_stored[1] == ("tool.finished" if waits else "tool.started")


async def test_a_stop_condition_hears_each_result_before_it_judges(tmp_path: Path) -> None:
    """A stop condition may count what an `on_event` observer heard: with one, no result is
    held, so the observer has heard the step's result when the condition is asked."""
    store = BatchesStore(tmp_path / "s.db")
    heard: list[str] = []
    model = ScriptedModel([call("look"), call("look"), "done"])
    agent = Agent(
        model,
        tools=[look],
        store=store,
        on_event=lambda e: heard.append(e.type),
        stop_when=lambda view: "heard two" if heard.count("tool.finished") == 2 else None,
    )
    result = await agent.run("go")
    assert (result.stop_reason, result.steps) == ("heard two", 2)
    assert ["tool.finished"] in store.batches  # committed alone, as it returned
    await store.close()
