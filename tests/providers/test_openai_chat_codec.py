"""The Chat Completions codec (OpenAI, OpenRouter, vLLM) against the wire files and the SDK."""

from __future__ import annotations

import json

import openai.types.chat
import pydantic
import pytest

from tether import errors
from tether.messages import ToolCall, ToolResult, assistant, tool_results, user
from tether.providers.base import Delta, ToolSpec
from tether.providers.openai_chat import OpenAIChatModel, encode_request

from .conftest import Recorder, wire_bytes, wire_json
from .transcripts import request

PARAMS = pydantic.TypeAdapter(openai.types.chat.CompletionCreateParams)
SCHEMA = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"}
    },
    "required": ["location"],
    "additionalProperties": False,
}
WEATHER = ToolSpec("get_weather", "Get current temperature for a given location.", SCHEMA)
QUESTION = "What is the weather like in Paris and in Bogotá?"
PARIS = ToolCall("call_12345xyz", "get_weather", {"location": "Paris, France"})
BOGOTA = ToolCall("call_67890abc", "get_weather", {"location": "Bogotá, Colombia"})
TURN = (
    user(QUESTION),
    assistant("", [PARIS, BOGOTA]),
    tool_results(
        [
            ToolResult(PARIS.id, "14 degrees Celsius, light rain"),
            ToolResult(BOGOTA.id, "weather service unavailable (HTTP 500)", is_error=True),
        ]
    ),
)
SYSTEM = "You are a helpful assistant."


def _strip_tool_extras(body: dict) -> dict:  # type: ignore[type-arg]
    """tether sends neither `strict` nor the defaults `tool_choice`/`parallel_tool_calls`."""
    body = dict(body)
    body.pop("tool_choice", None)
    body.pop("parallel_tool_calls", None)
    body["tools"] = [
        {**t, "function": {k: v for k, v in t["function"].items() if k != "strict"}}
        for t in body["tools"]
    ]
    return body


def test_first_request_matches_the_documented_shape() -> None:
    expected = _strip_tool_extras(wire_json("openai-chat-request-tools.json"))
    body = encode_request(
        "gpt-4.1", request((user(QUESTION),), (WEATHER,), system=SYSTEM, max_output_tokens=1024)
    )
    assert body == expected
    PARAMS.validate_python(body)


def test_each_tool_result_is_its_own_tool_message_in_call_order() -> None:
    expected = wire_json("openai-chat-request-tool-results.json")
    body = encode_request("gpt-4.1", request(TURN, (WEATHER,), system=SYSTEM))
    assert body["messages"] == expected["messages"]
    PARAMS.validate_python(body)


def test_stream_requests_ask_for_the_usage_chunk_and_vllm_gets_max_tokens() -> None:
    body = encode_request(
        "m", request((user("x"),), max_output_tokens=50), stream=True, max_tokens_field="max_tokens"
    )
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 50 and "max_completion_tokens" not in body
    PARAMS.validate_python(body)


