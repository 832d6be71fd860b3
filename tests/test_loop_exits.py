"""The classic ways a turn ends: an answer after a failed call, the step limit, an interrupt,
a cancelled caller and a cancelled session. Each is read back from the committed log."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from invariants import kinds, payloads, read_checked
from tether import Agent, Event, Limits, Message, ToolContext, fold, tool
from tether.agent import RunResult
from tether.errors import UsageError
from tether.events import (
    CancelRequested,
    Effect,
    ModelRequested,
    SessionEnded,
    ToolFinished,
    ToolStarted,
    TurnEnded,
)
from tether.recovery import ABANDONED, CANCELED_RUNNING
from tether.session import control
from tether.store import Store
from tether.testing import ScriptedModel, call
from tether.testing.scripted import Hang, Reply
from tether.tools import Tool
from tether.tools.run import SYNC_GRACE

FORECASTS = {"Paris": "light rain, 14 °C", "Lisbon": "sunny, 22 °C"}


@tool(effect="read")
def forecast(city: str) -> str:
    """Saturday's forecast for a city."""
    if city not in FORECASTS:
        raise LookupError(f"no forecast for {city}")
    return FORECASTS[city]


class RequestWatch:
    """An `on_event` observer: which sessions asked the model, and a wait for the first."""

    def __init__(self) -> None:
        self.requested = asyncio.Event()
        self.session_ids: list[str] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event.payload, ModelRequested):
            self.session_ids.append(event.session_id)
            self.requested.set()

    async def first(self) -> str:
        await asyncio.wait_for(self.requested.wait(), 5)
        return self.session_ids[0]


