"""Which tools of a real MCP server are offered: `enabled_tools`, `disabled_tools` and a
Python `tool_filter`; a name the server does not have is an error naming the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import types

from tether import Agent
from tether.errors import ConfigError
from tether.events import ToolFinished
from tether.messages import ToolCall
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.tools.mcp import McpServerConfig, McpToolSource, load_mcp_config
from tether.tools.run import execute

try:
    from .mcp_servers.harness import PYTHON, TOY, toy_stdio
except ImportError:
    from mcp_servers.harness import PYTHON, TOY, toy_stdio


async def offered(source: McpToolSource) -> set[str]:
    return {t.name for t in await source.list_tools()}


async def test_a_disabled_tool_is_never_offered_and_cannot_be_called(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    entry = {"command": PYTHON, "args": [str(TOY), "stdio"], "disabled_tools": ["write_note"]}
    config.write_text(json.dumps({"mcpServers": {"toy": entry}}), encoding="utf-8")
    store = MemoryStore()
    async with McpToolSource(load_mcp_config(config)) as source:
        tools = {t.name: t for t in await source.list_tools()}
        assert "write_note" not in tools and {"echo", "add"} <= set(tools)
        model = ScriptedModel([call("write_note", text="x"), "done"])
        result = await Agent(model, tools=list(tools.values()), store=store).run("write")
        stats = await execute(tools["get_stats"], ToolCall("c", "get_stats", {}))
    finished = [
        e.payload
        for e in await store.read(result.session_id)
        if isinstance(e.payload, ToolFinished)
    ]
    assert [f.outcome for f in finished] == ["unknown_tool"]
    assert json.loads(stats.content)["calls"] == 0  # nothing reached the server


async def test_an_enabled_list_offers_only_those_tools() -> None:
    async with McpToolSource([toy_stdio(enabled_tools=frozenset({"echo", "add"}))]) as source:
        assert await offered(source) == {"echo", "add"}


async def test_a_tool_filter_function_sees_each_server_tool() -> None:
    seen: list[tuple[str, str]] = []

    def read_only(server: str, tool: types.Tool) -> bool:
        seen.append((server, tool.name))
        return bool(tool.annotations and tool.annotations.read_only_hint)

    async with McpToolSource(
        [toy_stdio(disabled_tools=frozenset({"echo"}))], tool_filter=read_only
    ) as source:
        names = await offered(source)
    assert "echo" not in names and "pid" in names
    assert "write_note" not in names and "add" not in names  # not read-only
    assert ("toy", "echo") not in seen  # disabled by the config before the filter is asked
    assert ("toy", "write_note") in seen


@pytest.mark.parametrize("key", ["enabled_tools", "disabled_tools"])
async def test_a_listed_name_the_server_does_not_have_is_an_error_naming_it(key: str) -> None:
    config: McpServerConfig = toy_stdio(**{key: frozenset({"echo", "ecoh"})})
    async with McpToolSource([config]) as source:
        with pytest.raises(ConfigError) as caught:
            await source.list_tools()
    message = str(caught.value)
    assert f"MCP server 'toy': {key} names 'ecoh', which the server does not have" in message
    assert "echo" in message.split("it has:")[1]
