"""An agent with Anthropic extended thinking and one `add` tool, over a SQLite store. Run as
a script (`python thinking_worker.py URL DB DIE_AT`) it starts a session and dies, with no
cleanup, inside the call `add(DIE_AT, 1)`: a crash in the middle of a thinking session."""

from __future__ import annotations

import os
import sys

import tether
from tether import ModelSettings, Reasoning
from tether.providers.anthropic import AnthropicModel
from tether.store import SQLiteStore

TASK = "Add each step to one, five times."
_DIE_AT = 0


@tether.tool(effect="read")
def add(a: int, b: int) -> int:
    """Add two integers."""
    if a == _DIE_AT:
        os._exit(9)  # a crash: no finally, no lease release
    return a + b


def agent_for(url: str, store: object, *, stream: bool = False) -> tether.Agent:
    model = AnthropicModel("claude-sonnet-4-5", api_key="sk-loopback", base_url=url, stream=stream)
    return tether.Agent(
        model,
        tools=[add],
        store=store,  # type: ignore[arg-type]
        settings=ModelSettings(reasoning=Reasoning(budget_tokens=2048)),
        lease_ttl=0.5,
    )


if __name__ == "__main__":
    url, db, die_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    _DIE_AT = die_at
    agent_for(url, SQLiteStore(db)).run_sync(TASK)
    sys.exit("the worker was meant to die inside its tool call")
