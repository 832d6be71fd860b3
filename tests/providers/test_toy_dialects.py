"""The loopback toy servers must speak each dialect faithfully: everything they send, plain
or streamed, validates against the official SDKs' own response and event types."""

from __future__ import annotations

import json
from typing import Any

import anthropic.types
import openai.types.chat
import openai.types.responses
import pydantic
import pytest

from tether.messages import ToolCall, ToolResult, assistant, tool_results, user
from tether.providers.base import ModelRequest
from tether.providers.http import SSEDecoder
from tether.providers.registry import model_from_string

from .fake_servers import Received
from .test_loopback import ADD, MODEL_NAMES, PLAN
from .toy_dialects import HANDLERS, ToyModel

BODIES: dict[str, Any] = {
    "anthropic": anthropic.types.Message,
    "openai": openai.types.chat.ChatCompletion,
    "openai-responses": openai.types.responses.Response,
}
EVENTS: dict[str, Any] = {
    "anthropic": pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent),
    "openai": pydantic.TypeAdapter(openai.types.chat.ChatCompletionChunk),
    "openai-responses": pydantic.TypeAdapter(openai.types.responses.ResponseStreamEvent),
}


def _requests(dialect: str, stream: bool) -> list[Received]:
    model = model_from_string(f"{dialect}:{MODEL_NAMES[dialect]}", api_key="k", stream=stream)
    first = ModelRequest("m", "sys", (user("add"),), (ADD,))
    calls = [ToolCall(f"c{i}", n, a) for i, (n, a) in enumerate(PLAN)]
    turn = (user("add"), assistant("", calls), tool_results([ToolResult(c.id, "5") for c in calls]))
    second = ModelRequest("m", "sys", turn, (ADD,))
    encode = model.encode  # type: ignore[attr-defined]
    return [Received("POST", "/", {}, json.dumps(encode(r)).encode()) for r in (first, second)]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("dialect", list(BODIES))
def test_toy_answers_validate_against_the_sdk(dialect: str, stream: bool) -> None:
    handler = HANDLERS[dialect](ToyModel(PLAN))
    for received in _requests(dialect, stream):
        reply = handler(received)
        if not stream:
            BODIES[dialect].model_validate(json.loads(reply.body))
            continue
        assert reply.chunks is not None
        decoder = SSEDecoder()
        events = [e for chunk in reply.chunks for e in decoder.feed(chunk)] + decoder.close()
        for event in events:
            if event.data != "[DONE]":
                EVENTS[dialect].validate_python(json.loads(event.data))
