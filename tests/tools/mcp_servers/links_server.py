"""An MCP server whose tools answer with resources: links to a text, an image, a binary, a
large, a slow and a missing resource, many links, and embedded images.

`python links_server.py` serves the SDK's `MCPServer` over stdio, `python links_server.py http
[PORT]` over streamable HTTP as the toy server does; `python links_server.py bare` serves a
low-level `Server` with tools only (no resources capability) whose one tool answers a link all
the same.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import anyio
from mcp import types
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.types import EmbeddedResource, ResourceLink, TextContent, ToolAnnotations

server = MCPServer("links", version="1.0", log_level="WARNING")
READ = ToolAnnotations(read_only_hint=True)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PDF = b"%PDF-1.4 not really"
GUIDE = "Step one: read the guide.\nStep two: follow it."
BIG = "x" * 150_000  # past a tool's output cap (100,000 characters)
FLOOD = 50 * 1024 * 1024  # a reply ten times a link's cap, its size not declared
Block = TextContent | ResourceLink | EmbeddedResource


@server.resource("memo://guide", name="guide", mime_type="text/plain")
def guide() -> str:
    return GUIDE


@server.resource("memo://chart", name="chart", mime_type="image/png")
def chart() -> bytes:
    return PNG


@server.resource("memo://report", name="report", mime_type="application/pdf")
def report() -> bytes:
    return PDF


@server.resource("memo://poster", name="poster", mime_type="image/png")
def poster() -> bytes:
    return PNG + b"\x00" * 6 * 1024 * 1024  # past the image cap (5 MiB)


@server.resource("memo://big", name="big", mime_type="text/plain")
def big() -> str:
    return BIG


@server.resource("memo://flood", name="flood", mime_type="text/plain")
def flood() -> str:
    return "x" * FLOOD


@server.resource("memo://slow", name="slow", mime_type="text/plain")
async def slow() -> str:
    await anyio.sleep(30)
    return "too late"


@server.resource("memo://notes/{number}", name="note")
def note(number: str) -> str:
    return f"note {number}"


def link(uri: str, name: str, **fields: Any) -> ResourceLink:
    return ResourceLink(type="resource_link", uri=uri, name=name, **fields)


@server.tool(annotations=READ)
def link_text() -> list[Block]:
    """A caption and a link to a text resource."""
    return [TextContent(type="text", text="see the guide"), link("memo://guide", "guide")]


@server.tool(annotations=READ)
def link_image() -> list[Block]:
    """A link to a PNG resource."""
    return [link("memo://chart", "chart", mime_type="image/png")]


@server.tool(annotations=READ)
def link_unreadable() -> list[Block]:
    """Links that cannot be shown: a missing resource, another server's URI, a binary that is
    no image, an image past the cap, and one whose declared size is too big to read."""
    return [
        link("memo://missing", "missing"),
        link("https://example.com/elsewhere", "elsewhere"),
        link("memo://report", "report"),
        link("memo://poster", "poster"),
        link("memo://huge", "huge", size=10**9),
    ]


@server.tool(annotations=READ)
def link_big() -> list[Block]:
    """A link to a text longer than a tool's output cap."""
    return [link("memo://big", "big")]


@server.tool(annotations=READ)
def link_flood() -> list[Block]:
    """A link to a 50 MiB text that does not say its size, then a link to the guide."""
    return [link("memo://flood", "flood"), link("memo://guide", "guide")]


@server.tool(annotations=READ)
def link_slow() -> list[Block]:
    """A link to a resource that takes 30 s to read, then a link to the guide."""
    return [link("memo://slow", "slow"), link("memo://guide", "guide")]


@server.tool(annotations=READ)
def embedded_image() -> list[Block]:
    """A caption and an embedded PNG (a blob resource), then an embedded PDF."""
    blob = types.BlobResourceContents(
        uri="memo://chart", mime_type="image/png", blob=base64.b64encode(PNG).decode()
    )
    pdf = types.BlobResourceContents(
        uri="memo://report", mime_type="application/pdf", blob=base64.b64encode(PDF).decode()
    )
    return [
        TextContent(type="text", text="a chart"),
        EmbeddedResource(type="resource", resource=blob),
        EmbeddedResource(type="resource", resource=pdf),
    ]


@server.tool(annotations=READ)
def many_links(count: int) -> list[Block]:
    """Links to `count` distinct notes."""
    return [link(f"memo://notes/{n}", f"note {n}") for n in range(1, count + 1)]


@server.tool(annotations=READ)
def many_images(count: int) -> list[Block]:
    """`count` embedded PNGs, then a link to the PNG resource."""
    blob = types.BlobResourceContents(
        uri="memo://chart", mime_type="image/png", blob=base64.b64encode(PNG).decode()
    )
    embedded = EmbeddedResource(type="resource", resource=blob)
    return [*[embedded] * count, link("memo://chart", "chart")]


async def _bare_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    schema = {"type": "object", "properties": {}}
    return types.ListToolsResult(tools=[types.Tool(name="link_text", input_schema=schema)])


async def _bare_call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[link("memo://guide", "guide")])


async def _serve_bare() -> None:
    bare: Server[Any] = Server("bare", on_list_tools=_bare_tools, on_call_tool=_bare_call)
    async with stdio_server() as (read, write):
        await bare.run(read, write, bare.create_initialization_options())


if __name__ == "__main__":
    if sys.argv[1:] == ["bare"]:
        anyio.run(_serve_bare)
    elif sys.argv[1:2] == ["http"]:
        from toy_server import serve_http

        serve_http(int(sys.argv[2]) if len(sys.argv) > 2 else 0, server)
    else:
        server.run("stdio")
