"""Replaying a recorded session (`session/replay.py`) from a fork point with a variant: its
later turns sent in order, its recorded tool results a cassette (`tools/cassette.py`) that
serves the calls that repeat, and the `live` policy for the others (a write never runs
live unless asked)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from replaying import Kit, model, question, record, same_reply
from tether import Agent, Limits
from tether.errors import HandedOver, SessionNotFound, UsageError
from tether.events import SessionEnded, ThreadStarted, ToolFinished, TurnEnded, UserMessage
from tether.messages import Message, ToolCall, ToolResult
from tether.recovery import Decision
from tether.session.fork import ForkPoint
from tether.session.replay import Replayed, replay, resume_replay
from tether.store.base import Store
from tether.store.catalog import CatalogQuery
from tether.testing import ScriptedModel, call
from tether.testing.scripted import Hang, Reply
from tether.tools.cassette import ToolCassette, recorded_calls


async def _own(store: Store, replayed: Replayed) -> list[ToolFinished]:
    """The replay's own tool results, in order."""
    events = await store.read(replayed.session_id, replayed.at)
    return [e.payload for e in events if isinstance(e.payload, ToolFinished)]


async def test_a_replay_from_turn_2_of_4_runs_turns_2_3_and_4_in_order(store: Store) -> None:
    kit = Kit()
    source = await record(store, kit, 1, 4)
    variant = Agent(model("same"), tools=kit.tools, store=store)
    done = await replay(variant, source, ForkPoint(turn=2))

    assert (done.turns, done.ran_turns, done.result.state) == (3, 3, "completed")
    own = await store.read(done.session_id, done.at)
    kinds = [
        (type(e.payload).__name__, e.payload.message.text)
        if isinstance(e.payload, UserMessage)
        else type(e.payload).__name__
        for e in own
        if isinstance(e.payload, UserMessage | TurnEnded | SessionEnded)
    ]
    # Turn 2's message is the fork point's; 3 and 4 are sent, each after the turn before.
    assert kinds == [
        "TurnEnded", ("UserMessage", "s1-t3"), "TurnEnded", ("UserMessage", "s1-t4"),
        "TurnEnded", "SessionEnded",
    ]  # fmt: skip
    assert done.result.output == "found: answer to s1-t4" and done.result.steps == 2


async def test_repeated_calls_are_served_from_the_recording_and_nothing_runs(
    store: Store,
) -> None:
    kit = Kit()
    source = await record(store, kit, 1, 3)
    parent = await store.read(source)
    recorded = {e.id: e for e in parent if isinstance(e.payload, ToolFinished)}
    kit.clear()
    done = await replay(
        Agent(model("same"), tools=kit.tools, store=store), source, ForkPoint(turn=2)
    )

    assert (kit.looked, kit.noted) == ([], [])  # not one tool ran: the write neither
    own = await _own(store, done)
    assert (done.served, done.ran, done.refused) == (4, 0, 0) and len(own) == 4
    for result in own:
        served = recorded[result.replayed]
        assert isinstance(served.payload, ToolFinished)
        assert (result.outcome, result.content) == (served.payload.outcome, served.payload.content)
    # Each recorded result serves once, and they are turn 2's and 3's, in order.
    assert [r.replayed for r in own] == [i for i in recorded][2:]
    # The source's events keep their bytes: `replayed` is written only where it is set.
    assert all("replayed" not in e.to_json()["data"] for e in parent)  # type: ignore[operator]
    assert (await store.read(source)) == parent


async def test_by_default_new_reads_run_live_and_new_writes_are_refused(store: Store) -> None:
    kit = Kit()
    source = await record(store, kit, 3, 2)  # session 3: the curious variant notes
    kit.clear()
    variant = Agent(model("curious"), tools=kit.tools, store=store)
    done = await replay(variant, source, ForkPoint(turn=1))

    # Each turn: its lookup served, a new note refused; the answer says so.
    assert kit.looked == [] and kit.noted == []
    own = await _own(store, done)
    assert [(r.outcome, bool(r.replayed)) for r in own] == [("ok", True), ("denied", False)] * 2
    assert "note may write (effect='write')" in own[1].content
    assert "live='all'" in own[1].content and source in own[1].content
    assert done.result.output == "could not note it" and done.ran_turns == 2
    assert (done.served, done.ran, done.refused) == (2, 0, 2)


async def test_new_reads_run_live_under_reads(store: Store) -> None:
    kit = Kit()
    source = await record(store, kit, 1, 2)
    kit.clear()
    done = await replay(
        Agent(model("curious"), tools=kit.tools, store=store), source, ForkPoint(turn=1)
    )
    # Each turn: its recorded lookup served, a lookup of a new question run.
    assert kit.looked == ["s1-t1?", "s1-t2?"] and kit.noted == []
    assert (done.served, done.ran, done.refused) == (2, 2, 0)
    assert [bool(r.replayed) for r in await _own(store, done)] == [True, False] * 2