class Blocker:
    """A tool body that blocks until cancelled and says what it saw."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.session_id = ""
        self.saw: list[str] = []

    def make(self, name: str = "slow") -> Tool:
        async def body(ctx: ToolContext) -> str:
            self.session_id = ctx.session_id
            self.started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.saw.append(ctx.call_id)
                raise
            return "finished"

        body.__name__ = name
        return tool(body)


async def test_a_failed_call_goes_back_to_the_model_which_retries_and_answers(store: Store) -> None:
    def retry_after_error(messages: Sequence[Message]) -> Reply:
        # The model reacts to what it was sent: only a visible error makes it retry.
        result = messages[-1].tool_results[0]
        if result.is_error and "no forecast for Atlantis" in result.content:
            return call("forecast", city="Lisbon")
        return "I never saw the error"

    model = ScriptedModel(
        [call("forecast", city="Atlantis"), retry_after_error, "Lisbon: sunny, 22 °C"]
    )
    agent = Agent(model, tools=[forecast], store=store)

    result = await agent.run("Picnic in Atlantis or Lisbon?")

    assert (result.stop_reason, result.state) == ("end_turn", "idle")
    assert result.output == "Lisbon: sunny, 22 °C"
    events = await read_checked(store, result.session_id)
    outcomes = [(f.outcome, f.content) for f in payloads(events, ToolFinished)]
    assert outcomes[0][0] == "error"
    assert "LookupError: no forecast for Atlantis" in outcomes[0][1]
    assert outcomes[1] == ("ok", "sunny, 22 °C")
    transcript, _ = fold(events)
    roles = [m.role for m in transcript.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    first_result = transcript.messages[2].tool_results[0]
    assert first_result.is_error and "no forecast for Atlantis" in first_result.content
    assert payloads(events, TurnEnded) == [TurnEnded("end_turn", None)]


async def test_a_model_that_only_asks_for_tools_ends_at_the_turn_limit(store: Store) -> None:
    model = ScriptedModel([call("forecast", city="Paris")], repeat_last=True)
    agent = Agent(model, tools=[forecast], store=store, limits=Limits(max_steps=5))

    result = await agent.run("Keep checking Paris")

    assert (result.stop_reason, result.state, result.steps) == ("turn_limit", "idle", 5)
    assert result.stop_detail is not None and "max_steps=5" in result.stop_detail
    events = await read_checked(store, result.session_id)
    assert kinds(events).count("model.requested") == 5
    assert kinds(events).count("model.responded") == 5
    assert kinds(events).count("tool.finished") == 5
    # The limit is checked before a request: the last thing before turn.ended is a result.
    assert kinds(events)[-2:] == ["tool.finished", "turn.ended"]

    again = await agent.run("Once more", session_id=result.session_id)
    assert (again.stop_reason, again.steps) == ("turn_limit", 5)
    events = await read_checked(store, result.session_id)
    assert kinds(events).count("model.requested") == 10


async def test_an_interrupt_while_a_tool_runs_ends_the_turn_interrupted_and_the_session_goes_on(
    store: Store,
) -> None:
    blocker = Blocker()
    model = ScriptedModel([call("slow"), "picked up where we left off"])
    agent = Agent(model, tools=[blocker.make()], store=store)

    running = asyncio.create_task(agent.run("Start the slow job"))
    await asyncio.wait_for(blocker.started.wait(), 5)
    await agent.interrupt(blocker.session_id)
    result = await asyncio.wait_for(running, 5)

    assert (result.stop_reason, result.state) == ("interrupted", "idle")
    assert blocker.saw == ["call_0_0"], "the running tool must see the cancel"
    events = await read_checked(store, result.session_id)
    assert payloads(events, CancelRequested) == [CancelRequested("turn")]
    (finished,) = payloads(events, ToolFinished)
    assert (finished.call_id, finished.outcome) == ("call_0_0", "canceled")
    started_at = kinds(events).index("tool.started")
    assert "model.requested" not in kinds(events)[started_at:]
    assert kinds(events)[-1] == "turn.ended"
    assert payloads(events, TurnEnded)[-1].stop_reason == "interrupted"
    assert (await agent.view(result.session_id)).state == "idle"

    again = await agent.run("Go on", session_id=result.session_id)
    assert (again.stop_reason, again.output) == ("end_turn", "picked up where we left off")
    await read_checked(store, result.session_id)


async def test_cancelling_the_callers_task_propagates_and_still_closes_the_turn(
    store: Store,
) -> None:
    blocker = Blocker()
    model = ScriptedModel(
        [[call("quick"), call("slow"), call("slow")], "unreachable", "second run answers"]
    )

    @tool
    def quick() -> str:
        return "quick done"

    agent = Agent(model, tools=[quick, blocker.make()], store=store)
    running = asyncio.create_task(agent.run("Start three jobs"))
    await asyncio.wait_for(blocker.started.wait(), 5)
    sid = blocker.session_id
    for _ in range(100):  # the quick call's result is committed soon after it returns
        if "ok" in [f.outcome for f in payloads(await store.read(sid), ToolFinished)]:
            break
        await asyncio.sleep(0.01)

    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    assert sorted(blocker.saw) == ["call_0_1", "call_0_2"]
    events = await read_checked(store, sid)
    answers = {f.call_id: f.outcome for f in payloads(events, ToolFinished)}
    assert answers == {"call_0_0": "ok", "call_0_1": "canceled", "call_0_2": "canceled"}
    assert kinds(events)[-1] == "turn.ended"
    assert payloads(events, TurnEnded)[-1].stop_reason == "interrupted"
    assert kinds(events).count("model.requested") == 1

    # The cancelled run let go of the session: it can run again in the same agent.
    transcript, _ = fold(events)
    assert [m.role for m in transcript.messages] == ["user", "assistant", "tool"]
    again = await agent.run("Try again", session_id=sid)
    assert again.stop_reason == "end_turn"


async def test_cancel_ends_a_running_session_for_good_and_a_second_cancel_changes_nothing(
    store: Store,
) -> None:
    blocker = Blocker()
    agent = Agent(ScriptedModel([call("slow"), "never"]), tools=[blocker.make()], store=store)

    running = asyncio.create_task(agent.run("Start the slow job"))
    await asyncio.wait_for(blocker.started.wait(), 5)
    sid = blocker.session_id
    await agent.cancel(sid)
    result = await asyncio.wait_for(running, 5)

    assert result.state == "canceled"
    assert blocker.saw == ["call_0_0"]
    events = await read_checked(store, sid)
    assert payloads(events, CancelRequested) == [CancelRequested("session")]
    assert [f.outcome for f in payloads(events, ToolFinished)] == ["canceled"]
    assert kinds(events)[-2:] == ["turn.ended", "session.ended"]
    assert payloads(events, SessionEnded)[0].outcome == "canceled"

    await agent.cancel(sid)
    await agent.interrupt(sid)
    assert len(await store.read(sid)) == len(events)
    assert (await agent.view(sid)).state == "canceled"
    with pytest.raises(UsageError, match="has ended"):
        await agent.run("Anyone there?", session_id=sid)


async def test_cancel_of_an_idle_session_ends_it_without_inventing_a_turn(store: Store) -> None:
    agent = Agent(ScriptedModel(["hello"]), store=store)
    result = await agent.run("hi")

    before = await store.read(result.session_id)
    await agent.interrupt(result.session_id)  # nothing runs: nothing to interrupt
    assert await store.read(result.session_id) == before

    await agent.cancel(result.session_id)
    events = await read_checked(store, result.session_id)
    assert kinds(events)[len(before) :] == ["cancel.requested", "session.ended"]
    assert (await agent.view(result.session_id)).state == "canceled"
    assert kinds(events).count("turn.ended") == 1


async def test_a_message_sent_as_an_interrupted_turn_closes_is_left_for_the_next_run(
    store: Store,
) -> None:
    # The race CI once lost: another process interrupts, the runner closes the turn, and a
    # client that saw it close sends the next message before the runner's cancel has
    # unwound. The runner must close only its own turn, never the one just opened.
    sent = False
    append = store.append

    async def append_then_send(
        session_id: str,
        events: Sequence[Event],
        expected_seq: int,
        lease: object = None,
        **catalog: object,
    ) -> None:
        nonlocal sent
        await append(session_id, events, expected_seq, lease, **catalog)  # type: ignore[arg-type]
        if not sent and any(isinstance(e.payload, TurnEnded) for e in events):
            sent = True
            await control.send_message(store, session_id, "next")

    store.append = append_then_send  # type: ignore[method-assign]

    def answer(messages: Sequence[Message]) -> Reply:
        return "answered: next" if messages[-1].text == "next" else Hang()

    watch = RequestWatch()
    agent = Agent(
        ScriptedModel([answer], repeat_last=True), store=store, on_event=watch, watch_interval=0.01
    )
    running = asyncio.create_task(agent.run("wait"))
    sid = await watch.first()
    # From outside the run, as another process would: the run's watcher notices.
    await control.request_stop(store, sid, "turn")
    await asyncio.wait_for(running, 5)

    events = await store.read(sid)  # the new turn is open: not yet a whole log to check
    assert kinds(events)[-2:] == ["turn.ended", "user.message"], kinds(events)
    assert [t.stop_reason for t in payloads(events, TurnEnded)] == ["interrupted"]
    view = await agent.view(sid)
    assert (view.state, view.turns) == ("pending", 1), view

    result = await agent.resume(sid)
    assert (result.output, result.stop_reason) == ("answered: next", "end_turn")
    assert kinds(await read_checked(store, sid))[len(events) :] == [
        "model.requested",
        "model.responded",
        "turn.ended",
    ]


async def test_no_model_request_follows_an_interrupt(store: Store) -> None:
    # A model that is slow to answer, interrupted mid-request: the request stays unanswered
    # and the loop never asks again.
    asked = asyncio.Event()

    def slow_reply(messages: Sequence[Message]) -> Reply:
        asked.set()
        return call("forecast", city="Paris")

    watch = RequestWatch()
    agent = Agent(
        ScriptedModel([slow_reply], delay=30.0), tools=[forecast], store=store, on_event=watch
    )
    running = asyncio.create_task(agent.run("Paris?"))
    await agent.interrupt(await watch.first())
    result = await asyncio.wait_for(running, 5)

    assert result.stop_reason == "interrupted"
    assert not asked.is_set(), "the delayed reply must never be produced"
    events = await read_checked(store, result.session_id)
    assert kinds(events) == [
        "session.created",
        "user.message",
        "model.requested",
        "cancel.requested",
        "turn.ended",
    ]
    assert not payloads(events, ToolStarted)


async def _interrupt_a_blocking_call(
    store: Store, effect: Effect, seconds: float
) -> tuple[RunResult, list[Event], float, threading.Event]:
    """Run a sync tool that blocks its thread for `seconds` (or until released), interrupt
    it as soon as it runs: the run's result, its log, and how long the interrupt took."""
    release = threading.Event()
    entered = threading.Event()
    session_ids: list[str] = []

    @tool(effect=effect)
    def grind(ctx: ToolContext) -> str:
        session_ids.append(ctx.session_id)
        entered.set()
        release.wait(seconds)
        return "ground"

    agent = Agent(ScriptedModel([call("grind"), "next"]), tools=[grind], store=store)
    running = asyncio.create_task(agent.run("grind"))
    assert await asyncio.to_thread(entered.wait, 5), "the tool never started"
    asked = time.monotonic()
    await agent.interrupt(session_ids[0])
    result = await asyncio.wait_for(running, 5)
    took = time.monotonic() - asked
    return result, await read_checked(store, result.session_id), took, release


