"""A server that asks mid-call, against the real asking server over stdio: an elicitation puts
the session in `waiting_input` until `control.answer` answers it (checked against the
requested schema), and a sampling request is answered by the session's own model and logged
with its usage and cost."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from tether import Agent, fold
from tether.errors import UsageError
from tether.events import InputAnswered, InputRequested, SamplingAnswered
from tether.limits import Limits
from tether.messages import Message
from tether.session import control
from tether.store import MemoryStore
from tether.store.base import Store
from tether.testing import ScriptedModel, call
from tether.tools.mcp import McpServerConfig, McpToolSource, parse_mcp_config

try:
    from .mcp_servers.harness import HERE, PYTHON, no_orphan_servers
except ImportError:
    from mcp_servers.harness import HERE, PYTHON, no_orphan_servers

__all__ = ["no_orphan_servers"]

ASKING = HERE / "asking_server.py"


def asking_stdio(log: Path | None = None, **settings: object) -> McpServerConfig:
    env = {"ASKING_LOG": str(log)} if log is not None else {}
    return McpServerConfig(
        "asking",
        command=PYTHON,
        args=(str(ASKING),),
        env=env,
        **settings,  # type: ignore[arg-type]
    )


async def until_waiting(store: Store, seconds: float = 20.0) -> tuple[str, str]:
    """The store's one session and the input it waits for, once it waits for one."""
    async with asyncio.timeout(seconds):
        while True:
            for info in await store.sessions():
                view = fold(await store.read(info.session_id))[1]
                if view.state == "waiting_input":
                    (key,) = view.pending_inputs
                    return info.session_id, key
            await asyncio.sleep(0.05)


# A 2025-11-25 server asks mid-call on the connection (the one call in flight is the one
# asked); a 2026-07-28 one answers `input_required`, and the SDK asks inside the call's task.
@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_an_elicitation_waits_in_waiting_input_until_answered(protocol: str) -> None:
    store = MemoryStore()
    async with McpToolSource([asking_stdio(protocol=protocol)]) as source:
        agent = Agent(
            ScriptedModel([call("greet"), "greeted"]), tools=await source.list_tools(), store=store
        )
        run = asyncio.create_task(agent.run("greet me"))
        session_id, key = await until_waiting(store)
        assert key == "call_0_0"
        asked = fold(await store.read(session_id))[1].pending_inputs[key]
        assert (asked.server, asked.message) == ("asking", "What is your name?")
        assert asked.schema["required"] == ["name"]

        with pytest.raises(UsageError, match="does not match the requested schema"):
            await control.answer(store, session_id, key, {"name": 7})
        with pytest.raises(UsageError, match="not waiting for input"):
            await control.answer(store, session_id, "call_9", {"name": "x"})
        await control.answer(store, session_id, key, {"name": "Ada"})
        result = await asyncio.wait_for(run, 20)

    assert result.output == "greeted"
    events = await store.read(session_id)
    types = [e.type for e in events]
    assert types.index("input.requested") < types.index("input.answered")
    assert types.index("input.answered") < types.index("tool.finished")
    transcript, view = fold(events)
    assert view.pending_inputs == {} and view.state == "idle"
    assert "hello Ada" in transcript.messages[2].tool_results[0].content


async def test_on_2026_07_28_parallel_calls_each_get_their_own_question() -> None:
    store = MemoryStore()
    async with McpToolSource([asking_stdio(protocol="2026-07-28")]) as source:
        script = ScriptedModel([[call("greet"), call("greet")], "greeted both"])
        agent = Agent(script, tools=await source.list_tools(), store=store)
        run = asyncio.create_task(agent.run("greet us"))
        async with asyncio.timeout(20):
            while True:
                infos = await store.sessions()
                view = fold(await store.read(infos[0].session_id))[1] if infos else None
                if view is not None and len(view.pending_inputs) == 2:
                    break
                await asyncio.sleep(0.05)
        session_id = infos[0].session_id
        await control.answer(store, session_id, "call_0_0", {"name": "Ada"})
        await control.answer(store, session_id, "call_0_1", {"name": "Grace"})
        await asyncio.wait_for(run, 20)
    transcript, _ = fold(await store.read(session_id))
    results = [r.content for r in transcript.messages[2].tool_results]
    assert results == ["hello Ada", "hello Grace"]


async def test_a_declined_elicitation_reaches_the_server_as_declined() -> None:
    store = MemoryStore()
    async with McpToolSource([asking_stdio()]) as source:
        agent = Agent(
            ScriptedModel([call("greet"), "ok"]), tools=await source.list_tools(), store=store
        )
        run = asyncio.create_task(agent.run("greet me"))
        session_id, key = await until_waiting(store)
        await control.answer(store, session_id, key, None, "decline")
        await asyncio.wait_for(run, 20)
    transcript, _ = fold(await store.read(session_id))
    assert transcript.messages[2].tool_results[0].content == "no name (decline)"
    answered = [e.payload for e in await store.read(session_id)]
    assert any(isinstance(p, InputAnswered) and p.action == "decline" for p in answered)


