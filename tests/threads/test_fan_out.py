"""Agents as tools: one answer's calls to sub-agents run as parallel threads of the caller's
session, each with its own transcript, and their answers come back in call order."""

from __future__ import annotations

from pathlib import Path

from invariants import payloads, read_checked
from tether import Agent, fold, tool
from tether.events import ThreadFinished, ThreadStarted, ToolFinished
from tether.store import Store
from tether.testing import ScriptedModel, call
from threads.support import fan_out_agent, researcher


async def test_a_parent_fans_out_to_three_children_and_joins_their_answers(
    store: Store, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    result = await fan_out_agent(store, effects).run("research a, b and c")

    assert result.stop_reason == "end_turn"
    assert result.output == "report: noted a | report: noted b | report: noted c"
    assert sorted(effects.read_text().split()) == ["a", "b", "c"]
    events = await read_checked(store, result.session_id)
    started = payloads(events, ThreadStarted)
    assert [(s.thread, s.agent, s.parent_call_id) for s in started] == [
        ("researcher-1", "researcher", "call_0_0"),
        ("researcher-2", "researcher", "call_0_1"),
        ("researcher-3", "researcher", "call_0_2"),
    ]
    finished = {f.thread: f.output for f in payloads(events, ThreadFinished)}
    assert finished == {f"researcher-{i}": f"report: noted {t}" for i, t in enumerate("abc", 1)}
    # Each child's own events carry its thread; the parent's carry none.
    for i, topic in enumerate("abc", 1):
        own = [e for e in events if e.thread == f"researcher-{i}"]
        assert [e.type for e in own] == [
            "thread.started",
            "user.message",
            "model.requested",
            "model.responded",
            "tool.started",
            "tool.finished",
            "model.requested",
            "model.responded",
            "turn.ended",
            "thread.finished",
        ]
        transcript, view = fold(events, f"researcher-{i}")
        assert transcript.system == "Research one topic."
        assert transcript.messages[0].text == topic
        assert view.last_output == f"report: noted {topic}"
    # The parent's result for each call is that child's answer.
    main = [e.payload for e in events if e.thread == "" and isinstance(e.payload, ToolFinished)]
    by_call = {f.call_id: (f.outcome, f.content) for f in main}
    assert by_call == {f"call_0_{i}": ("ok", f"report: noted {t}") for i, t in enumerate("abc")}
    # Steps, tokens and cost count every thread: 2 of the parent, 2 of each child.
    assert result.steps == 8
    _, view = fold(events)
    child_costs = sum(fold(events, f"researcher-{i}")[1].cost_usd or 0 for i in (1, 2, 3))
    parent_only = fold([e for e in events if e.thread == ""])[1].cost_usd
    assert parent_only is not None and result.cost_usd is not None
    assert abs(result.cost_usd - (parent_only + child_costs)) < 1e-12
    assert [n.status for n in view.threads] == ["finished"] * 3


async def test_the_children_run_at_once(store: Store) -> None:
    """Three children whose tools each wait 0.3 s finish in well under 0.9 s together."""
    import asyncio
    import time

    @tool(effect="read")
    async def slow(topic: str) -> str:
        """Take a while."""
        await asyncio.sleep(0.3)
        return topic

    child = Agent(
        ScriptedModel([lambda m: call("slow", topic=m[0].text), lambda m: "done"]),
        name="worker",
        tools=[slow],
    )
    parent = Agent(
        ScriptedModel([[call("worker", task=t) for t in "xyz"], "all done"]),
        tools=[child.as_tool()],
        store=store,
    )
    began = time.monotonic()
    result = await parent.run("go")
    assert result.output == "all done"
    assert time.monotonic() - began < 0.85


async def test_a_child_that_fails_is_an_error_result_the_parent_reads(store: Store) -> None:
    child = Agent(ScriptedModel([call("missing")], repeat_last=True), name="flaky")
    from tether import Limits

    parent = Agent(
        ScriptedModel([call("flaky", task="try"), lambda m: m[-1].tool_results[0].content]),
        tools=[child.as_tool(limits=Limits(max_steps=2))],
        store=store,
    )
    result = await parent.run("go")
    assert result.stop_reason == "end_turn"
    assert result.output.startswith("sub-agent flaky stopped: turn_limit")
    events = await read_checked(store, result.session_id)
    (answer,) = [
        e.payload for e in events if e.thread == "" and isinstance(e.payload, ToolFinished)
    ]
    assert answer.outcome == "error"
    (end,) = payloads(events, ThreadFinished)
    assert end.stop_reason == "turn_limit"


async def test_depth_and_thread_caps_refuse_with_a_clear_result(store: Store) -> None:
    leaf = researcher()
    middle = Agent(
        ScriptedModel([call("researcher", task="deep"), lambda m: m[-1].tool_results[0].content]),
        name="middle",
        tools=[leaf.as_tool()],
    )
    top = Agent(
        ScriptedModel([call("middle", task="go"), lambda m: m[-1].tool_results[0].content]),
        tools=[middle.as_tool()],
        store=store,
        max_depth=1,
    )
    result = await top.run("go")
    assert "sub-agent researcher was not started" in result.output
    assert "max_depth=1" in result.output

    wide = Agent(
        ScriptedModel(
            [[call("researcher", task=t) for t in "abc"], lambda m: m[-1].tool_results[2].content]
        ),
        tools=[researcher().as_tool()],
        store=store,
        max_threads=2,
    )
    result = await wide.run("go")
    assert "max_threads=2" in result.output
    events = await read_checked(store, result.session_id)
    assert len(payloads(events, ThreadStarted)) == 2


def test_a_sub_agent_needs_a_name() -> None:
    import pytest

    from tether.errors import UsageError

    with pytest.raises(UsageError, match="needs a name"):
        Agent(ScriptedModel(["x"])).as_tool()
    with pytest.raises(UsageError, match="letters, digits"):
        Agent(ScriptedModel(["x"]), name="a/b")
