"""The model and the `write` tool of the PostgreSQL chaos test, for `tether worker` processes
to import: `python:postgres.chaos_fixtures:model` and `postgres.chaos_fixtures:tools`.

The model asks for two `write` calls, one step each, then answers "done"; a session whose
task says "poison" calls `crash`, which kills its worker (SIGKILL) every time it runs. `write` appends one line
(`SESSION CALL N PID`) to the file named by $TETHER_CHAOS_EFFECTS: the effects counted.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import Sequence

from tether.messages import Message
from tether.published import model_factory
from tether.testing import Delay, ScriptedModel, call
from tether.testing.scripted import Reply
from tether.tools import ToolContext, tool

MODEL = "python:postgres.chaos_fixtures:model"
TOOLS = ("postgres.chaos_fixtures:tools",)
EFFECTS = "TETHER_CHAOS_EFFECTS"


@tool(effect="write")
async def write(n: int, ctx: ToolContext) -> str:
    """Write one record somewhere outside the log (an effect that must not repeat).

    Args:
        n: Which record.
    """
    # Slow enough that calls are in flight when a worker is killed or stopped.
    await asyncio.sleep(random.uniform(0.05, 0.4))
    fd = os.open(os.environ[EFFECTS], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{ctx.session_id} {ctx.call_id} {n} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return f"wrote {n}"


@tool(effect="read")
async def crash() -> str:
    """Kill the process that runs it: a poisoned tool (a read, so it is run again on
    recovery, and kills again)."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


tools = [write, crash]


def _first(messages: Sequence[Message]) -> Reply:
    if messages and "poison" in messages[0].text:
        return call("crash")  # this session kills whoever runs its tool
    return call("write", n=1)


@model_factory
def model() -> ScriptedModel:
    return ScriptedModel([_first, Delay(0.02, call("write", n=2)), "done"])
