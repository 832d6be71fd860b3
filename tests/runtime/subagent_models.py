"""A model for sub-agent tests that any worker or `tether serve` process can import (with
`tests` on its path): `python:runtime.subagent_models:parent`.

It does what the last user message says:
  `ask NAME TASK`  calls the sub-agent NAME with TASK, then answers "NAME said: RESULT"
  `hand NAME`      calls `transfer_to_NAME` (a handoff: the sub-agent answers the turn)
  anything else    answers "parent: TEXT"
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.messages import Message
from tether.published import model_factory
from tether.testing.scripted import Reply, ScriptedModel, call

PARENT = "python:runtime.subagent_models:parent"


def _reply(messages: Sequence[Message]) -> Reply:
    last = max(i for i, m in enumerate(messages) if m.role == "user")
    words = messages[last].text.split()
    results = [r.content for m in messages[last + 1 :] for r in m.tool_results]
    if len(words) >= 3 and words[0] == "ask":
        name = words[1]
        return f"{name} said: {results[-1]}" if results else call(name, task=" ".join(words[2:]))
    if len(words) == 2 and words[0] == "hand" and not results:
        return call(f"transfer_to_{words[1]}")
    return f"parent: {messages[last].text}"


@model_factory
def parent() -> ScriptedModel:
    return ScriptedModel([_reply], repeat_last=True, name="scripted:parent")
