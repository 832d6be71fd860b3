"""Structured output on the wire: the JSON-schema output format each codec sends to a real
loopback server, checked against the official SDKs' request types; and an agent with an
output type over each dialect, whose invalid first answer goes back and whose second is the
result."""

from __future__ import annotations

import dataclasses
from typing import Any

import anthropic.types
import openai.types.chat
import openai.types.responses
import pydantic
import pytest
from pydantic import BaseModel, Field

from tether import Agent
from tether.messages import user
from tether.output import CORRECTION, FINAL_TOOL, OutputType
from tether.providers.base import ModelRequest
from tether.store import MemoryStore

from .fake_servers import FakeServer
from .test_loopback import build
from .toy_dialects import HANDLERS, ToyModel

SDK_PARAMS: dict[str, pydantic.TypeAdapter[Any]] = {
    "anthropic": pydantic.TypeAdapter(anthropic.types.MessageCreateParams),
    "openai": pydantic.TypeAdapter(openai.types.chat.CompletionCreateParams),
    "openai-responses": pydantic.TypeAdapter(openai.types.responses.ResponseCreateParams),
}


class Line(BaseModel):
    item: str
    amount: int = Field(ge=0)


class Invoice(BaseModel):
    number: str
    lines: list[Line]


INVOICE = OutputType.of(Invoice)
VALID = '{"number": "A-1", "lines": [{"item": "tea", "amount": 3}]}'


@dataclasses.dataclass
class Answers(ToyModel):
    """A toy that answers with the given texts in turn."""

    texts: list[str] = dataclasses.field(default_factory=list)

    def answer(self, results: list[str]) -> str:
        self.turns += 1
        return self.texts[min(self.turns, len(self.texts)) - 1]


async def _body(dialect: str) -> Any:
    async with FakeServer(HANDLERS[dialect](Answers([], texts=[VALID]))) as server:
        model = build(dialect, server.url, False)
        request = ModelRequest(model.name, "Be brief.", (user("bill"),), output=INVOICE.native)
        await model.complete(request)
        await model.aclose()  # type: ignore[attr-defined]
    body = server.requests[0].json()
    if dialect in SDK_PARAMS:
        SDK_PARAMS[dialect].validate_python(body)
    return body


async def test_openai_chat_sends_a_json_schema_response_format() -> None:
    body = await _body("openai")
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "Invoice" and fmt["json_schema"]["strict"] is False
    assert fmt["json_schema"]["schema"] == Invoice.model_json_schema()


async def test_openai_responses_sends_a_json_schema_text_format() -> None:
    body = await _body("openai-responses")
    fmt = body["text"]["format"]
    assert (fmt["type"], fmt["name"], fmt["strict"]) == ("json_schema", "Invoice", False)
    assert fmt["schema"] == Invoice.model_json_schema()


async def test_ollama_sends_the_schema_as_format() -> None:
    body = await _body("ollama")
    assert body["format"] == Invoice.model_json_schema()


async def test_anthropic_native_output_closes_every_object() -> None:
    body = await _body("anthropic")
    fmt = body["output_config"]["format"]
    assert fmt["type"] == "json_schema"
    assert fmt["schema"]["additionalProperties"] is False
    assert fmt["schema"]["$defs"]["Line"]["additionalProperties"] is False
    assert "additionalProperties" not in Invoice.model_json_schema()  # the type's own is kept


@pytest.mark.parametrize("dialect", ["openai", "openai-responses", "ollama"])
async def test_an_agent_retries_an_invalid_native_answer_over_the_wire(dialect: str) -> None:
    toy = Answers([], texts=['{"number": "A-1", "lines": [{"item": "tea", "amount": -3}]}', VALID])
    async with FakeServer(HANDLERS[dialect](toy)) as server:
        model = build(dialect, server.url, False)
        agent = Agent(model, store=MemoryStore(), output_type=Invoice)
        result = await agent.run("Bill the tea.")
        await model.aclose()  # type: ignore[attr-defined]
    assert result.output == Invoice(number="A-1", lines=[Line(item="tea", amount=3)])
    first, second = (r.json() for r in server.requests)
    if dialect in SDK_PARAMS:
        SDK_PARAMS[dialect].validate_python(second)
    said = str(second)
    assert CORRECTION in said and "greater than or equal to 0" in said
    assert "tools" not in first  # native: no final-answer tool offered


async def test_anthropic_by_default_gets_the_final_answer_tool() -> None:
    toy = Answers([(FINAL_TOOL, {"number": "A-2", "lines": []})], texts=["done"])
    async with FakeServer(HANDLERS["anthropic"](toy)) as server:
        model = build("anthropic", server.url, False)
        agent = Agent(model, store=MemoryStore(), output_type=Invoice)
        result = await agent.run("Bill nothing.")
        await model.aclose()  # type: ignore[attr-defined]
    assert result.output == Invoice(number="A-2", lines=[])
    body = server.requests[0].json()
    SDK_PARAMS["anthropic"].validate_python(body)
    assert "output_config" not in body
    assert body["tool_choice"] == {"type": "tool", "name": FINAL_TOOL}  # its only tool
    tool = next(t for t in body["tools"] if t["name"] == FINAL_TOOL)
    assert tool["input_schema"]["required"] == ["number", "lines"]
    assert len(server.requests) == 1  # the accepted call ends the turn: no answer after it
