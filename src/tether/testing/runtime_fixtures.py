"""A scripted model and tools for runtime tests, importable by any worker process:
`python:tether.testing.runtime_fixtures:model` and `tether.testing.runtime_fixtures:tools`.

The model does what the last user message says, so one model serves every scenario:
  `echo TEXT`        answers "echo: TEXT" (anything unrecognised is echoed too)
  `hang`             never answers (until the turn is cancelled)
  `note N [DELAY]`   asks for the `note` tool N times, one step each, then answers "noted N";
                     with DELAY, each model call takes DELAY seconds
  `guarded ACTION`   asks for the `guarded` tool (it needs approval), then reports its result
  `fail`             raises a provider error, not retryable (the turn ends `error`)
  `call TOOL JSON`   asks for any tool (an MCP server's, say) with the JSON object as its
                     arguments, then answers "TOOL said: RESULT"
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from tether.errors import ServerError
from tether.messages import Message
from tether.published import model_factory
from tether.testing.scripted import Delay, Fail, Hang, Reply, ScriptedModel, call
from tether.tools.base import tool

MODEL = "python:tether.testing.runtime_fixtures:model"
TOOLS = ("tether.testing.runtime_fixtures:tools",)


@tool(effect="read")
async def note(text: str) -> str:
    """Write a note down and read it back.

    Args:
        text: What to note.
    """
    await asyncio.sleep(0)
    return f"noted: {text}"


@tool(effect="write", needs_approval=True)
def guarded(action: str) -> str:
    """Do something that a person must allow first.

    Args:
        action: What to do.
    """
    return f"done: {action}"


tools = [note, guarded]


def _since_last_user(messages: Sequence[Message]) -> tuple[str, int, list[str]]:
    """The last user message's text, the tool steps after it, and their result texts."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            after = messages[index + 1 :]
            results = [r.content for m in after if m.role == "tool" for r in m.tool_results]
            return messages[index].text, sum(m.role == "tool" for m in after), results
    return "", 0, []


def _reply(messages: Sequence[Message]) -> Reply:
    text, steps, results = _since_last_user(messages)
    words = text.split()
    command = words[0] if words else ""
    if command == "hang":
        return Hang()
    if command == "fail":
        # Not retryable, so the model gateway gives up at once rather than back off.
        return Fail(
            ServerError("the scripted model failed on purpose", status=500, retryable=False)
        )
    if command == "note" and len(words) >= 2 and words[1].isdigit():
        wanted = int(words[1])
        delay = float(words[2]) if len(words) >= 3 else 0.0
        reply: Reply = (
            call("note", text=f"step {steps + 1}") if steps < wanted else f"noted {wanted}"
        )
        return Delay(delay, reply) if delay > 0 else reply
    if command == "guarded" and len(words) >= 2:
        if steps == 0:
            return call("guarded", action=" ".join(words[1:]))
        return f"guarded said: {results[-1] if results else ''}"
    if command == "call" and len(words) >= 2:
        if steps == 0:
            arguments = json.loads(text.split(None, 2)[2]) if len(words) > 2 else {}
            return call(words[1], **arguments)
        return f"{words[1]} said: {results[-1] if results else ''}"
    return f"echo: {text.removeprefix('echo ')}"


@model_factory
def model() -> ScriptedModel:
    return ScriptedModel(
        [_reply], repeat_last=True, name="scripted:runtime", price_per_million=(1.0, 2.0)
    )


def _twin(side: str) -> ScriptedModel:
    def reply(messages: Sequence[Message]) -> Reply:
        return f"twin {side}: {_since_last_user(messages)[0]}"

    # One name for both on purpose: what a session runs must never be chosen by name.
    return ScriptedModel([reply], repeat_last=True, name="scripted:twin")


@model_factory
def twin_a() -> ScriptedModel:
    """`python:tether.testing.runtime_fixtures:twin_a`: answers "twin a: TASK"."""
    return _twin("a")


@model_factory
def twin_b() -> ScriptedModel:
    """`python:tether.testing.runtime_fixtures:twin_b`: the same name, answers "twin b: TASK"."""
    return _twin("b")
