"""What a running tool call may ask of its session: input from the user (an MCP
elicitation) and a completion from the session's own model (MCP sampling).

Owns the `SessionAsker` protocol (the session layer implements it: `session/inputs.py`), the
context variable through which a running call finds it, and the key naming one question.
It does no I/O; whether and how the question is recorded and answered is the asker's.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from tether.errors import TetherError
from tether.events import InputAction
from tether.messages import JSONObject, Message, canonical_json


@dataclass(frozen=True, slots=True)
class InputAnswer:
    """A user's answer to an elicitation: `content` only with `accept`."""

    action: InputAction
    content: JSONObject


@dataclass(frozen=True, slots=True)
class SamplingRequest:
    """What a server asks the session's model: its messages (user and assistant, text
    only), an optional system prompt and the output cap it set."""

    messages: tuple[Message, ...]
    system: str | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class SamplingAnswer:
    text: str
    model: str
    stop: str = "end_turn"


class SamplingRefused(TetherError):
    """A sampling request the session does not serve: no model, or its budget is spent.
    The server gets an error; nothing is charged."""


class SessionAsker(Protocol):
    """The session a tool call runs in, as its MCP servers reach it."""

    async def elicit(
        self, call_id: str, server: str, message: str, schema: JSONObject
    ) -> InputAnswer: ...

    async def sample(
        self, call_id: str, server: str, request: SamplingRequest
    ) -> SamplingAnswer: ...


# Set by the loop around the calls it runs (each call's task inherits it); None outside a
# session's run (a tool called by hand), where servers' questions are declined.
ASKER: ContextVar[SessionAsker | None] = ContextVar("tether_session_asker", default=None)


def sampling_key(server: str, request: SamplingRequest) -> str:
    """The key of one sampling request, like `input_key`."""
    body = canonical_json(
        {
            "server": server,
            "messages": [m.to_json() for m in request.messages],
            "system": request.system,
            "max_tokens": request.max_tokens,
        }
    )
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def input_key(server: str, message: str, schema: JSONObject) -> str:
    """The key of one question: the same server asking the same thing with the same schema
    has the same key in any process (a call run again after a restart asks again)."""
    body = canonical_json({"server": server, "message": message, "schema": schema})
    return hashlib.sha256(body.encode()).hexdigest()[:32]
