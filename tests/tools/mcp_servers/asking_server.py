"""An MCP server whose tools ask their client mid-call: `greet` elicits a name (a form),
`haiku` has the client's model write a line (sampling), `roots` lists the client's roots. Each run of a tool appends a line to
the file named by ASKING_LOG (when set), so a test can count the runs across restarts.
Both ask through the SDK's resolvers, which send a request mid-call on a 2025-11-25
connection and answer `input_required` on a 2026-07-28 one.

`python asking_server.py` serves over stdio.
"""

from __future__ import annotations

import os
from typing import Annotated

from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Elicit, MCPServer, Resolve
from mcp.server.mcpserver.resolve import ListRoots, Sample
from mcp.types import (
    CreateMessageResult,
    ListRootsResult,
    SamplingMessage,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel

server = MCPServer("asking", version="1.0", log_level="WARNING")


class Name(BaseModel):
    name: str


def _note(line: str) -> None:
    path = os.environ.get("ASKING_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def ask_name() -> Elicit[Name]:
    _note("greet asked")
    return Elicit("What is your name?", Name)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def greet(answer: Annotated[ElicitationResult[Name], Resolve(ask_name)]) -> str:
    """Greet the user, asking for their name."""
    _note(f"greet answered {answer.action}")
    if answer.action == "accept":
        return f"hello {answer.data.name}"
    return f"no name ({answer.action})"


def ask_line(topic: str) -> Sample:
    text = TextContent(type="text", text=f"a line on {topic}")
    return Sample(
        [SamplingMessage(role="user", content=text)],
        max_tokens=50,
        system_prompt="You write one line.",
    )


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def haiku(topic: str, line: Annotated[CreateMessageResult, Resolve(ask_line)]) -> str:
    """Have the client's model write one line on a topic."""
    text = line.content.text if isinstance(line.content, TextContent) else "?"
    return f"{line.model} wrote: {text}"


def ask_roots() -> ListRoots:
    return ListRoots()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def roots(found: Annotated[ListRootsResult, Resolve(ask_roots)]) -> str:
    """The client's roots, one `NAME URI` a line."""
    return "\n".join(f"{r.name} {r.uri}" for r in found.roots)


if __name__ == "__main__":
    server.run("stdio")