async def test_live_none_refuses_new_reads_and_live_all_runs_new_writes(store: Store) -> None:
    kit = Kit()
    reads = await record(store, kit, 1, 1)
    writes = await record(store, kit, 3, 1)
    kit.clear()
    variant = Agent(model("curious"), tools=kit.tools, store=store)
    none = await replay(variant, reads, ForkPoint(turn=1), live="none")
    assert kit.looked == [] and (none.served, none.ran, none.refused) == (1, 0, 1)
    refused = (await _own(store, none))[1]
    assert refused.outcome == "denied" and "live='none'" in refused.content

    every = await replay(variant, writes, ForkPoint(turn=1), live="all")
    assert kit.noted == ["curious about s3-t1"] and (every.ran, every.refused) == (1, 0)


async def test_a_system_prompt_and_the_variant_are_the_childs(store: Store) -> None:
    kit = Kit()
    source = await record(store, kit, 1, 2)
    variant = Agent(model("same"), tools=kit.tools, store=store, metadata={"team": "b"})
    done = await replay(variant, source, ForkPoint(after_turn=1), system="be brief")
    row = await store.catalog_row(done.session_id)
    assert row is not None and row.parent == source
    forked = (await store.read(done.session_id, done.at, limit=1))[0].payload
    assert (
        getattr(forked, "kind", None) == "replay" and getattr(forked, "system", None) == "be brief"
    )
    source_last = (await store.catalog_row(source)).last_seq  # type: ignore[union-attr]
    assert getattr(forked, "metadata", {})["replay"] == {"live": "reads", "until": source_last}
    assert getattr(forked, "metadata", {})["team"] == "b"
    # From the end of turn 1: turn 2's message is sent, and its calls served.
    assert (done.turns, done.served) == (1, 2)


async def test_what_cannot_be_replayed_is_refused_and_nothing_is_stored(store: Store) -> None:
    kit = Kit()
    source = await record(store, kit, 1, 2)
    other = Agent(model("same"), tools=kit.tools, store=store, metadata={"tenant": "acme"})
    theirs = (await other.run("s9-t1")).session_id
    variant = Agent(model("same"), tools=kit.tools, store=store)
    before = await store.catalog(CatalogQuery(limit=100))

    with pytest.raises(SessionNotFound):
        await replay(variant, "ses_0000000000000000", ForkPoint(turn=1))
    with pytest.raises(SessionNotFound):  # another tenant's: as if it did not exist
        await replay(variant, theirs, ForkPoint(turn=1), tenant="globex")
    with pytest.raises(UsageError, match="turn 5"):
        await replay(variant, source, ForkPoint(turn=5))
    with pytest.raises(UsageError, match="nothing after its end to replay"):
        await replay(variant, source, ForkPoint())
    with pytest.raises(UsageError, match="live must be one of none, reads, all"):
        await replay(variant, source, ForkPoint(turn=1), live="some")  # type: ignore[arg-type]
    assert await store.catalog(CatalogQuery(limit=100)) == before


def test_a_recorded_result_serves_one_repeat_and_a_resumed_replay_skips_those_used() -> None:
    from tether.events import Event, ModelResponded
    from tether.messages import Message

    def event(seq: int, payload: ModelResponded | ToolFinished) -> Event:
        return Event("ses_s", seq, f"ev_{seq}", "2026-01-01T00:00:00.000000Z", payload)

    calls = (ToolCall("c1", "lookup", {"q": "x"}), ToolCall("c2", "lookup", {"q": "x"}))
    log = [
        event(1, ModelResponded(Message("assistant", calls))),
        event(2, ToolFinished("c1", "ok", "first")),
        event(3, ToolFinished("c2", "ok", "second")),
    ]
    kit = Kit()
    lookup = kit.tools[0]

    def decided(cassette: ToolCassette, *ids: str) -> list[str]:
        asked = [
            Decision(ToolCall(i, "lookup", {"q": "x"}), "run", None, lookup, {"q": "x"})
            for i in ids
        ]
        return [
            d.answer.content if d.answer is not None else d.action for d in cassette.decide(asked)
        ]

    fresh = ToolCassette(recorded_calls(log), source="ses_s")
    assert decided(fresh, "n1", "n2", "n3") == ["first", "second", "run"]
    resumed = ToolCassette(recorded_calls(log), source="ses_s", used={"ev_2"})
    assert decided(resumed, "n1", "n2") == ["second", "run"]


