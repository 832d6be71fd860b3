"""One budget for the tree: every thread's steps, tokens and cost count against the
session's limits; a sub-agent's own limits hold only within what its caller has left; and
parallel children reserve their requests' estimates, so together they stop in time."""

from __future__ import annotations

from invariants import payloads, read_checked
from tether import Agent, Limits, tool
from tether.events import ModelResponded, ThreadFinished
from tether.store import Store
from tether.testing import ScriptedModel, call

PRICE = (3000.0, 3000.0)  # dollars per million tokens: a request costs about $0.1-0.3


@tool(effect="read")
def look(topic: str) -> str:
    """Look something up."""
    return "x" * 50


def _digger(limits: Limits | None = None) -> Agent:
    model = ScriptedModel([call("look", topic="t")], repeat_last=True, price_per_million=PRICE)
    return Agent(model, name="digger", tools=[look], limits=limits)


async def test_parallel_children_stop_at_the_sessions_dollar_budget(store: Store) -> None:
    parent = Agent(
        ScriptedModel([[call("digger", task=t) for t in "abc"], "done"], price_per_million=PRICE),
        tools=[_digger().as_tool()],
        store=store,
        limits=Limits(max_cost_usd=1.0),
    )
    result = await parent.run("dig")

    assert result.stop_reason == "budget"
    events = await read_checked(store, result.session_id)
    costs = [p.cost_usd or 0.0 for p in payloads(events, ModelResponded)]
    assert result.cost_usd == sum(costs)
    # Alone, each child would dig on forever: the session's budget stopped every one.
    ends = payloads(events, ThreadFinished)
    assert [e.stop_reason for e in ends] == ["budget"] * 3
    assert all("the limits of the session" in (e.detail or "") for e in ends)
    # Overspend, if any, is bounded by one request.
    assert result.cost_usd <= 1.0 + max(costs)


async def test_a_childs_own_limits_never_exceed_what_the_parent_has_left(store: Store) -> None:
    generous = _digger(Limits(max_steps=100))
    parent = Agent(
        ScriptedModel([call("digger", task="a"), "done"]),
        tools=[generous.as_tool()],
        store=store,
        limits=Limits(max_steps=4),
    )
    result = await parent.run("dig")

    events = await read_checked(store, result.session_id)
    (end,) = payloads(events, ThreadFinished)
    # The parent's first step and three of the child's fill the session's four.
    assert (end.stop_reason, end.detail) == (
        "turn_limit",
        "4 model calls in this turn (max_steps=4) (the limits of the session)",
    )
    assert result.stop_reason == "turn_limit" and result.steps == 4


async def test_a_childs_own_tighter_limits_stop_it_alone(store: Store) -> None:
    parent = Agent(
        ScriptedModel([call("digger", task="a"), "fine without it"]),
        tools=[_digger().as_tool(limits=Limits(max_steps=2))],
        store=store,
    )
    result = await parent.run("dig")
    assert (result.stop_reason, result.output) == ("end_turn", "fine without it")
    (end,) = payloads(await read_checked(store, result.session_id), ThreadFinished)
    assert (end.stop_reason, end.detail) == (
        "turn_limit",
        "2 model calls in this turn (max_steps=2)",
    )
