"""The Ollama /api/chat codec: object arguments, NDJSON streams, calls without ids."""

from __future__ import annotations

import json

import pytest

from tether import errors
from tether.messages import (
    Message,
    Thinking,
    ToolCall,
    ToolResult,
    assistant,
    tool_results,
    user,
)
from tether.providers.base import Delta, ToolSpec
from tether.providers.ollama import OllamaModel, encode_request
from tether.settings import ModelSettings, Reasoning

from .conftest import Recorder, wire_bytes, wire_json
from .transcripts import request

SCHEMA = {
    "type": "object",
    "properties": {
        "location": {
            "type": "string",
            "description": "The location to get the weather for, e.g. San Francisco, CA",
        },
        "format": {
            "type": "string",
            "description": "The format to return the weather in, e.g. 'celsius' or 'fahrenheit'",
            "enum": ["celsius", "fahrenheit"],
        },
    },
    "required": ["location", "format"],
}
WEATHER = ToolSpec("get_current_weather", "Get the current weather for a location", SCHEMA)
QUESTION = "What is the weather today in Toronto?"
TORONTO = ToolCall(
    "call_lyywui55", "get_current_weather", {"format": "celsius", "location": "Toronto"}
)


def test_first_request_matches_the_documented_shape() -> None:
    body = encode_request(
        "qwen3", request((user(QUESTION),), (WEATHER,)), options={"num_ctx": 8192, "temperature": 0}
    )
    assert body == wire_json("ollama-chat-request-tools.json")


def test_results_name_their_tool_and_arguments_stay_objects() -> None:
    expected = wire_json("ollama-chat-request-tool-result.json")
    del expected["messages"][1]["tool_calls"][0]["function"]["index"]
    messages = (
        user(QUESTION),
        assistant("", [TORONTO]),
        tool_results([ToolResult(TORONTO.id, "11 degrees celsius, cloudy")]),
    )
    body = encode_request("qwen3", request(messages, (WEATHER,)))
    assert body["messages"] == expected["messages"]
    assert body["stream"] is False


def test_max_output_tokens_is_num_predict() -> None:
    body = encode_request(
        "qwen3", request((user("x"),), max_output_tokens=64), stream=True, options={"num_ctx": 4096}
    )
    assert body["options"] == {"num_ctx": 4096, "num_predict": 64} and body["stream"] is True


def _model(recorder: Recorder, stream: bool = False) -> OllamaModel:
    return OllamaModel("qwen3", http_client=recorder.client(), stream=stream)


async def test_tool_call_response_decodes(recorder: Recorder) -> None:
    recorder.reply(200, wire_bytes("ollama-chat-response-tool-calls.json"))
    response = await _model(recorder).complete(request((user(QUESTION),), (WEATHER,)))
    assert response.message.tool_calls == (TORONTO,)
    assert response.stop == "tool_calls" and response.raw_stop_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (122, 33)
    assert response.cost_usd is None  # a local model has no known price
    assert str(recorder.requests[0].url) == "http://localhost:11434/api/chat"


async def test_calls_without_ids_get_the_same_synthesized_id_on_replay(recorder: Recorder) -> None:
    body = wire_bytes("ollama-chat-response-tool-calls-legacy-no-id.json")
    recorder.reply(200, body)
    recorder.reply(200, body)
    recorder.reply(200, body)
    model = _model(recorder)
    first = await model.complete(request((user(QUESTION),)))
    again = await model.complete(request((user(QUESTION),)))
    other = await model.complete(request((user("Another question"),)))
    (call,) = first.message.tool_calls
    assert call.id.startswith("call_") and call.arguments == {
        "format": "celsius",
        "location": "Paris, FR",
    }
    assert again.message.tool_calls[0].id == call.id
    # The same answer to a different request is a different call.
    assert other.message.tool_calls[0].id != call.id


async def test_stream_assembles_the_call_and_keeps_the_thinking(recorder: Recorder) -> None:
    seen: list[Delta] = []
    recorder.reply(200, wire_bytes("ollama-chat-stream-tool-calls.ndjson"))
    response = await _model(recorder, stream=True).complete(
        request((user(QUESTION),), on_delta=seen.append)
    )
    thought = "The user wants Toronto weather; call the tool."
    assert response.message.parts == (
        Thinking(thought, "ollama", {"thinking": thought}),
        TORONTO,
    )
    assert response.message.text == "" and seen == [Delta("reasoning", thought)]
    assert response.usage.output_tokens == 33 and response.stop == "tool_calls"


