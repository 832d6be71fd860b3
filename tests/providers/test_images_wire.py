"""Images on the wire: a user's image as each codec sends it to a real loopback server,
checked against the official SDKs' request types; Ollama's refusal of URLs; and a session
with an image, resumed by a fresh agent, whose next request repeats the first turn's bytes;
and the images of a tool result as each codec encodes them."""

from __future__ import annotations

import base64
import json
from typing import Any

import anthropic.types
import openai.types.chat
import openai.types.responses
import pydantic
import pytest

from tether import Agent, Image, ModelSettings
from tether.messages import Message, ToolCall, ToolResult, assistant, tool_results, user
from tether.providers.base import ModelRequest
from tether.store import MemoryStore

from .fake_servers import FakeServer
from .test_loopback import DIALECTS, build
from .toy_dialects import HANDLERS, ToyModel

SDK_PARAMS: dict[str, pydantic.TypeAdapter[Any]] = {
    "anthropic": pydantic.TypeAdapter(anthropic.types.MessageCreateParams),
    "openai": pydantic.TypeAdapter(openai.types.chat.CompletionCreateParams),
    "openai-responses": pydantic.TypeAdapter(openai.types.responses.ResponseCreateParams),
}

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(48))
B64 = base64.b64encode(PNG).decode()
URL = "https://example.com/cat.png"


async def _bodies(dialect: str, *turns: list[str | Image], stream: bool = False) -> list[Any]:
    """The request bodies of one session's turns, each turn run by a fresh agent (a fresh
    fold of the stored log) on the same store."""
    store = MemoryStore()
    session_id: str | None = None
    async with FakeServer(HANDLERS[dialect](ToyModel([]))) as server:
        for turn in turns:
            model = build(dialect, server.url, stream)
            # Without cache breakpoints, which move each step (tests/providers/test_prompt_cache.py).
            agent = Agent(model, store=store, settings=ModelSettings(cache=False))
            result = await agent.run(turn, session_id=session_id)
            session_id = result.session_id
            await model.aclose()  # type: ignore[attr-defined]
    bodies = [r.json() for r in server.requests]
    if dialect in SDK_PARAMS:
        for body in bodies:
            SDK_PARAMS[dialect].validate_python(body)
    return bodies


def _first_message(dialect: str, body: Any) -> Any:
    key = "input" if dialect == "openai-responses" else "messages"
    return next(m for m in body[key] if m.get("role") == "user")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_anthropic_sends_bytes_as_a_base64_image_block(stream: bool) -> None:
    (body,) = await _bodies("anthropic", ["what is this?", Image(PNG)], stream=stream)
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
    ]


async def test_anthropic_sends_a_url_as_a_url_source() -> None:
    (body,) = await _bodies("anthropic", [Image(url=URL), "and this?"])
    assert body["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "url", "url": URL}},
        {"type": "text", "text": "and this?"},
    ]


