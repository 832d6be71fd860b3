"""`tether.stops`: reusable stop conditions, each ending the turn with its own reason, and each
decided from the session alone (so the log, folded anywhere, says the same)."""

from __future__ import annotations

import itertools

import pytest

from tether import Agent, Limits, fold, stops, tool
from tether.errors import UsageError
from tether.state import SessionView
from tether.testing import ScriptedModel, call, say


def _agent(model: ScriptedModel, stop_when: stops.StopCondition, *tools: object) -> Agent:
    return Agent(
        model,
        tools=list(tools),  # type: ignore[arg-type]
        store="memory:",
        stop_when=stop_when,
        limits=Limits(max_steps=10),
        retry=None,
    )


@tool(effect="read")
def lookup(query: str) -> str:
    """Look something up (the index has nothing new, whatever is asked)."""
    return "no match"


async def test_no_new_tool_results_stops_a_model_going_round_in_circles() -> None:
    model = ScriptedModel([call("lookup", query="x")], repeat_last=True)
    agent = _agent(model, stops.no_new_tool_results(2), lookup)
    result = await agent.run("find it")
    # Step 1 brought "no match" for the first time; steps 2 and 3 brought it again.
    assert (result.stop_reason, result.steps) == ("no_new_tool_results", 3)
    events = await agent.store.read(result.session_id)
    transcript, view = fold(events)
    assert view.stop_reason == "no_new_tool_results"
    # Decided from the log alone: folded anywhere, the condition says the same.
    assert stops.check(stops.no_new_tool_results(2), view, transcript.messages) == (
        "no_new_tool_results"
    )
    assert stops.check(stops.no_new_tool_results(3), view, transcript.messages) is None
    await agent.close()


async def test_new_results_keep_the_turn_going_until_its_own_limit() -> None:
    counter = itertools.count()

    @tool(effect="read")
    def fetch_page() -> str:
        """The next page of results."""
        return f"page {next(counter)}"

    model = ScriptedModel([call("fetch_page")], repeat_last=True)
    agent = _agent(model, stops.no_new_tool_results(1), fetch_page)
    result = await agent.run("read everything")
    assert (result.stop_reason, result.steps) == ("turn_limit", 10)
    await agent.close()


async def test_answer_stable_stops_once_the_answer_stops_changing() -> None:
    model = ScriptedModel(
        [
            say("draft: maybe 41", call("lookup", query="a")),
            say("answer: 42", call("lookup", query="b")),
            say("answer:   42", call("lookup", query="c")),  # whitespace aside, the same
            "never asked for",
        ]
    )
    agent = _agent(model, stops.answer_stable(2, reason="settled"), lookup)
    result = await agent.run("what is it?")
    assert (result.stop_reason, result.steps) == ("settled", 3)
    await agent.close()


async def test_answers_without_text_are_never_stable() -> None:
    model = ScriptedModel([call("lookup", query="a"), call("lookup", query="b"), "done"])
    agent = _agent(model, stops.answer_stable(2), lookup)
    result = await agent.run("go")
    assert (result.stop_reason, result.output) == ("end_turn", "done")
    await agent.close()


async def test_cost_over_lets_the_step_finish_and_stops_after_it() -> None:
    model = ScriptedModel(
        [call("lookup", query="x")], repeat_last=True, price_per_million=(1000.0, 1000.0)
    )
    agent = _agent(model, stops.cost_over(0.1), lookup)
    result = await agent.run("spend")
    assert result.stop_reason == "cost_over"
    assert result.cost_usd is not None and result.cost_usd > 0.1
    # The step before the last was still under the line.
    events = await agent.store.read(result.session_id)
    costs = [e.payload.cost_usd for e in events if e.type == "model.responded"]  # type: ignore[attr-defined]
    assert sum(costs[:-1]) <= 0.1 < sum(costs)
    await agent.close()


async def test_cost_over_never_stops_a_model_without_prices() -> None:
    model = ScriptedModel([call("lookup", query="x"), "done"])
    agent = _agent(model, stops.cost_over(0.0), lookup)
    assert (await agent.run("go")).stop_reason == "end_turn"
    await agent.close()


async def test_any_of_takes_the_first_condition_that_holds() -> None:
    def after_two(view: SessionView) -> str | None:
        return "two_steps" if view.turn_steps >= 2 else None

    model = ScriptedModel([call("lookup", query="x")], repeat_last=True)
    first = _agent(model, stops.any_of(after_two, stops.no_new_tool_results(2)), lookup)
    assert (await first.run("go")).stop_reason == "two_steps"
    model = ScriptedModel([call("lookup", query="x")], repeat_last=True)
    second = _agent(model, stops.any_of(stops.no_new_tool_results(1), after_two), lookup)
    assert (await second.run("go")).stop_reason == "no_new_tool_results"
    await first.close()
    await second.close()


def test_a_transcript_condition_called_with_a_view_alone_says_how_to_combine_it() -> None:
    with pytest.raises(UsageError, match="any_of"):
        stops.answer_stable(2)(SessionView())


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: stops.no_new_tool_results(0), "steps >= 1"),
        (lambda: stops.answer_stable(1), "steps >= 2"),
        (lambda: stops.cost_over(-1), "usd >= 0"),
        (lambda: stops.any_of(), "at least one"),
    ],
)
def test_bad_arguments_are_refused_by_name(make: object, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        make()  # type: ignore[operator]
