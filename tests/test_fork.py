"""Forking a session (`session/fork.py`) on the memory store: where a fork point is, what is
refused there, what the child's first events, row and fold are, and that the window a fork
reads agrees with the whole fold at every cut of the golden logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether import Agent, tool
from tether.errors import SessionNotFound, UsageError
from tether.events import (
    Event,
    ModelResponded,
    Payload,
    SessionCreated,
    SessionEnded,
    SessionForked,
    ToolStarted,
    TurnEnded,
    UserMessage,
)
from tether.fold import Folder
from tether.messages import Message, Text, ToolCall, canonical_json, user
from tether.providers.base import ModelRequest, ModelResponse
from tether.session import fork as fork_module
from tether.session import snapshots
from tether.session.fork import ForkChanges, ForkPoint, _fold_window, _window, fork
from tether.session.origin import setup_of
from tether.store import catalog
from tether.store.catalog import CatalogQuery
from tether.store.memory import MemoryStore
from tether.testing.scripted import ScriptedModel, call, say

GOLDEN = Path(__file__).parent / "golden"


class Heard(ScriptedModel):
    """A scripted model that keeps the requests it was sent."""

    def __init__(self, replies: list[object]) -> None:
        super().__init__(replies)  # type: ignore[arg-type]
        self.requests: list[tuple[str | None, tuple[Message, ...]]] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append((request.system, tuple(request.messages)))  # as sent: the list grows
        return await super().complete(request)


def _read_log(path: Path) -> list[Event]:
    return [Event.from_json(json.loads(line)) for line in path.read_text().splitlines() if line]


def _checked(folder: Folder) -> tuple[list[str], list[str], bool]:
    open_calls = [c.id for c in folder.open_calls if c.id not in folder.results]
    running = [n.thread for n in folder.thread_nodes.values() if n.status == "running"]
    return open_calls, running, folder.turn_open


@pytest.mark.parametrize(
    "log", sorted(GOLDEN.glob("*.events.jsonl")), ids=lambda p: p.name.split(".")[0]
)
@pytest.mark.parametrize("page", [2, 500])
async def test_the_window_a_fork_reads_sees_what_the_whole_fold_sees_at_every_cut(
    log: Path, page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fork_module, "PAGE", page)  # windows that span pages too
    events = _read_log(log)
    store = MemoryStore()
    await store.append(events[0].session_id, events, 0)
    for at in range(1, len(events) + 1):
        window, from_start = await _window(store, events[0].session_id, at)
        assert window[-1].seq == at
        assert _checked(_fold_window(window, from_start)) == _checked(
            Folder().apply_all(events[:at])
        ), f"seq {at}"


async def _four_turns(store: MemoryStore, *, tools: list[object] | None = None) -> str:
    agent = Agent(
        model=ScriptedModel([say(f"answer {i}") for i in range(4)]),
        store=store,
        system="be brief",
        tools=tools or [],
    )
    sid = (await agent.run("turn one")).session_id
    for text in ("turn two", "turn three", "turn four"):
        await agent.run(text, session_id=sid)
    return sid


def _hashes(events: list[Event]) -> list[str]:
    return [e.payload.request_hash for e in events if e.type == "model.requested"]  # type: ignore[union-attr]


async def test_a_fork_at_a_turns_start_repeats_the_parents_request_of_that_turn() -> None:
    store = MemoryStore()
    sid = await _four_turns(store)
    parent = await store.read(sid)
    forked = await fork(store, sid, ForkPoint(turn=2))
    turn_two = next(e.seq for e in parent if e.type == "user.message" and e.seq > 2)
    assert (forked.at, forked.state, forked.parent_last_seq) == (turn_two, "pending", len(parent))

    child = Agent(model=ScriptedModel([say("x"), say("child")]), store=store, system="be brief")
    result = await child.resume(forked.session_id)
    assert result.output == "child"
    events = await store.read(forked.session_id)
    assert {e.session_id for e in events} == {forked.session_id}
    assert [e.id for e in events[: forked.at]] == [e.id for e in parent[: forked.at]]
    assert isinstance(events[forked.at].payload, SessionForked)
    assert _hashes(events)[1] == _hashes(parent)[1]  # the child's first request is turn 2's
    mine = Folder().apply_all(events[: forked.at]).transcript().canonical()
    assert mine == Folder().apply_all(parent[: forked.at]).transcript().canonical()


async def test_a_changed_model_and_system_prompt_are_the_childs_own() -> None:
    store = MemoryStore()
    sid = await _four_turns(store)
    changes = ForkChanges(model="other", system="be long", metadata={"team": "b"})
    forked = await fork(store, sid, ForkPoint(after_turn=2), changes=changes, message="go on")
    setup = await setup_of(store, forked.session_id)
    assert isinstance(setup, SessionForked)
    assert (setup.model, setup.system, setup.metadata["team"]) == ("other", "be long", "b")
    assert (setup.parent, setup.kind) == (sid, "fork")
    model = Heard([say("x"), say("y"), say("z")])
    child = Agent(model=model, store=store, system="be long")
    await child.resume(forked.session_id)
    assert [(system, sent[-1]) for system, sent in model.requests] == [("be long", user("go on"))]


@pytest.mark.parametrize("page", [3, 500])
async def test_fork_points_past_the_log_or_its_turns_are_refused_naming_what_there_is(
    page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fork_module, "PAGE", page)
    store = MemoryStore()
    sid = await _four_turns(store)
    with pytest.raises(UsageError, match="ends at seq 17: there is no seq 99"):
        await fork(store, sid, ForkPoint(seq=99))
    with pytest.raises(UsageError, match="has 4 finished turn"):
        await fork(store, sid, ForkPoint(turn=6))
    with pytest.raises(UsageError, match="one of seq, turn and after_turn"):
        ForkPoint(seq=3, turn=2)
    with pytest.raises(UsageError, match="whole number from 1"):
        ForkPoint(turn=0)
    assert len(store._logs) == 1  # nothing stored


async def test_another_tenants_session_or_an_unknown_one_is_not_found() -> None:
    store = MemoryStore()
    sid = await _four_turns(store)
    with pytest.raises(SessionNotFound):
        await fork(store, sid, tenant="someone-else")
    with pytest.raises(SessionNotFound):
        await fork(store, "ses_nope")


@tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


async def test_a_call_waiting_for_approval_is_refused_unless_the_fork_answers_it() -> None:
    store = MemoryStore()
    agent = Agent(
        model=ScriptedModel([say("paying", call("pay", amount=3))]), store=store, tools=[pay]
    )
    sid = (await agent.run("pay three")).session_id
    with pytest.raises(UsageError, match=r"calls without results: pay \("):
        await fork(store, sid)
    forked = await fork(store, sid, open_calls="cancel")
    assert forked.answered and forked.state == "idle"
    events = await store.read(forked.session_id)
    answer = events[-1].payload
    assert answer.type == "tool.finished" and answer.outcome == "canceled"  # type: ignore[union-attr]
    view = Folder().apply_all(events).view()
    assert not view.open_calls and view.state == "idle"


async def test_a_started_call_the_fork_answers_has_an_unknown_effect_and_never_runs() -> None:
    store = MemoryStore()
    items: list[Payload] = [
        SessionCreated("m"),
        UserMessage(user("go")),
        ModelResponded(Message("assistant", (Text("on it"), ToolCall("c1", "send", {})))),
        ToolStarted("c1", "send", "write"),
    ]
    await store.append(
        "s",
        [Event("s", i, f"e{i}", "2026-01-01T00:00:00.000000Z", p) for i, p in enumerate(items, 1)],
        0,
    )
    forked = await fork(store, "s", open_calls="cancel")
    answer = (await store.read(forked.session_id))[-1].payload
    assert answer.outcome == "unknown_effect"  # type: ignore[union-attr]
    assert forked.state == "pending"  # mid-turn: the child's runner goes on from the result


async def test_a_fork_at_the_end_of_an_ended_session_stops_before_its_end() -> None:
    store = MemoryStore()
    agent = Agent(model=ScriptedModel([say("done")]), store=store)
    sid = (await agent.run("once", end_session=True)).session_id
    parent = await store.read(sid)
    assert isinstance(parent[-1].payload, SessionEnded)
    forked = await fork(store, sid, message="and again")
    assert forked.at == len(parent) - 1 and forked.state == "pending"
    with pytest.raises(UsageError, match="is its end"):
        await fork(store, sid, ForkPoint(seq=len(parent)))


async def test_the_childs_row_is_its_own_work_and_agrees_with_a_fold_of_its_whole_log() -> None:
    store = MemoryStore()
    sid = await _four_turns(store)
    forked = await fork(store, sid, ForkPoint(after_turn=3))
    row = await store.catalog_row(forked.session_id)
    assert row is not None
    assert (row.parent, row.task, row.state, row.steps, row.turns, row.tokens) == (
        sid,
        "turn one",
        "idle",
        0,
        0,
        0,
    )
    assert row == catalog.row_for_log(await store.read(forked.session_id))  # as rebuild makes it
    agent = Agent(model=ScriptedModel([say(str(i)) for i in range(5)]), store=store)
    await agent.run("more", session_id=forked.session_id)
    after = await store.catalog_row(forked.session_id)
    parent_row = await store.catalog_row(sid)
    assert after is not None and parent_row is not None
    assert (after.steps, after.turns) == (1, 1)
    assert after.tokens < parent_row.tokens  # the parent's spending is not the child's
    found = await store.catalog(CatalogQuery(parent=sid))
    assert [r.session_id for r in found] == [forked.session_id]
    assert [r.session_id for r in await store.catalog(CatalogQuery(parent=""))] == [sid]


async def test_a_fork_of_a_fork_reads_through_both_and_takes_the_middle_ones_setup() -> None:
    store = MemoryStore()
    sid = await _four_turns(store)
    middle = await fork(store, sid, ForkPoint(after_turn=2), changes=ForkChanges(model="mid"))
    agent = Agent(model=ScriptedModel([say(str(i)) for i in range(5)]), store=store)
    await agent.run("third, again", session_id=middle.session_id)
    last = await fork(store, middle.session_id, ForkPoint(after_turn=3))
    events = await store.read(last.session_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert {e.session_id for e in events} == {last.session_id}
    setup = await setup_of(store, last.session_id)
    assert isinstance(setup, SessionForked) and setup.model == "mid"
    assert setup.parent == middle.session_id
    texts = [m.text for m in Folder().apply_all(events).messages if m.role == "user"]
    assert texts == ["turn one", "turn two", "third, again"]
    assert [e.seq for e in await store.read(last.session_id, 3, limit=4)] == [4, 5, 6, 7]


async def test_a_child_takes_up_from_its_parents_snapshot_not_its_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore()
    sid = await _four_turns(store)
    folder = Folder().apply_all(await store.read(sid))
    from tether import snapshot
    from tether.store.base import Snapshot

    await store.put_snapshot(
        Snapshot(sid, folder.last_seq, snapshot.VERSION, snapshot.encode(folder))
    )
    forked = await fork(store, sid)
    reads: list[int] = []
    real = store.read

    async def counted(session_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        found = await real(session_id, after_seq, limit)
        reads.append(len(found))
        return found

    monkeypatch.setattr(store, "read", counted)
    taken, since, tail = await snapshots.start(store, forked.session_id, kept=False)
    assert since == folder.last_seq and [e.type for e in tail] == ["session.forked"]
    assert sum(reads) == 1
    assert taken.session_id == forked.session_id and taken.forked is not None
    full = Folder().apply_all(await real(forked.session_id))
    assert canonical_json(taken.view().to_json()) == canonical_json(full.view().to_json())


async def test_a_sessions_own_snapshot_of_another_session_is_still_refused() -> None:
    store = MemoryStore()
    sid = await _four_turns(store)
    other = await _four_turns(store)
    folder = Folder().apply_all(await store.read(other))
    from tether import snapshot
    from tether.store.base import Snapshot

    await store.put_snapshot(
        Snapshot(sid, folder.last_seq, snapshot.VERSION, snapshot.encode(folder))
    )
    assert await snapshots.stored(store, sid) is None


def test_a_forked_event_sets_up_the_fold_and_counts_from_zero() -> None:
    items: list[Payload] = [
        SessionCreated("m", "sys", metadata={"tenant": "t"}),
        UserMessage(user("go")),
        ModelResponded(Message("assistant", (Text("done"),))),
        TurnEnded("end_turn"),
        SessionForked("p", 4, "e4", "d", "m2", "other", metadata={"tenant": "t"}),
    ]
    events = [
        Event("c", i, f"e{i}", f"2026-01-01T00:00:0{i}.000000Z", p) for i, p in enumerate(items, 1)
    ]
    folder = Folder().apply_all(events)
    assert (folder.model, folder.system, folder.state, folder.stop_reason) == (
        "m2",
        "other",
        "idle",
        None,
    )
    assert (folder.steps, folder.turns, folder.tokens, folder.last_output) == (0, 0, (0,) * 5, "")
    assert folder.created == "2026-01-01T00:00:05.000000Z"
    assert [m.text for m in folder.messages] == ["go", "done"]
    assert folder.forked is not None and folder.forked.parent == "p"
    assert TurnEnded  # the prefix's stop is the parent's
