"""An MCP server (the SDK's low-level `Server`, over stdio) that lists its tools two to a
page, with tool names that model APIs refuse and with no annotations at all."""

from __future__ import annotations

from typing import Any

import anyio
from mcp import types
from mcp.server import Server
from mcp.server.stdio import stdio_server

NAMES = ["files.read", "files.write", "net/fetch", "search", "a" * 80]
PAGE = 2


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    start = int(params.cursor) if params is not None and params.cursor else 0
    page = NAMES[start : start + PAGE]
    tools = [
        types.Tool(
            name=name, description=f"tool {name}", input_schema={"type": "object", "properties": {}}
        )
        for name in page
    ]
    more = start + PAGE < len(NAMES)
    return types.ListToolsResult(tools=tools, next_cursor=str(start + PAGE) if more else None)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"called {params.name}")]
    )


server: Server[Any] = Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
