"""Image content of MCP results reaches the model as images (tether `Image`s on the result),
not as a placeholder; what no model API takes stays a placeholder in the text."""

from __future__ import annotations

from typing import Any

from tether import Agent
from tether.events import ToolFinished
from tether.messages import ToolCall
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.tools import Tool
from tether.tools.mcp import McpToolSource
from tether.tools.run import MAX_RESULT_IMAGES, CallOutcome, execute

try:
    from .mcp_servers.harness import catalog_stdio, no_orphan_servers
except ImportError:
    from mcp_servers.harness import catalog_stdio, no_orphan_servers

__all__ = ["no_orphan_servers"]


async def run(tool: Tool, **arguments: Any) -> CallOutcome:
    return await execute(tool, ToolCall("call_1", tool.name, arguments), "ses_test")


async def test_an_image_block_becomes_an_image_beside_the_text() -> None:
    async with McpToolSource([catalog_stdio()]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        one = await run(tools["picture"])
        many = await run(tools["picture"], count=MAX_RESULT_IMAGES + 2)
        odd = await run(tools["odd_media"])
    assert (one.outcome, one.content) == ("ok", "a square")
    assert [i.media_type for i in one.images] == ["image/png"]
    assert one.images[0].data is not None and one.images[0].data.startswith(b"\x89PNG")
    # past the cap the rest are named in the text rather than failing the call
    assert many.outcome == "ok" and len(many.images) == MAX_RESULT_IMAGES
    assert many.content.count("[image image/png") == 2
    assert odd.images == ()
    assert odd.content == "[image image/svg+xml, 6 bytes]\n[audio audio/wav, 12 bytes]"


async def test_an_agent_records_the_image_in_tool_finished() -> None:
    store = MemoryStore()
    async with McpToolSource([catalog_stdio()]) as source:
        agent = Agent(
            ScriptedModel([call("picture"), "a square"]),
            tools=await source.list_tools(),
            store=store,
        )
        result = await agent.run("draw")
    (finished,) = [
        e.payload
        for e in await store.read(result.session_id)
        if isinstance(e.payload, ToolFinished)
    ]
    assert finished.content == "a square" and [i.media_type for i in finished.images] == [
        "image/png"
    ]
