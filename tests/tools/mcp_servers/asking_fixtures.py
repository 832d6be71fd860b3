"""A runtime spec's model and tools around the asking server, importable by a worker:
`python:tools.mcp_servers.asking_fixtures:model` and `tools.mcp_servers.asking_fixtures:tools`
(tests/ is on the path of a test run).

`greet` calls the server's `greet` over one module-wide connection (`restart()` ends it, as a
worker process that died would have lost it). The model asks for `greet` once, then reports
what it said: "greeted: ...".
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.messages import Message
from tether.published import model_factory
from tether.testing.scripted import Reply, ScriptedModel, call
from tether.tools.base import Tool
from tether.tools.mcp import McpConnection, McpServerConfig
from tether.tools.schema import ToolContext

HERE = Path(__file__).parent
_CONTEXT = "_context"


def config() -> McpServerConfig:
    env = {k: os.environ[k] for k in ("ASKING_LOG",) if k in os.environ}
    return McpServerConfig(
        "asking",
        command=sys.executable,
        args=(str(HERE / "asking_server.py"),),
        env=env,
        timeout=60.0,
    )


_connection: McpConnection | None = None


def connection() -> McpConnection:
    global _connection
    if _connection is None:
        _connection = McpConnection(config())
    return _connection


async def restart() -> None:
    """End the connection (its server exits); the next call starts another."""
    global _connection
    if _connection is not None:
        await _connection.aclose()
        _connection = None


async def _greet(**kwargs: Any) -> str:
    context = kwargs.pop(_CONTEXT)
    assert isinstance(context, ToolContext)
    result = await connection().call_tool("greet", {}, effect="read", call_id=context.call_id)
    return "".join(getattr(block, "text", "") for block in result.content)


greet = Tool(
    name="greet",
    description="Greet the user, asking for their name.",
    parameters={"type": "object", "properties": {}},
    fn=_greet,
    effect="read",
    context_param=_CONTEXT,
    is_async=True,
)
tools = [greet]


def _reply(messages: Sequence[Message]) -> Reply:
    results = [r.content for m in messages if m.role == "tool" for r in m.tool_results]
    return f"greeted: {results[-1]}" if results else call("greet")


@model_factory
def model() -> ScriptedModel:
    return ScriptedModel([_reply], repeat_last=True, name="scripted:asking")
