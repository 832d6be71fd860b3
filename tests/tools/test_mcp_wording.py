"""What the model reads when an MCP call fails is prose: no Python class name (McpToolFailed,
FileNotFoundError, ConnectError...) reaches a tool result."""

from __future__ import annotations

import re
from typing import Any

from tether.messages import ToolCall
from tether.tools import Tool
from tether.tools.mcp import McpServerConfig, McpServerUnavailable, McpToolSource
from tether.tools.run import CallOutcome, execute

try:
    from .mcp_servers.harness import no_orphan_servers, toy_stdio
except ImportError:
    from mcp_servers.harness import no_orphan_servers, toy_stdio

__all__ = ["no_orphan_servers"]

CLASS_NAME = re.compile(r"\b(Mcp[A-Z]\w+|[A-Z]\w*(Error|Exception|Failed|Unavailable))\b")


async def run(tool: Tool, **arguments: Any) -> CallOutcome:
    return await execute(tool, ToolCall("call_1", tool.name, arguments), "ses_test")


async def test_failed_mcp_calls_read_as_prose() -> None:
    source = McpToolSource([toy_stdio()])
    tools = {t.name: t for t in await source.list_tools()}
    try:
        failed = await run(tools["fail"], message="the disk is full")
        protocol = await run(tools["protocol_error"], message="widget not found")
        crashed = await run(tools["crash"], code=3)
    finally:
        await source.aclose()
    closed = await run(tools["echo"], text="x")
    # the server's own words follow ours
    assert failed.content.startswith("tool fail failed: ") and "the disk is full" in failed.content
    assert "error -32000: widget not found" in protocol.content
    assert crashed.outcome == "unknown_effect"
    assert "MCP server 'toy' is closed" in closed.content
    for outcome in (failed, protocol, crashed, closed):
        assert not CLASS_NAME.search(outcome.content), outcome.content


async def test_a_server_that_cannot_start_is_described_in_words() -> None:
    ghost = McpServerConfig("ghost", command="/nonexistent/mcp-ghost")
    async with McpToolSource([ghost]) as source:
        try:
            await source.list_tools()
        except McpServerUnavailable as exc:
            message = str(exc)
    assert message.endswith(
        "could not be started: No such file or directory: /nonexistent/mcp-ghost"
    )
    assert not CLASS_NAME.search(message)