async def test_a_whole_answer_keeps_its_thinking(recorder: Recorder) -> None:
    body = wire_json("ollama-chat-response-tool-calls.json")
    body["message"]["thinking"] = "Toronto, in celsius."
    recorder.reply(200, json.dumps(body).encode())
    response = await _model(recorder).complete(request((user(QUESTION),)))
    assert response.message.thinking == (
        Thinking("Toronto, in celsius.", "ollama", {"thinking": "Toronto, in celsius."}),
    )
    recorder.reply(200, wire_bytes("ollama-chat-response-tool-calls.json"))
    plain = await _model(recorder).complete(request((user(QUESTION),)))
    assert plain.message.thinking == ()


def test_thinking_goes_back_as_the_assistant_messages_thinking_for_ollama_only() -> None:
    own = Thinking("hm", "ollama", {"thinking": "hm"})
    foreign = Thinking("other", "anthropic", {"signature": "s"})
    for parts, expected in (((own, TORONTO), "hm"), ((foreign, TORONTO), None)):
        messages = (
            user(QUESTION),
            Message("assistant", parts),
            tool_results([ToolResult(TORONTO.id, "11 C")]),
        )
        wire = encode_request("qwen3", request(messages))["messages"][1]
        assert wire.get("thinking") == expected
        assert wire["tool_calls"][0]["id"] == TORONTO.id


def test_a_reasoning_setting_is_think_true_or_gpt_oss_s_effort() -> None:
    high = ModelSettings(reasoning=Reasoning(effort="high"))
    assert encode_request("qwen3", request((user("x"),), settings=high))["think"] is True
    gpt_oss = encode_request("gpt-oss:20b", request((user("x"),), settings=high))
    assert gpt_oss["think"] == "high"
    budget = ModelSettings(reasoning=Reasoning(budget_tokens=1024))
    assert encode_request("gpt-oss", request((user("x"),), settings=budget))["think"] == "low"
    off = ModelSettings(reasoning=Reasoning(effort="low"), extra={"think": False})
    assert encode_request("qwen3", request((user("x"),), settings=off))["think"] is False
    assert "think" not in encode_request("qwen3", request((user("x"),)))


async def test_streamed_calls_without_ids_are_numbered_across_chunks(recorder: Recorder) -> None:
    lines = [
        {
            "message": {
                "role": "assistant",
                "content": "Sure. ",
                "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
            },
            "done": False,
        },
        {
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
            },
            "done": False,
        },
        {
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 3,
            "eval_count": 4,
        },
    ]
    recorder.reply(200, b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    response = await _model(recorder, stream=True).complete(request((user("x"),)))
    first, second = response.message.tool_calls
    assert first.id != second.id and response.message.text == "Sure. "


async def test_an_error_line_in_the_stream_raises_server_error(recorder: Recorder) -> None:
    seen: list[Delta] = []
    recorder.reply(200, wire_bytes("ollama-stream-error-midstream.ndjson"))
    with pytest.raises(errors.ServerError) as caught:
        await _model(recorder, stream=True).complete(request((user("x"),), on_delta=seen.append))
    assert "unexpected EOF" in caught.value.message
    assert seen == [Delta("text", "The")]


async def test_a_missing_model_is_a_bad_request(recorder: Recorder) -> None:
    recorder.reply(404, wire_bytes("ollama-error-404-model-not-found.json"))
    with pytest.raises(errors.BadRequest, match="not found"):
        await _model(recorder, stream=True).complete(request((user("x"),)))


async def test_a_stream_without_done_is_a_connection_failure(recorder: Recorder) -> None:
    recorder.reply(200, wire_bytes("ollama-chat-stream-tool-calls.ndjson").rsplit(b"\n{", 1)[0])
    with pytest.raises(errors.ConnectionFailed):
        await _model(recorder, stream=True).complete(request((user("x"),)))


async def test_string_arguments_from_odd_servers_are_parsed(recorder: Recorder) -> None:
    body = wire_json("ollama-chat-response-tool-calls.json")
    body["message"]["tool_calls"][0]["function"]["arguments"] = '{"location": "Toronto"}'
    recorder.reply(200, json.dumps(body).encode())
    response = await _model(recorder).complete(request((user("x"),)))
    assert response.message.tool_calls[0].arguments == {"location": "Toronto"}