async def test_openai_chat_sends_image_url_parts_with_a_data_url_for_bytes() -> None:
    (body,) = await _bodies("openai", ["two:", Image(PNG), Image(url=URL)])
    assert _first_message("openai", body)["content"] == [
        {"type": "text", "text": "two:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}},
        {"type": "image_url", "image_url": {"url": URL}},
    ]


async def test_openai_responses_sends_input_image_parts() -> None:
    (body,) = await _bodies("openai-responses", ["two:", Image(PNG), Image(url=URL)])
    assert _first_message("openai-responses", body)["content"] == [
        {"type": "input_text", "text": "two:"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{B64}", "detail": "auto"},
        {"type": "input_image", "image_url": URL, "detail": "auto"},
    ]


async def test_ollama_sends_base64_images_on_the_message() -> None:
    (body,) = await _bodies("ollama", ["what is this?", Image(PNG)])
    assert body["messages"][0] == {"role": "user", "content": "what is this?", "images": [B64]}


async def test_ollama_refuses_an_image_url_before_sending_and_the_turn_says_why() -> None:
    """The codec raises `UsageError`; the loop records it as `model.failed` and ends the
    turn with it, so the refusal is in the log, and nothing reached the server."""
    async with FakeServer(HANDLERS["ollama"](ToyModel([]))) as server:
        model = build("ollama", server.url, False)
        result = await Agent(model, store=MemoryStore()).run(["what?", Image(url=URL)])
        await model.aclose()  # type: ignore[attr-defined]
    assert result.stop_reason == "error"
    assert (result.stop_detail or "").startswith("UsageError: Ollama takes images only as bytes")
    assert server.requests == []


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_text_only_user_message_is_sent_as_before(dialect: str) -> None:
    (body,) = await _bodies(dialect, ["hello"])
    assert _first_message(dialect, body)["content"] == "hello"
    assert "images" not in _first_message(dialect, body)


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_resumed_session_repeats_its_image_turn_byte_for_byte(dialect: str) -> None:
    first, second = await _bodies(dialect, ["what is this?", Image(PNG)], ["and now?"])
    key = "input" if dialect == "openai-responses" else "messages"
    sent = [json.dumps(m, sort_keys=True) for m in first[key]]
    again = [json.dumps(m, sort_keys=True) for m in second[key][: len(first[key])]]
    assert again == sent
    assert any(B64 in m for m in again)


# --- images in tool results: encoded by each codec (the loop does not make them yet) ------

SHOT = ToolResult("call_1", "a screenshot", images=(Image(PNG),))
TURN = (
    user("take a screenshot"),
    assistant(calls=[ToolCall("call_1", "screenshot", {})]),
    tool_results([SHOT]),
)


class _Seen(ToyModel):
    """Answers without reading its results (a result with images is a list of blocks)."""

    def answer(self, results: list[Any]) -> str:
        return "seen"


async def _sent(dialect: str, messages: tuple[Message, ...] = TURN) -> Any:
    async with FakeServer(HANDLERS[dialect](_Seen([]))) as server:
        model = build(dialect, server.url, False)
        await model.complete(ModelRequest(model.name, "Be brief.", messages))
        await model.aclose()  # type: ignore[attr-defined]
    body = server.requests[0].json()
    if dialect in SDK_PARAMS:
        SDK_PARAMS[dialect].validate_python(body)
    return body


async def test_anthropic_puts_a_result_s_images_inside_its_tool_result() -> None:
    body = await _sent("anthropic")
    (block,) = body["messages"][-1]["content"]
    assert block["type"] == "tool_result"
    assert block["content"] == [
        {"type": "text", "text": "a screenshot"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
    ]


async def test_openai_chat_sends_a_result_s_images_in_a_user_message_after_the_tools() -> None:
    body = await _sent("openai")
    tool, after = body["messages"][-2:]
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "a screenshot"}
    assert after == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Images from tool call call_1:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}},
        ],
    }


async def test_openai_responses_puts_a_result_s_images_in_its_output_items() -> None:
    body = await _sent("openai-responses")
    output = body["input"][-1]
    assert output["type"] == "function_call_output"
    assert output["output"] == [
        {"type": "input_text", "text": "a screenshot"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{B64}", "detail": "auto"},
    ]


async def test_ollama_sends_a_result_s_images_in_a_user_message_after_the_tools() -> None:
    body = await _sent("ollama")
    tool, after = body["messages"][-2:]
    assert tool["role"] == "tool" and tool["content"] == "a screenshot"
    assert after == {
        "role": "user",
        "content": "Images from tool call(s) call_1:",
        "images": [B64],
    }


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_result_without_images_is_sent_as_before(dialect: str) -> None:
    plain = (*TURN[:2], tool_results([ToolResult("call_1", "a screenshot")]))
    body = await _sent(dialect, plain)
    key = "input" if dialect == "openai-responses" else "messages"
    assert "image" not in json.dumps(body[key][-1])
    assert "Images from" not in json.dumps(body)
