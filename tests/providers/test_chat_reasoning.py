"""Reasoning in the Chat Completions codec: `reasoning_content` (DeepSeek, vLLM), `reasoning`
and `reasoning_details` (OpenRouter), whole and streamed, become one `Thinking` part holding
the fields as received; they go back on the assistant message only to the same provider."""

from __future__ import annotations

import json
from typing import Any

import openai.types.chat
import pydantic

from tether.messages import Message, Text, Thinking, ToolCall, ToolResult, tool_results, user
from tether.providers.base import Delta
from tether.providers.openai_chat import OpenAIChatModel, encode_request

from .conftest import Recorder, wire_json
from .transcripts import request

PARAMS = pydantic.TypeAdapter(openai.types.chat.CompletionCreateParams)
CALL = ToolCall("call_1", "get_weather", {"location": "Paris"})
DETAILS = [
    {
        "type": "reasoning.text",
        "text": "The user wants Paris.",
        "signature": "sig-abc",
        "format": "anthropic-claude-v1",
        "index": 0,
    },
    {"type": "reasoning.encrypted", "data": "ENC", "format": "anthropic-claude-v1", "index": 1},
]


def _model(recorder: Recorder, stream: bool = False, provider: str = "openai") -> OpenAIChatModel:
    return OpenAIChatModel("m", http_client=recorder.client(), stream=stream, provider=provider)


def _answer(**fields: Any) -> bytes:
    body = wire_json("openai-chat-response-tool-calls.json")
    body["choices"][0]["message"].update(fields)
    return json.dumps(body).encode()


async def test_deepseek_reasoning_content_is_kept_as_received(recorder: Recorder) -> None:
    recorder.reply(200, _answer(reasoning_content="Two cities: two calls."))
    response = await _model(recorder, provider="openai-compatible").complete(request((user("x"),)))
    thinking = response.message.parts[0]
    assert thinking == Thinking(
        "Two cities: two calls.",
        "openai-compatible",
        {"reasoning_content": "Two cities: two calls."},
    )
    assert len(response.message.tool_calls) == 2


async def test_openrouter_reasoning_and_details_are_one_part(recorder: Recorder) -> None:
    recorder.reply(200, _answer(reasoning="The user wants Paris.", reasoning_details=DETAILS))
    response = await _model(recorder, provider="openrouter").complete(request((user("x"),)))
    (thinking,) = response.message.thinking
    assert thinking.text == "The user wants Paris." and thinking.provider == "openrouter"
    assert thinking.data == {"reasoning": "The user wants Paris.", "reasoning_details": DETAILS}
    assert list(thinking.data["reasoning_details"][0]) == sorted(DETAILS[0])  # type: ignore[index]


async def test_an_answer_without_reasoning_fields_has_no_thinking(recorder: Recorder) -> None:
    recorder.reply(200, _answer(reasoning=None, reasoning_content=None))
    response = await _model(recorder).complete(request((user("x"),)))
    assert response.message.thinking == ()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def test_streamed_reasoning_is_offered_and_assembled(recorder: Recorder) -> None:
    seen: list[Delta] = []
    recorder.reply(
        200,
        _chunk({"role": "assistant", "reasoning_content": "Let me "})
        + _chunk({"reasoning_content": "think."})
        + _chunk({"content": "Hi."})
        + _chunk({}, "stop")
        + b"data: [DONE]\n\n",
    )
    response = await _model(recorder, stream=True, provider="vllm").complete(
        request((user("x"),), on_delta=seen.append)
    )
    assert seen == [
        Delta("reasoning", "Let me "),
        Delta("reasoning", "think."),
        Delta("text", "Hi."),
    ]
    assert response.message.parts == (
        Thinking("Let me think.", "vllm", {"reasoning_content": "Let me think."}),
        Text("Hi."),
    )


async def test_streamed_openrouter_details_are_merged_by_index(recorder: Recorder) -> None:
    seen: list[Delta] = []
    first, second = "The user ", "wants Paris."
    recorder.reply(
        200,
        _chunk(
            {
                "reasoning": first,
                "reasoning_details": [
                    {"type": "reasoning.text", "text": first, "format": "f", "index": 0}
                ],
            }
        )
        + _chunk(
            {
                "reasoning": second,
                "reasoning_details": [
                    {"type": "reasoning.text", "text": second, "signature": None, "index": 0}
                ],
            }
        )
        + _chunk(
            {"reasoning_details": [{"type": "reasoning.text", "signature": "sig", "index": 0}]}
        )
        + _chunk({"content": "Paris."}, "stop")
        + b"data: [DONE]\n\n",
    )
    response = await _model(recorder, stream=True, provider="openrouter").complete(
        request((user("x"),), on_delta=seen.append)
    )
    assert [d.text for d in seen if d.kind == "reasoning"] == [first, second]
    (thinking,) = response.message.thinking
    assert thinking.data == {
        "reasoning": first + second,
        "reasoning_details": [
            {
                "format": "f",
                "index": 0,
                "signature": "sig",
                "text": first + second,
                "type": "reasoning.text",
            }
        ],
    }


def _turn(*thinking: Thinking) -> tuple[Message, ...]:
    return (
        user("x"),
        Message("assistant", (*thinking, CALL)),
        tool_results([ToolResult("call_1", "14 C")]),
    )


def test_reasoning_goes_back_on_the_assistant_message_for_the_same_provider() -> None:
    own = Thinking("t", "openrouter", {"reasoning": "t", "reasoning_details": DETAILS})
    body = encode_request("m", request(_turn(own)), provider="openrouter")
    wire = body["messages"][1]
    assert wire["reasoning"] == "t" and wire["reasoning_details"] == DETAILS
    assert wire["tool_calls"][0]["id"] == "call_1"
    PARAMS.validate_python(body)
    deepseek = Thinking("", "openai-compatible", {"reasoning_content": ""})
    body = encode_request("m", request(_turn(deepseek)), provider="openai-compatible")
    assert body["messages"][1]["reasoning_content"] == ""  # empty, but wanted back


def test_another_providers_reasoning_is_left_out() -> None:
    foreign = Thinking("t", "anthropic", {"signature": "s"})
    other = Thinking("t", "vllm", {"reasoning_content": "t"})
    body = encode_request("m", request(_turn(foreign, other)), provider="openrouter")
    assert set(body["messages"][1]) == {"role", "content", "tool_calls"}