async def test_a_replay_handed_over_mid_turn_is_resumed_where_it_stopped(store: Store) -> None:
    kit = Kit()
    source = await record(store, kit, 1, 4)
    kit.clear()
    reached = asyncio.Event()

    def hang_at_turn_3(messages: Sequence[Message]) -> Reply:
        if question(messages) == "s1-t3" and not reached.is_set():
            reached.set()
            return Hang()
        return same_reply(messages)

    stalling = Agent(
        ScriptedModel([hang_at_turn_3], repeat_last=True), tools=kit.tools, store=store
    )
    running = asyncio.create_task(replay(stalling, source, ForkPoint(turn=2)))
    await asyncio.wait_for(reached.wait(), 10)
    (row,) = await store.catalog(CatalogQuery(parent=source))
    assert await stalling.hand_over(row.session_id)  # as a worker that shuts down
    with pytest.raises(HandedOver):
        await running

    variant = Agent(model("same"), tools=kit.tools, store=store)
    done = await resume_replay(variant, row.session_id)
    # Turn 3 goes on from its open request; turn 4 is sent; turn 2's results are not served
    # again, and nothing ran.
    assert (done.turns, done.ran_turns, done.result.state) == (2, 2, "completed")
    assert (done.served, done.ran, done.refused, kit.looked, kit.noted) == (4, 0, 0, [], [])
    own = await store.read(row.session_id, done.at)
    sent = [e.payload.message.text for e in own if isinstance(e.payload, UserMessage)]
    assert sent == ["s1-t3", "s1-t4"]
    served = [p.replayed for e in own if isinstance(p := e.payload, ToolFinished)]
    assert len(served) == len(set(served)) == 6
    with pytest.raises(UsageError, match="is not a replay"):
        await resume_replay(variant, source)
    # Done: nothing is left to run.
    again = await resume_replay(variant, row.session_id)
    assert (again.turns, again.ran_turns, again.result.state) == (0, 0, "completed")


async def test_a_replay_that_stopped_at_an_unfinished_turn_is_not_resumed(store: Store) -> None:
    kit = Kit()
    source = await record(store, kit, 1, 3)
    tight = Agent(model("same"), tools=kit.tools, store=store, limits=Limits(max_steps=1))
    done = await replay(tight, source, ForkPoint(turn=2))
    assert (done.ran_turns, done.result.stop_reason) == (1, "turn_limit")
    again = await resume_replay(Agent(model("same"), tools=kit.tools, store=store), done.session_id)
    assert (again.turns, again.ran_turns, again.result.stop_reason) == (0, 0, "turn_limit")


def _did(messages: Sequence[Message]) -> bool:
    return any(isinstance(p, ToolResult) for p in messages[-1].parts)


def _writer(messages: Sequence[Message]) -> Reply:
    return "wrote" if _did(messages) else call("note", text=question(messages))


def _reader(messages: Sequence[Message]) -> Reply:
    return "read" if _did(messages) else call("lookup", q=question(messages))


def _lead(*asks: str) -> ScriptedModel:
    """Asks its sub-agents (`writer`: `writer(task=Q)`, `writer!`: `writer(task=Q!)`,
    `reader?`: `reader(task=Q?)`), then says it is done."""

    def reply(messages: Sequence[Message]) -> Reply:
        if _did(messages):
            return "done"
        q = question(messages)
        return [call(a.rstrip("!?"), task=q + a[len(a.rstrip("!?")) :]) for a in asks]

    return ScriptedModel([reply], repeat_last=True)


async def test_a_sub_agent_is_served_when_it_repeats_and_runs_live_only_if_it_cannot_write(
    store: Store,
) -> None:
    kit = Kit()
    lookup, note = kit.tools
    helpers = [
        Agent(ScriptedModel([_writer], repeat_last=True), tools=[note], name="writer").as_tool(),
        Agent(ScriptedModel([_reader], repeat_last=True), tools=[lookup], name="reader").as_tool(),
    ]
    recorded = await Agent(_lead("writer"), tools=helpers, store=store).run("q1")
    assert kit.noted == ["q1"]
    kit.clear()

    variant = Agent(_lead("writer", "writer!", "reader?"), tools=helpers, store=store)
    done = await replay(variant, recorded.session_id, ForkPoint(turn=1))
    # writer(q1) repeats: served, its thread never started; writer(q1!) would write: refused;
    # reader(q1?) cannot write: it runs live, on a thread of its own.
    assert (done.served, done.ran, done.refused) == (1, 1, 1)
    assert kit.noted == [] and kit.looked == ["q1?"]
    own = await store.read(done.session_id, done.at)
    assert [e.payload.agent for e in own if isinstance(e.payload, ThreadStarted)] == ["reader"]
    refused = next(
        p for e in own if isinstance(p := e.payload, ToolFinished) and p.outcome == "denied"
    )
    assert "writer has tools that may write (effect='write')" in refused.content
