"""Turns that end on a limit, a provider error or a custom stop condition: each ends by name,
promptly, with every call answered, and stops before the request that would overspend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from invariants import kinds, payloads, read_checked
from tether import Agent, Event, Limits, Message, SessionView, ToolCall, Usage, fold, tool
from tether.errors import RateLimited, UsageError
from tether.events import ModelFailed, ModelResponded, ToolFinished, TurnEnded
from tether.providers.base import ModelRequest, ModelResponse
from tether.store import MemoryStore, SQLiteStore
from tether.testing import Delay, Fail, Hang, ScriptedModel, Truncated, call
from tether.testing.scripted import Reply


@tool(effect="read")
def probe(n: int) -> str:
    """Report the same reading every time."""
    return "reading: 42"


def ends_with(events: list[Event], reason: str) -> TurnEnded:
    assert kinds(events)[-1] == "turn.ended", kinds(events)
    ended = payloads(events, TurnEnded)[-1]
    assert ended.stop_reason == reason, ended
    return ended


# -- time ------------------------------------------------------------------------------------


async def test_a_model_that_never_answers_ends_at_the_time_limit_promptly() -> None:
    store = MemoryStore()
    agent = Agent(ScriptedModel([Hang()]), store=store, limits=Limits(max_seconds=0.2))

    started = time.perf_counter()
    result = await agent.run("anyone?")
    elapsed = time.perf_counter() - started

    assert (result.stop_reason, result.state) == ("time_limit", "idle")
    assert 0.2 <= elapsed < 2, f"{elapsed:.3f} s"
    events = await read_checked(store, result.session_id)
    assert kinds(events)[-2:] == ["model.requested", "turn.ended"]


async def test_a_slow_tool_at_the_time_limit_is_answered_canceled_and_the_turn_ends(
    tmp_path: object,
) -> None:
    cancelled: list[str] = []

    @tool(timeout=30)
    async def crawl(site: str) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(site)
            raise
        return "crawled"

    store = SQLiteStore(f"{tmp_path}/limits.db")
    model = ScriptedModel([[call("probe", n=1), call("crawl", site="a"), call("crawl", site="b")]])
    agent = Agent(model, tools=[probe, crawl], store=store, limits=Limits(max_seconds=0.3))

    started = time.perf_counter()
    result = await agent.run("crawl")
    elapsed = time.perf_counter() - started

    assert result.stop_reason == "time_limit"
    assert elapsed < 3, f"{elapsed:.3f} s"
    assert sorted(cancelled) == ["a", "b"]
    events = await read_checked(store, result.session_id)
    outcomes = {f.call_id: f.outcome for f in payloads(events, ToolFinished)}
    assert outcomes == {"call_0_0": "ok", "call_0_1": "canceled", "call_0_2": "canceled"}
    ends_with(events, "time_limit")
    await store.close()


async def test_the_time_limit_is_checked_between_steps_too() -> None:
    # Each step is quick, but together they pass the limit: the loop stops before asking
    # again rather than only when something hangs.
    store = MemoryStore()
    model = ScriptedModel([Delay(0.05, call("probe", n=1))], repeat_last=True)
    agent = Agent(model, tools=[probe], store=store, limits=Limits(max_seconds=0.3, max_steps=1000))

    result = await agent.run("probe until told to stop")

    assert result.stop_reason == "time_limit"
    assert 1 < result.steps < 20
    await read_checked(store, result.session_id)


# -- budget ----------------------------------------------------------------------------------


async def budget_run(max_tokens: int) -> tuple[list[Event], int]:
    store = MemoryStore()
    model = ScriptedModel([call("probe", n=1)], repeat_last=True)
    agent = Agent(
        model, tools=[probe], store=store, limits=Limits(max_tokens=max_tokens, max_steps=30)
    )
    result = await agent.run("probe")
    assert result.stop_reason == "budget", result
    assert result.stop_detail is not None and f"max_tokens={max_tokens}" in result.stop_detail
    return await read_checked(store, result.session_id), result.steps


@pytest.mark.parametrize("max_tokens", [150, 300, 600, 1200])
async def test_a_token_budget_stops_before_the_request_that_would_overspend(
    max_tokens: int,
) -> None:
    events, _ = await budget_run(max_tokens)

    used = 0
    for answer in payloads(events, ModelResponded):
        used += answer.usage.total_tokens
        assert used <= max_tokens, f"{used} tokens used of {max_tokens}"
    # Stopped before asking: no request after the last answer's results.
    assert kinds(events)[-2] != "model.requested"
    _, view = fold(events)
    assert view.usage.total_tokens == used


async def test_a_larger_token_budget_buys_more_steps() -> None:
    steps = [(await budget_run(n))[1] for n in (150, 300, 600, 1200)]
    assert steps == sorted(steps) and steps[0] < steps[-1], steps


class HeavyModel:
    """A model that counts far more input tokens than the text's length suggests, as a
    provider does with a hidden system prompt: the only honest estimate is its own count."""

    name = "heavy"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        calls = (ToolCall(f"call_{len(request.messages)}", "probe", {"n": 1}),)
        usage = Usage(input_tokens=1000 + 10 * len(request.messages), output_tokens=5)
        return ModelResponse(Message("assistant", calls), stop="tool_calls", usage=usage)


async def test_a_token_budget_holds_when_the_model_counts_more_than_the_estimate() -> None:
    store = MemoryStore()
    agent = Agent(HeavyModel(), tools=[probe], store=store, limits=Limits(max_tokens=2500))

    result = await agent.run("probe")

    assert result.stop_reason == "budget"
    assert result.usage.total_tokens <= 2500, f"{result.usage.total_tokens} tokens of 2500"
    assert result.steps == 2
    await read_checked(store, result.session_id)


async def test_a_cost_budget_stops_before_the_request_that_would_overspend() -> None:
    store = MemoryStore()
    model = ScriptedModel(
        [call("probe", n=1)], repeat_last=True, price_per_million=(1000.0, 4000.0)
    )
    agent = Agent(model, tools=[probe], store=store, limits=Limits(max_cost_usd=0.5, max_steps=100))

    result = await agent.run("probe")

    assert result.stop_reason == "budget"
    assert result.stop_detail is not None and "max_cost_usd=0.5" in result.stop_detail
    assert result.cost_usd is not None and 0 < result.cost_usd <= 0.5
    assert result.steps > 1
    events = await read_checked(store, result.session_id)
    costs = [a.cost_usd for a in payloads(events, ModelResponded)]
    assert all(c is not None and c > 0 for c in costs)
    assert sum(c for c in costs if c is not None) == pytest.approx(result.cost_usd)
    assert kinds(events)[-2] != "model.requested"


async def test_a_cost_budget_with_an_unknown_price_stops_saying_so() -> None:
    store = MemoryStore()
    model = ScriptedModel([call("probe", n=1)], repeat_last=True)  # no price: cost unknown
    agent = Agent(model, tools=[probe], store=store, limits=Limits(max_cost_usd=1.0))

    result = await agent.run("probe")

    assert result.stop_reason == "budget"
    assert result.stop_detail is not None and "price is unknown" in result.stop_detail
    assert result.cost_usd is None
    events = await read_checked(store, result.session_id)
    assert kinds(events).count("model.requested") <= 1


def test_limits_that_are_not_positive_are_refused_by_name() -> None:
    with pytest.raises(UsageError, match=r"Limits\.max_steps must be positive"):
        Limits(max_steps=0)
    with pytest.raises(UsageError, match=r"Limits\.max_cost_usd must be positive"):
        Limits(max_cost_usd=-1.0)


# -- output limit and provider errors ---------------------------------------------------------


async def test_an_answer_cut_inside_a_tool_call_is_never_executed() -> None:
    ran: list[str] = []

    @tool
    def unfinished(partial: str = "") -> str:
        ran.append(partial)
        return "ran"

    store = MemoryStore()
    agent = Agent(ScriptedModel([Truncated("Let me call")]), tools=[unfinished], store=store)

    result = await agent.run("do it")

    assert (result.stop_reason, result.state) == ("output_limit", "idle")
    assert ran == []
    events = await read_checked(store, result.session_id)
    assert "tool.started" not in kinds(events) and "tool.finished" not in kinds(events)
    (answer,) = payloads(events, ModelResponded)
    assert answer.incomplete and answer.message.tool_calls, "the raw answer is kept as sent"
    transcript, _ = fold(events)
    last = transcript.messages[-1]
    assert last.role == "assistant" and last.text == "Let me call"
    assert last.tool_calls == ()


async def test_a_provider_error_ends_the_turn_error_with_its_cause_recorded() -> None:
    store = MemoryStore()
    model = ScriptedModel([Fail(RateLimited("slow down", status=429))])
    agent = Agent(model, store=store, retry=None)

    result = await agent.run("hi")

    assert (result.stop_reason, result.state) == ("error", "idle")
    assert result.stop_detail == "rate_limited: slow down"
    events = await read_checked(store, result.session_id)
    (failed,) = payloads(events, ModelFailed)
    assert (failed.error_class, failed.status, failed.retryable) == ("rate_limited", 429, True)
    assert failed.message == "slow down"
    ends_with(events, "error")


async def test_a_bug_in_a_custom_model_ends_the_turn_error_naming_the_exception() -> None:
    store = MemoryStore()
    agent = Agent(ScriptedModel([Fail(KeyError("choices"))]), store=store)

    result = await agent.run("hi")

    assert result.stop_reason == "error"
    assert result.stop_detail is not None and "KeyError" in result.stop_detail
    events = await read_checked(store, result.session_id)
    assert payloads(events, ModelFailed)[0].error_class == "unexpected"


async def test_the_session_runs_again_after_a_provider_error() -> None:
    def flaky(messages: Sequence[Message]) -> Reply:
        # Fails while the conversation holds one user message, answers once it holds two.
        users = [m for m in messages if m.role == "user"]
        return Fail(RateLimited("slow down", status=429)) if len(users) == 1 else "better now"

    store = MemoryStore()
    agent = Agent(ScriptedModel([flaky]), store=store, retry=None)
    first = await agent.run("hi")
    assert first.stop_reason == "error"
    transcript, _ = fold(await store.read(first.session_id))
    assert [m.role for m in transcript.messages] == ["user"], "a failure adds no message"

    second = await agent.run("try again", session_id=first.session_id)

    assert (second.stop_reason, second.output) == ("end_turn", "better now")
    events = await read_checked(store, first.session_id)
    assert [t.stop_reason for t in payloads(events, TurnEnded)] == ["error", "end_turn"]


# -- custom stop condition -------------------------------------------------------------------


async def test_a_custom_stop_condition_ends_the_turn_with_its_own_name() -> None:
    results: list[str] = []
    views: list[SessionView] = []

    def record(event: Event) -> None:
        if isinstance(event.payload, ToolFinished):
            results.append(event.payload.content)

    def converged(view: SessionView) -> str | None:
        views.append(view)
        # Two rounds with nothing new: the last two tool results are the same.
        return "converged" if len(results) >= 2 and results[-1] == results[-2] else None

    store = MemoryStore()
    model = ScriptedModel([call("probe", n=1)], repeat_last=True)
    agent = Agent(model, tools=[probe], store=store, stop_when=converged, on_event=record)

    result = await agent.run("probe until nothing changes")

    assert (result.stop_reason, result.state, result.steps) == ("converged", "idle", 2)
    assert result.stop_detail is not None and "converged" in result.stop_detail
    assert [v.steps for v in views] == [1, 2], "checked once after each step"
    events = await read_checked(store, result.session_id)
    assert kinds(events).count("model.requested") == 2
    ends_with(events, "converged")


async def test_a_stop_condition_is_not_asked_before_the_first_step() -> None:
    store = MemoryStore()
    agent = Agent(ScriptedModel(["hello"]), store=store, stop_when=lambda view: "always")
    result = await agent.run("hi")
    # An answer ends the turn before the condition is consulted again.
    assert (result.stop_reason, result.output) == ("end_turn", "hello")
