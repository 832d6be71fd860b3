"""MCP: the tools of a Model Context Protocol server beside Python tools. Here the reference
time server (`pip install mcp-server-time`), started over stdio and stopped with the source.

    python examples/mcp_time.py
    TETHER_EXAMPLE_MODEL=anthropic:claude-sonnet-4-5 python examples/mcp_time.py

Needs the MCP extra and the server (from a clone: `pip install -e '.[mcp]' mcp-server-time`).
The configuration is the usual `mcpServers` mapping, as `load_mcp_config("mcp.json")` would
read it from a file.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence

from tether import Agent, Message
from tether.testing import ScriptedModel, call
from tether.tools.mcp import McpToolSource, parse_mcp_config

CONFIG = {
    "mcpServers": {
        # The server's own module, run by this interpreter: found whatever PATH says.
        "time": {
            "command": sys.executable,
            "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        }
    }
}


def answer(messages: Sequence[Message]) -> str:
    """The scripted model's second reply: it reads what the server answered."""
    result = json.loads(messages[-1].tool_results[0].content)
    return f"In Lisbon it is {result['datetime'][11:16]} ({result['timezone']})."


async def main() -> int:
    script = ScriptedModel([call("get_current_time", timezone="Europe/Lisbon"), answer])
    async with McpToolSource(parse_mcp_config(CONFIG)) as mcp:
        tools = await mcp.list_tools()
        for t in tools:
            print(f"tool from MCP: {t.name} (effect {t.effect}): {t.description[:60]}")
        agent = Agent(
            os.environ.get("TETHER_EXAMPLE_MODEL") or script, tools=tools, store="memory:"
        )
        try:
            result = await agent.run("What time is it in Lisbon?")
        finally:
            await agent.close()
    print(f"answer: {result.output}")
    print(f"stop reason: {result.stop_reason}")
    return 0 if result.stop_reason == "end_turn" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
