"""MCP tool sources over stdio, against real servers: `mcp-server-time` from PyPI and the
toy server of these tests, each a real subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from datetime import datetime, timedelta
from typing import Any

import psutil
import pytest

from tether import Agent
from tether.events import ModelResponded, SessionCreated, ToolFinished, ToolStarted, UserMessage
from tether.messages import Message, ToolCall, user
from tether.session.log import SessionLog
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.tools import Tool
from tether.tools.mcp import McpProgress, McpServerConfig, McpServerUnavailable, McpToolSource
from tether.tools.run import CallOutcome, execute

try:
    from .mcp_servers.harness import (
        PAGED,
        PYTHON,
        eventually,
        gone,
        no_orphan_servers,
        server_children,
        time_stdio,
        toy_stdio,
    )
except ImportError:
    from mcp_servers.harness import (
        PAGED,
        PYTHON,
        eventually,
        gone,
        no_orphan_servers,
        server_children,
        time_stdio,
        toy_stdio,
    )

__all__ = ["no_orphan_servers"]  # the session-wide orphan check runs with these tests


def by_name(tools: list[Tool]) -> dict[str, Tool]:
    return {t.name: t for t in tools}


async def run(tool: Tool, **arguments: Any) -> CallOutcome:
    return await execute(tool, ToolCall("call_1", tool.name, arguments), "ses_test")


async def server_pid(tools: dict[str, Tool]) -> int:
    return int((await run(tools["pid"])).content)


async def test_the_time_server_lists_its_tools_with_their_schemas_and_read_effects() -> None:
    async with McpToolSource([time_stdio()]) as source:
        tools = by_name(await source.list_tools())
    assert set(tools) == {"get_current_time", "convert_time"}
    current = tools["get_current_time"]
    assert current.effect == "read" and current.validator is None
    assert current.parameters["required"] == ["timezone"]
    assert "IANA" in current.parameters["properties"]["timezone"]["description"]
    assert "time" in current.description.lower()


async def test_an_agent_calls_the_time_server_and_the_real_answer_is_in_the_transcript() -> None:
    def answer(messages: list[Message]) -> str:
        result = messages[-1].tool_results[0]
        return f"In Paris it is {json.loads(result.content)['datetime']}"

    store = MemoryStore()
    async with McpToolSource([time_stdio()]) as source:
        agent = Agent(
            ScriptedModel([call("get_current_time", timezone="Europe/Paris"), answer]),
            tools=await source.list_tools(),
            store=store,
        )
        result = await agent.run("What time is it in Paris?")
        pids = [p.pid for p in server_children()]
    assert result.stop_reason == "end_turn"
    finished = [
        e.payload
        for e in await store.read(result.session_id)
        if isinstance(e.payload, ToolFinished)
    ]
    assert [f.outcome for f in finished] == ["ok"]
    data = json.loads(finished[0].content)
    assert data["timezone"] == "Europe/Paris"
    stamp = datetime.fromisoformat(data["datetime"])
    assert abs(stamp - datetime.now(stamp.tzinfo)) < timedelta(hours=1)
    assert result.output == f"In Paris it is {data['datetime']}"
    assert pids and await eventually(lambda: all(gone(pid) for pid in pids))


async def test_servers_start_lazily_at_the_first_listing() -> None:
    before = {p.pid for p in server_children()}
    source = McpToolSource([toy_stdio()])
    try:
        await asyncio.sleep(0)
        assert {p.pid for p in server_children()} == before
        assert not source.connection("toy").running
        await source.list_tools()
        assert source.connection("toy").running and source.connection("toy").starts == 1
    finally:
        await source.aclose()


async def test_a_crash_during_a_call_is_an_error_result_and_the_next_call_restarts_the_server() -> (
    None
):
    async with McpToolSource([toy_stdio()]) as source:
        tools = by_name(await source.list_tools())
        first = await server_pid(tools)
        crashed = await run(tools["crash"])
        assert crashed.outcome == "unknown_effect"  # a write (no annotations) cut off mid-call
        assert "MCP server 'toy' closed the connection during tool 'crash'" in crashed.content
        assert "restarted at the next call" in crashed.content
        second = await server_pid(tools)
        assert second != first and source.connection("toy").starts == 2
        assert gone(first)
    assert await eventually(lambda: gone(second))


async def test_a_server_that_died_while_idle_is_restarted_quietly() -> None:
    async with McpToolSource([toy_stdio()]) as source:
        tools = by_name(await source.list_tools())
        first = await server_pid(tools)
        psutil.Process(first).kill()
        assert await eventually(lambda: gone(first))
        assert await eventually(lambda: not source.connection("toy").running, 10)
        echoed = await run(tools["echo"], text="again")
        assert (echoed.outcome, echoed.content) == ("ok", "again")
        assert source.connection("toy").starts == 2


async def test_a_server_that_cannot_start_gives_a_clear_error_naming_it() -> None:
    source = McpToolSource(
        [McpServerConfig("ghost", command="/nonexistent/mcp-ghost", args=("--x",))]
    )
    with pytest.raises(McpServerUnavailable) as caught:
        await source.list_tools()
    await source.aclose()
    message = str(caught.value)
    assert "MCP server 'ghost' (/nonexistent/mcp-ghost --x) could not be started" in message
    assert caught.value.server == "ghost"


async def test_a_server_that_never_answers_the_handshake_times_out_and_is_stopped() -> None:
    marker = "tether-silent-server-marker"
    silent = McpServerConfig(
        "silent",
        command=PYTHON,
        args=("-c", f"import time; time.sleep(120)  # {marker}"),
        startup_timeout=1.0,
    )
    source = McpToolSource([silent])
    started = time.monotonic()
    with pytest.raises(
        McpServerUnavailable, match=r"MCP server 'silent' .* did not finish starting within 1 s"
    ):
        await source.list_tools()
    await source.aclose()
    assert time.monotonic() - started < 30

    def silent_alive() -> bool:
        alive = []
        for p in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                alive.append(marker in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE)
        return any(alive)

    assert await eventually(lambda: not silent_alive())


async def test_a_hung_call_times_out_and_the_server_receives_the_cancel() -> None:
    async with McpToolSource([toy_stdio(timeout=0.5)]) as source:
        tools = by_name(await source.list_tools())
        started = time.monotonic()
        hung = await run(tools["hang"])
        assert hung.outcome == "timeout" and "did not finish within 0.5 s" in hung.content
        assert time.monotonic() - started < 10

        async def cancels() -> int:
            return int(json.loads((await run(tools["get_stats"])).content)["cancelled"])

        # The cancel notification is handled by the server after the timeout: poll, bounded.
        counts = [await cancels()]
        for _ in range(200):
            if counts[-1] >= 1:
                break
            await asyncio.sleep(0.05)
            counts.append(await cancels())
        assert counts[-1] == 1


async def test_a_server_that_ignores_the_cancel_does_not_hang_the_loop_or_the_shutdown() -> None:
    async with McpToolSource([toy_stdio(timeout=0.5)]) as source:
        tools = by_name(await source.list_tools())
        pid = await server_pid(tools)
        started = time.monotonic()
        stubborn = await run(tools["stubborn"], seconds=60)
        assert stubborn.outcome == "timeout"
        assert (await run(tools["echo"], text="still here")).content == "still here"
        assert time.monotonic() - started < 10
        closing = time.monotonic()
    assert time.monotonic() - closing < 30
    assert await eventually(lambda: gone(pid))


async def test_error_results_and_protocol_errors_carry_the_servers_message() -> None:
    async with McpToolSource([toy_stdio()]) as source:
        tools = by_name(await source.list_tools())
        failed = await run(tools["fail"], message="the disk is full")
        protocol = await run(tools["protocol_error"], message="no such widget")
        assert failed.outcome == "error" and "the disk is full" in failed.content
        assert protocol.outcome == "error"
        assert (
            "MCP server 'toy' answered tool 'protocol_error' with error -32000: no such widget"
            in protocol.content
        )
        # -32000 is also the SDK's own "connection closed" code: the server must not be restarted.
        assert source.connection("toy").running and source.connection("toy").starts == 1
        bad_args = await run(tools["echo"], wrong=1)
        assert bad_args.outcome == "error" and "text" in bad_args.content


async def test_progress_reaches_the_observer_and_is_never_stored() -> None:
    seen: list[McpProgress] = []
    store = MemoryStore()
    async with McpToolSource([toy_stdio()], on_progress=seen.append) as source:
        agent = Agent(
            ScriptedModel([call("count", steps=3), "done"]),
            tools=await source.list_tools(),
            store=store,
        )
        result = await agent.run("count to three")
    assert [(p.server, p.tool, p.progress, p.total, p.message) for p in seen] == [
        ("toy", "count", float(i), 3.0, f"step {i} of 3") for i in (1, 2, 3)
    ]
    assert {p.session_id for p in seen} == {result.session_id} and {p.call_id for p in seen} == {
        "call_0_0"
    }
    stored = "\n".join(e.canonical() for e in await store.read(result.session_id))
    assert "counted to 3" in stored and "step 1 of 3" not in stored


async def test_a_write_call_interrupted_by_a_crash_gets_unknown_effect_and_is_not_repeated() -> (
    None
):
    store = MemoryStore()
    async with McpToolSource([toy_stdio()]) as source:
        tools = await source.list_tools()
        # What a runner that died mid-call leaves behind: the calls started, never finished.
        log = SessionLog(store, "ses_crashed")
        calls = (
            ToolCall("c_write", "write_note", {"text": "pay the invoice"}),
            ToolCall("c_read", "echo", {"text": "hi"}),
        )
        await log.append(
            SessionCreated(model="scripted", tools={t.name: t.schema_hash for t in tools}),
            UserMessage(user("note it")),
            ModelResponded(Message("assistant", calls), stop="tool_calls"),
            ToolStarted("c_write", "write_note", "write"),
            ToolStarted("c_read", "echo", "read"),
        )
        # The scripted model answers by assistant turns so far: the first was the calls.
        agent = Agent(ScriptedModel(["(the calls above)", "checked"]), tools=tools, store=store)
        result = await agent.run(None, session_id="ses_crashed")
        stats = json.loads((await run(by_name(tools)["get_stats"])).content)
    finished = {
        e.payload.call_id: e.payload
        for e in await store.read("ses_crashed")
        if isinstance(e.payload, ToolFinished)
    }
    assert finished["c_write"].outcome == "unknown_effect"
    assert (finished["c_read"].outcome, finished["c_read"].content) == ("ok", "hi")
    assert stats["calls"] == 1  # the echo ran again; write_note never reached the server
    assert (result.stop_reason, result.output) == ("end_turn", "checked")


async def test_approval_can_be_required_for_one_tool_of_a_server() -> None:
    store = MemoryStore()
    async with McpToolSource([toy_stdio(needs_approval=frozenset({"write_note"}))]) as source:
        tools = by_name(await source.list_tools())
        assert tools["write_note"].needs_approval and not tools["echo"].needs_approval
        model = ScriptedModel([[call("echo", text="a"), call("write_note", text="b")], "done"])
        result = await Agent(model, tools=list(tools.values()), store=store).run("go")
    assert result.stop_reason == "awaiting_approval"
    payloads = [e.payload for e in await store.read(result.session_id)]
    assert [p.call_id for p in payloads if isinstance(p, ToolFinished)] == ["call_0_0"]
    assert [p.name for p in payloads if type(p).__name__ == "ApprovalRequested"] == ["write_note"]


async def test_a_server_wide_approval_covers_every_tool() -> None:
    async with McpToolSource([time_stdio(needs_approval=True)]) as source:
        assert all(t.needs_approval for t in await source.list_tools())


async def test_every_page_of_tools_is_listed_and_odd_names_are_made_safe() -> None:
    async with McpToolSource(
        [McpServerConfig("paged", command=PYTHON, args=(str(PAGED),))]
    ) as source:
        tools = by_name(await source.list_tools())
        assert len(tools) == 5 and {"files_read", "files_write", "net_fetch", "search"} <= set(
            tools
        )
        assert all(t.effect == "write" for t in tools.values())  # no annotations: pessimistic
        called = await run(tools["files_read"])
    assert called.content == "called files.read"  # the server's own name is what is called


async def test_two_servers_with_the_same_tool_names_get_prefixed_names() -> None:
    async with McpToolSource([toy_stdio("one"), toy_stdio("two")]) as source:
        tools = by_name(await source.list_tools(taken=["pid"]))
        assert {"one__echo", "two__echo", "one__pid", "two__pid"} <= set(
            tools
        ) and "echo" not in tools
        assert (await run(tools["two__echo"], text="from two")).content == "from two"


async def test_the_listing_is_refreshed_after_the_server_says_its_tools_changed() -> None:
    async with McpToolSource([toy_stdio(protocol="legacy")]) as source:
        tools = by_name(await source.list_tools())
        assert "shiny" not in tools
        assert (await run(tools["grow"], name="shiny")).outcome == "ok"
        assert await eventually(lambda: source.connection("toy").tools_stale)
        refreshed = by_name(await source.list_tools())
        assert (await run(refreshed["shiny"])).content == "I am shiny"


async def test_calls_after_close_are_refused_and_start_nothing() -> None:
    source = McpToolSource([toy_stdio()])
    tools = by_name(await source.list_tools())
    await source.aclose()
    after = await run(tools["echo"], text="x")
    assert after.outcome == "error" and "MCP server 'toy' is closed" in after.content
    assert not source.connection("toy").running


def test_the_package_imports_without_starting_anything() -> None:
    assert "tether.tools.mcp" in sys.modules