async def test_an_interrupted_blocking_write_is_abandoned_after_the_grace_as_unknown_effect(
    store: Store,
) -> None:
    # A thread cannot be stopped: the turn closes once the grace is over, the call answered
    # by the recovery rules with its real duration, and the late return adds no answer.
    result, _, took, release = await _interrupt_a_blocking_call(store, "write", 10)
    release.set()
    await asyncio.sleep(0.05)  # give a late result every chance to sneak in

    assert result.stop_reason == "interrupted"
    assert SYNC_GRACE <= took < SYNC_GRACE + 2
    events = await read_checked(store, result.session_id)
    (finished,) = payloads(events, ToolFinished)
    assert (finished.outcome, finished.content) == ("unknown_effect", ABANDONED)
    assert finished.duration_ms >= SYNC_GRACE * 1000
    assert kinds(events)[-1] == "turn.ended"


async def test_an_interrupted_blocking_read_is_abandoned_as_canceled(store: Store) -> None:
    result, events, _, release = await _interrupt_a_blocking_call(store, "read", 10)
    release.set()
    assert result.stop_reason == "interrupted"
    (finished,) = payloads(events, ToolFinished)
    assert (finished.outcome, finished.content) == ("canceled", CANCELED_RUNNING)
    assert finished.duration_ms >= SYNC_GRACE * 1000


async def test_a_blocking_call_that_ends_within_the_grace_keeps_its_real_result(
    store: Store,
) -> None:
    result, events, took, _ = await _interrupt_a_blocking_call(store, "write", 0.3)
    assert result.stop_reason == "interrupted" and took < SYNC_GRACE
    (finished,) = payloads(events, ToolFinished)
    assert (finished.outcome, finished.content) == ("ok", "ground")
    assert 250 <= finished.duration_ms < SYNC_GRACE * 1000
    assert kinds(events)[-2:] == ["tool.finished", "turn.ended"]
    assert "model.requested" not in kinds(events)[kinds(events).index("tool.finished") :]