async def test_elicitation_false_declares_nothing_and_the_server_gets_an_error() -> None:
    store = MemoryStore()
    async with McpToolSource([asking_stdio(elicitation=False)]) as source:
        agent = Agent(
            ScriptedModel([call("greet"), "ok"]), tools=await source.list_tools(), store=store
        )
        result = await asyncio.wait_for(agent.run("greet me"), 20)
    events = await store.read(result.session_id)
    assert not any(isinstance(e.payload, InputRequested) for e in events)
    (finished,) = [e.payload for e in events if e.type == "tool.finished"]
    assert finished.outcome == "error"  # type: ignore[union-attr]


def test_the_config_keys_turn_elicitation_and_sampling_off() -> None:
    (on,) = parse_mcp_config({"mcpServers": {"a": {"command": "x"}}})
    assert on.elicitation and on.sampling
    entry = {"command": "x", "elicitation": False, "sampling": False}
    (off,) = parse_mcp_config({"mcpServers": {"a": entry}})
    assert not off.elicitation and not off.sampling


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_roots_from_the_config_reach_the_server(tmp_path: Path, protocol: str) -> None:
    entry = {"command": PYTHON, "args": [str(ASKING)], "roots": [str(tmp_path), "file:///srv/data"]}
    entry["protocol"] = protocol
    (config,) = parse_mcp_config({"mcpServers": {"asking": entry}})
    async with McpToolSource([config]) as source:
        (roots,) = [t for t in await source.list_tools() if t.name == "roots"]
        said = await roots.fn()
    assert said.splitlines() == [f"{tmp_path.name} {tmp_path.as_uri()}", "data file:///srv/data"]


async def test_without_roots_in_the_config_none_are_declared() -> None:
    async with McpToolSource([asking_stdio()]) as source:
        (roots,) = [t for t in await source.list_tools() if t.name == "roots"]
        with pytest.raises(Exception, match="roots"):
            await roots.fn()


def haiku_script(line: str, price: tuple[float, float] = (1.0, 2.0)) -> ScriptedModel:
    """Calls `haiku`, answers the server's sampling request with `line`, then says done."""

    def reply(messages: Sequence[Message]) -> object:
        if messages[0].text.startswith("a line on"):  # the server's own request
            return line
        return call("haiku", topic="rain") if len(messages) == 1 else "done"

    return ScriptedModel([reply], repeat_last=True, price_per_million=price)


async def test_a_sampling_request_is_answered_by_the_sessions_model_and_logged() -> None:
    store = MemoryStore()
    async with McpToolSource([asking_stdio()]) as source:
        agent = Agent(
            haiku_script("rain on the roof"), tools=await source.list_tools(), store=store
        )
        result = await asyncio.wait_for(agent.run("a haiku please"), 20)
    events = await store.read(result.session_id)
    (sampled,) = [e.payload for e in events if isinstance(e.payload, SamplingAnswered)]
    assert (sampled.server, sampled.call_id, sampled.model) == ("asking", "call_0_0", "scripted")
    assert sampled.text == "rain on the roof" and sampled.refused is None
    assert sampled.usage.input_tokens > 0 and sampled.cost_usd is not None
    transcript, view = fold(events)
    assert transcript.messages[2].tool_results[0].content == "scripted wrote: rain on the roof"
    answers = [e.payload for e in events if e.type == "model.responded"]
    spent = sum(a.usage.input_tokens for a in answers) + sampled.usage.input_tokens  # type: ignore[union-attr]
    assert view.usage.input_tokens == spent
    assert view.cost_usd == pytest.approx(
        sum(a.cost_usd for a in answers) + sampled.cost_usd  # type: ignore[union-attr,misc]
    )


async def test_a_sampling_request_past_the_budget_is_refused_and_logged() -> None:
    store = MemoryStore()
    async with McpToolSource([asking_stdio()]) as source:
        agent = Agent(
            haiku_script("never", price=(1.0, 15.0)),
            tools=await source.list_tools(),
            store=store,
            # The first request is estimated at about $0.00006; its answer costs $0.000105,
            # so the server's request comes with the budget spent.
            limits=Limits(max_cost_usd=0.0001),
        )
        result = await asyncio.wait_for(agent.run("a haiku please"), 20)
    events = await store.read(result.session_id)
    (sampled,) = [e.payload for e in events if isinstance(e.payload, SamplingAnswered)]
    assert sampled.refused is not None and "max_cost_usd" in sampled.refused
    assert sampled.text == "" and sampled.usage.input_tokens == 0
    (finished,) = [e.payload for e in events if e.type == "tool.finished"]
    assert finished.outcome == "error"  # type: ignore[union-attr]
