"""MCP tool sources over streamable HTTP, against the toy server run as a real subprocess on
127.0.0.1: answers, failures, hangs, crashes, progress, headers and tool-list changes."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest

from tether import Agent
from tether.events import ToolFinished
from tether.messages import ToolCall
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.tools import Tool
from tether.tools.mcp import McpProgress, McpServerConfig, McpServerUnavailable, McpToolSource
from tether.tools.run import CallOutcome, execute

try:
    from .mcp_servers.harness import HttpServer, eventually, http_server, no_orphan_servers
except ImportError:
    from mcp_servers.harness import HttpServer, eventually, http_server, no_orphan_servers

__all__ = ["http_server", "no_orphan_servers"]


def remote(server: HttpServer, **settings: Any) -> McpServerConfig:
    return McpServerConfig("remote", url=server.url, **settings)


async def listed(source: McpToolSource) -> dict[str, Tool]:
    return {t.name: t for t in await source.list_tools()}


async def run(tool: Tool, **arguments: Any) -> CallOutcome:
    return await execute(tool, ToolCall("call_1", tool.name, arguments), "ses_http")


async def test_tools_are_listed_and_called_over_streamable_http(http_server: HttpServer) -> None:
    async with McpToolSource([remote(http_server)]) as source:
        tools = await listed(source)
        assert {"echo": "read", "add": "idempotent", "write_note": "write"}.items() <= {
            n: t.effect for n, t in tools.items()
        }.items()
        assert tools["add"].parameters["required"] == ["a", "b"]
        assert (await run(tools["echo"], text="over http")).content == "over http"
        added = await run(tools["add"], a=2, b=40)
    assert json.loads(added.content) == {"total": 42}


async def test_configured_headers_reach_the_server(http_server: HttpServer) -> None:
    async with McpToolSource([remote(http_server, headers={"X-Tether-Team": "blue"})]) as source:
        tools = await listed(source)
        assert (await run(tools["header"], name="x-tether-team")).content == "blue"


async def test_tool_errors_and_protocol_errors_become_error_results_with_the_servers_message(
    http_server: HttpServer,
) -> None:
    async with McpToolSource([remote(http_server)]) as source:
        tools = await listed(source)
        failed = await run(tools["fail"], message="quota exceeded")
        protocol = await run(tools["protocol_error"], message="widget not found")
        assert failed.outcome == "error" and "quota exceeded" in failed.content
        assert protocol.outcome == "error" and "error -32000: widget not found" in protocol.content
        assert (await run(tools["echo"], text="fine")).outcome == "ok"
        assert source.connection("remote").starts == 1


async def test_a_hung_call_times_out_and_the_cancel_reaches_the_server(
    http_server: HttpServer,
) -> None:
    async with McpToolSource([remote(http_server, timeout=0.5)]) as source:
        tools = await listed(source)
        started = time.monotonic()
        hung = await run(tools["hang"])
        assert hung.outcome == "timeout" and time.monotonic() - started < 10
        stats: dict[str, int] = {}

        async def cancelled() -> bool:
            stats.update(json.loads((await run(tools["get_stats"])).content))
            return stats["cancelled"] >= 1

        deadline = time.monotonic() + 10
        while not await cancelled() and time.monotonic() < deadline:
            pass
        assert stats["cancelled"] == 1


async def test_a_server_that_ignores_the_cancel_does_not_hang_the_loop(
    http_server: HttpServer,
) -> None:
    async with McpToolSource([remote(http_server, timeout=0.5)]) as source:
        tools = await listed(source)
        started = time.monotonic()
        assert (await run(tools["stubborn"], seconds=30)).outcome == "timeout"
        assert (await run(tools["echo"], text="alive")).content == "alive"
        assert time.monotonic() - started < 15


async def test_a_crashed_http_server_gives_an_error_result_and_the_next_call_reconnects(
    http_server: HttpServer,
) -> None:
    async with McpToolSource([remote(http_server)]) as source:
        tools = await listed(source)
        first = int((await run(tools["pid"])).content)
        crashed = await run(tools["crash"])
        # `crash` is a write (no annotations) cut off mid-call: its effect is unknown.
        assert crashed.outcome == "unknown_effect" and "MCP server 'remote'" in crashed.content
        assert "restarted at the next call" in crashed.content
        http_server.restart()  # whoever runs the remote server brings it back
        second = int((await run(tools["pid"])).content)
        assert second != first and source.connection("remote").starts == 2


async def test_progress_over_http_reaches_the_observer(http_server: HttpServer) -> None:
    seen: list[McpProgress] = []
    store = MemoryStore()
    async with McpToolSource([remote(http_server)], on_progress=seen.append) as source:
        agent = Agent(
            ScriptedModel([call("count", steps=2), "done"]),
            tools=await source.list_tools(),
            store=store,
        )
        result = await agent.run("count")
    assert [(p.progress, p.total, p.message) for p in seen] == [
        (1.0, 2.0, "step 1 of 2"),
        (2.0, 2.0, "step 2 of 2"),
    ]
    outcomes = [
        e.payload.outcome
        for e in await store.read(result.session_id)
        if isinstance(e.payload, ToolFinished)
    ]
    assert outcomes == ["ok"]


async def test_a_tool_list_change_announced_over_a_2026_session_refreshes_the_listing(
    http_server: HttpServer,
) -> None:
    async with McpToolSource([remote(http_server)]) as source:
        tools = await listed(source)
        assert "late" not in tools
        assert (await run(tools["grow"], name="late")).outcome == "ok"
        assert await eventually(lambda: source.connection("remote").tools_stale)
        assert (await run((await listed(source))["late"])).content == "I am late"


async def test_an_unreachable_url_is_a_clear_error_naming_the_server() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    source = McpToolSource(
        [McpServerConfig("nowhere", url=f"http://127.0.0.1:{port}/mcp", startup_timeout=10)]
    )
    with pytest.raises(
        McpServerUnavailable,
        match=r"MCP server 'nowhere' \(http://127\.0\.0\.1:\d+/mcp\) could not be started",
    ):
        await source.list_tools()
    await source.aclose()
