"""An MCP server (the SDK's `MCPServer`) with what servers offer besides tools: resources, a
resource template, prompts and `instructions`, plus a tool that logs and one that adds a tool.

`python catalog_server.py` serves over stdio.
"""

from __future__ import annotations

import base64
import contextlib

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import AudioContent, ImageContent, TextContent, ToolAnnotations

INSTRUCTIONS = "Always call lookup before answering questions about the catalog."
server = MCPServer("catalog", version="1.0", instructions=INSTRUCTIONS, log_level="WARNING")
READ = ToolAnnotations(read_only_hint=True)


@server.resource(
    "memo://readme", name="readme", description="What this server is", mime_type="text/plain"
)
def readme() -> str:
    return "The catalog server keeps memos."


@server.resource("memo://logo", name="logo", mime_type="image/png")
def logo() -> bytes:
    return b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


@server.resource("memo://notes/{topic}", name="note", description="A note on a topic")
def note(topic: str) -> str:
    return f"Notes on {topic}."


@server.prompt(description="Ask for a review of some code")
def review(code: str, style: str = "terse") -> str:
    return f"Review this code ({style}):\n{code}"


@server.prompt()
def greet() -> list[dict[str, str]]:
    return [
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": "Hello!"},
    ]


@server.tool(annotations=READ)
async def lookup(item: str, ctx: Context) -> str:
    """Look an item up, logging as it goes."""
    await ctx.info(f"looking up {item}", logger_name="catalog.lookup")
    await ctx.warning(f"{item} is out of stock")
    return f"{item}: 3 left"


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@server.tool(annotations=READ)
def picture(count: int = 1) -> list[TextContent | ImageContent | AudioContent]:
    """A caption and `count` PNG images."""
    image = ImageContent(type="image", data=_b64(PNG), mime_type="image/png")
    return [TextContent(type="text", text="a square"), *[image] * count]


@server.tool(annotations=READ)
def odd_media() -> list[TextContent | ImageContent | AudioContent]:
    """An SVG image and a sound, which no model API takes as an image."""
    return [
        ImageContent(type="image", data=_b64(b"<svg/>"), mime_type="image/svg+xml"),
        AudioContent(type="audio", data=_b64(b"RIFF0000WAVE"), mime_type="audio/wav"),
    ]


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool named `name` and announce that the tool list changed."""

    def extra() -> str:
        return f"I am {name}"

    server.add_tool(extra, name=name, description=f"added at run time as {name}")
    await ctx.notify_tools_changed()
    with contextlib.suppress(Exception):  # 2026-07-28 sessions take no spontaneous notifications
        await ctx.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    server.run("stdio")
