"""What the model sees of an MCP result, against a real SDK server: text or structured content,
never both (a file read once, not once as text and again as escaped JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tether.messages import ToolCall
from tether.tools import Tool
from tether.tools.mcp import McpServerConfig, McpToolSource
from tether.tools.run import execute

try:
    from .mcp_servers.harness import PYTHON, toy_stdio
except ImportError:
    from mcp_servers.harness import PYTHON, toy_stdio

SESSION_SERVER = Path(__file__).parent / "mcp_servers" / "session_server.py"
FILE_TEXT = 'line "one"\n\tline two\n' * 400  # quotes, newlines and tabs: JSON escapes them


def content_server() -> McpServerConfig:
    return McpServerConfig("files", command=PYTHON, args=(str(SESSION_SERVER), "stdio"))


async def answer(tool: Tool, **arguments: Any) -> str:
    outcome = await execute(tool, ToolCall("call_1", tool.name, arguments), "ses_content")
    assert outcome.outcome == "ok", outcome.content
    return outcome.content


async def test_a_tool_with_an_output_schema_is_shown_its_structured_content_once() -> None:
    async with McpToolSource([content_server()]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        shown = await answer(tools["read_text"], text=FILE_TEXT)
    assert json.loads(shown) == {"content": FILE_TEXT}
    assert shown.count("line two") == FILE_TEXT.count("line two")


async def test_a_tool_without_an_output_schema_is_shown_its_text_only() -> None:
    async with McpToolSource([content_server()]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        assert await answer(tools["loose"], text=FILE_TEXT) == FILE_TEXT


async def test_structured_content_with_no_content_blocks_is_still_shown() -> None:
    async with McpToolSource([content_server()]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        assert json.loads(await answer(tools["only_structured"], text="x")) == {"content": "x"}


async def test_typed_returns_of_an_sdk_server_are_shown_once() -> None:
    async with McpToolSource([toy_stdio()]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        assert json.loads(await answer(tools["add"], a=2, b=40)) == {"total": 42}
        assert await answer(tools["echo"], text="said once") == "said once"
        assert int(await answer(tools["pid"])) > 0