def test_unreadable_arguments_are_echoed_as_the_model_wrote_them() -> None:
    bad = ToolCall("call_1", "get_weather", {}, '{"location": ')
    body = encode_request("m", request((user("x"), assistant("", [bad]))))
    assert body["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"location": '


def _model(recorder: Recorder, stream: bool = False, **kw: object) -> OpenAIChatModel:
    return OpenAIChatModel(
        "gpt-4.1", api_key="sk-test", http_client=recorder.client(), stream=stream, **kw
    )  # type: ignore[arg-type]


async def test_parallel_calls_response_decodes_to_one_message(recorder: Recorder) -> None:
    openai.types.chat.ChatCompletion.model_validate(
        wire_json("openai-chat-response-tool-calls.json")
    )
    recorder.reply(200, wire_bytes("openai-chat-response-tool-calls.json"))
    response = await _model(recorder).complete(request((user(QUESTION),), (WEATHER,)))
    assert response.message.tool_calls == (PARIS, BOGOTA)
    assert response.message.text == ""
    assert response.stop == "tool_calls" and response.raw_stop_reason == "tool_calls"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (82, 51)
    assert response.cost_usd == pytest.approx((82 * 2 + 51 * 8) / 1e6)
    sent = recorder.requests[0]
    assert str(sent.url) == "https://api.openai.com/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"


async def test_calls_are_found_even_when_finish_reason_says_stop(recorder: Recorder) -> None:
    body = wire_json("openai-chat-response-tool-calls.json")
    body["choices"][0]["finish_reason"] = "stop"  # what forcing a named tool gives
    recorder.reply(200, json.dumps(body).encode())
    response = await _model(recorder).complete(request((user("x"),)))
    assert response.stop == "tool_calls" and response.raw_stop_reason == "stop"
    assert len(response.message.tool_calls) == 2


async def test_openrouter_response_with_its_own_cost(recorder: Recorder) -> None:
    openai.types.chat.ChatCompletion.model_validate(
        wire_json("openrouter-chat-response-tool-calls.json")
    )
    recorder.reply(200, wire_bytes("openrouter-chat-response-tool-calls.json"))
    model = _model(recorder, provider="openrouter")
    response = await model.complete(request((user("x"),)))
    assert model.name == "openrouter:gpt-4.1"
    (call,) = response.message.tool_calls
    assert call.arguments == {"location": "Paris, France"}
    assert response.cost_usd == 0.001212
    assert response.usage.input_tokens == 194


async def test_stream_assembles_parallel_calls_and_usage(recorder: Recorder) -> None:
    seen: list[Delta] = []
    recorder.reply(200, wire_bytes("openai-chat-stream-tool-calls.sse"))
    response = await _model(recorder, stream=True).complete(
        request((user(QUESTION),), on_delta=seen.append)
    )
    assert response.message.tool_calls == (PARIS, BOGOTA)
    assert response.stop == "tool_calls"
    assert response.usage.input_tokens == 82 and response.usage.output_tokens == 51
    assert [d.call_id for d in seen] == ["call_12345xyz"] * 2 + ["call_67890abc"] * 2
    assert (
        "".join(d.text for d in seen if d.call_id == "call_67890abc")
        == '{"location":"Bogotá, Colombia"}'
    )


def _chunk(delta: dict, finish: str | None = None) -> bytes:  # type: ignore[type-arg]
    body = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _frag(index: int, args: str, call_id: str | None = None, name: str | None = None) -> dict:  # type: ignore[type-arg]
    frag: dict = {"index": index, "function": {"arguments": args}}  # type: ignore[type-arg]
    if call_id:
        frag["id"], frag["type"], frag["function"]["name"] = call_id, "function", name
    return {"tool_calls": [frag]}


async def test_interleaved_fragments_of_three_calls_are_keyed_by_index(recorder: Recorder) -> None:
    body = b"".join(
        [
            _chunk({"role": "assistant", "content": "Checking."}),
            _chunk(_frag(0, "", "call_a", "read")),
            _chunk(_frag(1, '{"pa', "call_b", "read")),
            _chunk(_frag(0, '{"path"')),
            _chunk(_frag(2, '{"path": "c"}', "call_c", "read")),
            _chunk(_frag(1, 'th": "b"}')),
            _chunk(_frag(0, ': "a"}')),
            _chunk({}, "tool_calls"),
            b"data: [DONE]\n\n",
        ]
    )
    recorder.reply(200, body)
    response = await _model(recorder, stream=True).complete(request((user("x"),)))
    assert response.message.text == "Checking."
    assert [(c.id, c.arguments["path"]) for c in response.message.tool_calls] == [
        ("call_a", "a"),
        ("call_b", "b"),
        ("call_c", "c"),
    ]


async def test_calls_all_sent_at_index_zero_are_told_apart_by_id(recorder: Recorder) -> None:
    body = _chunk(_frag(0, '{"q": 1}', "call_a", "f")) + _chunk(_frag(0, '{"q": 2}', "call_b", "f"))
    recorder.reply(200, body + _chunk({}, "tool_calls") + b"data: [DONE]\n\n")
    response = await _model(recorder, stream=True).complete(request((user("x"),)))
    assert [(c.id, c.arguments) for c in response.message.tool_calls] == [
        ("call_a", {"q": 1}),
        ("call_b", {"q": 2}),
    ]


async def test_length_cut_inside_a_streamed_call_is_incomplete(recorder: Recorder) -> None:
    body = _chunk(_frag(0, '{"path": "a", "content": "lo', "call_a", "write")) + _chunk(
        {}, "length"
    )
    recorder.reply(200, body + b"data: [DONE]\n\n")
    response = await _model(recorder, stream=True).complete(request((user("x"),)))
    assert response.incomplete and response.stop == "max_tokens"
    (call,) = response.message.tool_calls
    assert call.arguments == {} and call.raw_arguments == '{"path": "a", "content": "lo'


async def test_length_cut_of_plain_text_is_max_tokens_but_not_incomplete(
    recorder: Recorder,
) -> None:
    recorder.reply(200, _chunk({"content": "half"}, "length") + b"data: [DONE]\n\n")
    response = await _model(recorder, stream=True).complete(request((user("x"),)))
    assert response.stop == "max_tokens" and not response.incomplete


async def test_malformed_arguments_keep_the_raw_text(recorder: Recorder) -> None:
    body = wire_json("openai-chat-response-tool-calls.json")
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{location: Paris}"
    recorder.reply(200, json.dumps(body).encode())
    response = await _model(recorder).complete(request((user("x"),)))
    bad, good = response.message.tool_calls
    assert bad.arguments == {} and bad.raw_arguments == "{location: Paris}"
    assert good.raw_arguments is None
    assert response.stop == "tool_calls"


async def test_calls_without_ids_get_stable_ids(recorder: Recorder) -> None:
    body = wire_json("openai-chat-response-tool-calls.json")
    for call in body["choices"][0]["message"]["tool_calls"]:
        del call["id"]
    for _ in range(2):
        recorder.reply(200, json.dumps(body).encode())
    model = _model(recorder)
    first = await model.complete(request((user("x"),)))
    again = await model.complete(request((user("x"),)))
    ids = [c.id for c in first.message.tool_calls]
    assert ids == [c.id for c in again.message.tool_calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)


@pytest.mark.parametrize(
    "name", ["openai-chat-stream-error-midstream.sse", "openrouter-stream-error-midstream.sse"]
)
async def test_an_error_chunk_after_200_raises_server_error(recorder: Recorder, name: str) -> None:
    seen: list[Delta] = []
    recorder.reply(200, wire_bytes(name))
    with pytest.raises(errors.ServerError):
        await _model(recorder, stream=True).complete(request((user("x"),), on_delta=seen.append))
    assert seen  # the text before the error was offered, then dropped with the failure


@pytest.mark.parametrize(
    ("name", "status", "expected"),
    [
        ("openai-error-429-insufficient-quota.json", 429, errors.QuotaExhausted),
        ("openai-error-429-rate-limit.json", 429, errors.RateLimited),
        ("openai-error-400-context-length.json", 400, errors.ContextOverflow),
        ("vllm-error-400-context-length-legacy-flat.json", 400, errors.ContextOverflow),
        ("vllm-error-400-context-length-v0.10.1plus.json", 400, errors.ContextOverflow),
        ("openrouter-error-429.json", 429, errors.RateLimited),
    ],
)
async def test_http_errors_are_classified(
    recorder: Recorder, name: str, status: int, expected: type
) -> None:
    recorder.reply(
        status,
        wire_bytes(name),
        {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6m0s"},
    )
    with pytest.raises(expected) as caught:
        await _model(recorder).complete(request((user("x"),)))
    if expected is errors.RateLimited:
        assert caught.value.retry_after == 360.0


async def test_a_stream_that_stops_without_finish_is_a_connection_failure(
    recorder: Recorder,
) -> None:
    recorder.reply(200, _chunk({"content": "partial"}))
    with pytest.raises(errors.ConnectionFailed):
        await _model(recorder, stream=True).complete(request((user("x"),)))


async def test_rate_limit_headers_of_a_success_ride_on_the_response(recorder: Recorder) -> None:
    recorder.reply(
        200,
        wire_bytes("openai-chat-response-tool-calls.json"),
        {"x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-tokens": "6m0s"},
    )
    recorder.reply(200, wire_bytes("openai-chat-response-tool-calls.json"))
    model = _model(recorder)
    response = await model.complete(request((user("x"),)))
    assert response.rate_limits is not None
    assert response.rate_limits.requests.remaining == 59
    assert response.rate_limits.tokens.reset == 360.0
    bare = await model.complete(request((user("x"),)))
    assert bare.rate_limits is None


@pytest.mark.parametrize(
    "name",
    [
        "vllm-error-400-context-length-legacy-flat.json",
        "vllm-error-400-context-length-v0.10.1plus.json",
    ],
)
async def test_vllm_error_shapes_inside_a_stream_are_context_overflow(
    recorder: Recorder, name: str
) -> None:
    error = json.dumps(wire_json(name)).encode()
    recorder.reply(200, _chunk({"content": "x"}) + b"data: " + error + b"\n\n")
    with pytest.raises(errors.ContextOverflow):
        await _model(recorder, stream=True).complete(request((user("x"),)))


async def test_a_turn_whose_only_call_is_malformed_still_stops_for_tool_calls(
    recorder: Recorder,
) -> None:
    body = wire_json("openrouter-chat-response-tool-calls.json")
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "[1, 2]"
    recorder.reply(200, json.dumps(body).encode())
    response = await _model(recorder).complete(request((user("x"),)))
    (call,) = response.message.tool_calls
    assert call.raw_arguments == "[1, 2]" and call.arguments == {}
    assert response.stop == "tool_calls"
