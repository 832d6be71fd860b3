"""A small MCP server for the tests, written with the SDK's `MCPServer`: tools that answer,
fail, raise protocol errors, hang, ignore cancels, crash, report progress and add tools.

`python toy_server.py stdio` serves over stdio; `python toy_server.py http [PORT]` serves
streamable HTTP on 127.0.0.1 (a free port when PORT is absent or 0) and prints
`PORT <n>` on stdout once it listens.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations
from pydantic import BaseModel

server = MCPServer("toy", version="1.0", log_level="WARNING")
stats: dict[str, int] = {"cancelled": 0, "calls": 0}


class Sum(BaseModel):
    total: int


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text unchanged."""
    stats["calls"] += 1
    return text


@server.tool(annotations=ToolAnnotations(idempotent_hint=True))
def add(a: int, b: int) -> Sum:
    """Add two integers; the result is structured."""
    stats["calls"] += 1
    return Sum(total=a + b)


@server.tool()
def write_note(text: str) -> str:
    """Pretend to write a note (no annotations: the pessimistic case)."""
    stats["calls"] += 1
    return f"noted: {text}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail(message: str) -> str:
    """Fail as a tool: an isError result."""
    raise ToolError(message)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def protocol_error(message: str) -> str:
    """Fail as a protocol: a JSON-RPC error."""
    raise MCPError(code=-32000, message=message)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def hang() -> str:
    """Never answer; counts the cancels it receives."""
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        stats["cancelled"] += 1
        raise
    return "unreachable"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def stubborn(seconds: float = 30.0) -> str:
    """Ignore cancellation for `seconds`."""
    with anyio.CancelScope(shield=True):
        await anyio.sleep(seconds)
    return "finally"


@server.tool()
def crash(code: int = 3) -> str:
    """Exit the server process at once."""
    os._exit(code)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def count(steps: int, ctx: Context) -> str:
    """Report progress `steps` times, then answer."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i} of {steps}")
    return f"counted to {steps}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def get_stats() -> dict[str, Any]:
    """Counters: calls answered and cancels received."""
    return dict(stats)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header ("" over stdio or when absent)."""
    headers = ctx.headers or {}
    return str(headers.get(name.lower(), headers.get(name, "")))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def meta(ctx: Context) -> str:
    """The `_meta` of this call's request, as sorted JSON (without the progress token)."""
    sent = dict(ctx.request_context.meta or {})
    sent.pop("progressToken", None)
    sent.pop("progress_token", None)
    return json.dumps(sent, sort_keys=True)


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


def serve_http(port: int, served: MCPServer = server) -> None:
    """`served` over streamable HTTP (other test servers run theirs through this too)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app = served.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        serve_http(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    else:
        server.run("stdio")
