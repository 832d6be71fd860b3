"""A stateful streamable HTTP MCP server (the SDK's `MCPServer`, sessions kept in memory) for
the reconnect and content tests: tools that die mid-call, a ledger of what really ran, and
results that carry both text and structured content.

`python session_server.py PORT LEDGER` serves on 127.0.0.1:PORT (a free port when 0), prints
`PORT <n>` once it listens, and appends one line to the LEDGER file per write that ran;
`python session_server.py stdio` serves over stdio. With `SESSION_SERVER_TOKEN` set, HTTP
requests need `Authorization: Bearer <token>`: none is answered 401, a wrong one 403.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel

server = MCPServer("sessions", version="1.0", log_level="WARNING")
LEDGER = Path(sys.argv[2] if len(sys.argv) > 2 else os.devnull)
READ = ToolAnnotations(read_only_hint=True)


class FileText(BaseModel):
    content: str


def _ledger(line: str) -> None:
    with LEDGER.open("a", encoding="utf-8") as file:
        file.write(line + "\n")


@server.tool(annotations=READ)
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def record(note: str) -> str:
    """A write: append the note to the ledger."""
    _ledger(note)
    return f"recorded {note}"


@server.tool()
def record_then_die(note: str) -> str:
    """A write that runs, then the server dies before answering."""
    _ledger(note)
    os._exit(3)


@server.tool(annotations=READ)
def look_then_die(marker: str) -> str:
    """A read that dies the first time (creating `marker`) and answers once it exists."""
    if not Path(marker).exists():
        Path(marker).touch()
        os._exit(3)
    return "looked"


@server.tool(annotations=READ)
def read_text(text: str) -> Annotated[CallToolResult, FileText]:
    """As server-filesystem answers: the text, and the same as structured content with an
    output schema."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content={"content": text}
    )


@server.tool(annotations=READ)
def loose(text: str) -> CallToolResult:
    """Text and structured content, with no output schema declared."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content={"content": text, "length": len(text)},
    )


@server.tool(annotations=READ)
def only_structured(text: str) -> Annotated[CallToolResult, FileText]:
    """Structured content with an output schema, and no content blocks at all."""
    return CallToolResult(content=[], structured_content={"content": text})


def guarded(app: Any, token: str) -> Any:
    """The app behind a bearer token check, as a gateway in front of a remote server does."""

    async def guard(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"").decode()
            if given != f"Bearer {token}":
                status = 403 if given else 401
                await send({"type": "http.response.start", "status": status, "headers": []})
                await send({"type": "http.response.body", "body": b"denied"})
                return
        await app(scope, receive, send)

    return guard


def serve(port: int) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app: Any = server.streamable_http_app(stateless_http=False)
    if token := os.environ.get("SESSION_SERVER_TOKEN"):
        app = guarded(app, token)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    if sys.argv[1:2] == ["stdio"]:
        server.run("stdio")
    else:
        serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
