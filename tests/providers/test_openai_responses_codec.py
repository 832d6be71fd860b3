"""The Responses codec against the wire files and the official SDK types."""

from __future__ import annotations

import json

import openai.types.responses
import pydantic
import pytest

from tether import errors
from tether.messages import ToolCall, ToolResult, assistant, tool_results, user
from tether.providers.base import Delta, ToolSpec
from tether.providers.openai_responses import OpenAIResponsesModel, encode_request

from .conftest import Recorder, wire_bytes, wire_json
from .transcripts import request

PARAMS = pydantic.TypeAdapter(openai.types.responses.ResponseCreateParams)
SCHEMA = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"}
    },
    "required": ["location"],
    "additionalProperties": False,
}
WEATHER = ToolSpec("get_weather", "Get current temperature for a given location.", SCHEMA)
QUESTION = "What is the weather like in Paris today?"
PARIS = ToolCall("call_12345xyz", "get_weather", {"location": "Paris, France"})


def test_first_request_matches_the_documented_shape() -> None:
    expected = wire_json("openai-responses-request-tools.json")
    del expected["tool_choice"]
    expected["tools"][0]["strict"] = False  # tether's schemas are not strict-mode schemas
    body = encode_request("gpt-4.1", request((user(QUESTION),), (WEATHER,)))
    assert body == expected
    PARAMS.validate_python(body)


def test_calls_and_results_are_input_items() -> None:
    expected = wire_json("openai-responses-request-function-call-output.json")
    del expected["input"][1]["id"]  # the item id is the server's; the call id is what links
    messages = (
        user(QUESTION),
        assistant("", [PARIS]),
        tool_results([ToolResult(PARIS.id, "14 degrees Celsius, light rain")]),
    )
    body = encode_request("gpt-4.1", request(messages, (WEATHER,)))
    assert body["input"] == expected["input"]
    assert body["store"] is False
    PARAMS.validate_python(body)


def test_system_is_instructions_and_errors_are_marked() -> None:
    messages = (
        user("x"),
        assistant("Let me see.", [PARIS]),
        tool_results([ToolResult(PARIS.id, "boom", True)]),
    )
    body = encode_request(
        "gpt-4.1", request(messages, system="Be brief.", max_output_tokens=99), stream=True
    )
    assert (
        body["instructions"] == "Be brief."
        and body["max_output_tokens"] == 99
        and body["stream"] is True
    )
    assert body["input"][1] == {"role": "assistant", "content": "Let me see."}
    assert body["input"][3]["output"] == "Error: boom"
    PARAMS.validate_python(body)


def _model(recorder: Recorder, stream: bool = False) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(
        "gpt-4.1", api_key="sk-test", http_client=recorder.client(), stream=stream
    )


async def test_function_call_response_decodes(recorder: Recorder) -> None:
    openai.types.responses.Response.model_validate(
        wire_json("openai-responses-response-function-call.json")
    )
    recorder.reply(200, wire_bytes("openai-responses-response-function-call.json"))
    response = await _model(recorder).complete(request((user(QUESTION),), (WEATHER,)))
    assert response.message.tool_calls == (PARIS,)
    assert response.stop == "tool_calls" and response.raw_stop_reason == "completed"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (61, 18)
    assert str(recorder.requests[0].url) == "https://api.openai.com/v1/responses"


async def test_text_answer_with_reasoning_usage(recorder: Recorder) -> None:
    body = wire_json("openai-responses-response-function-call.json")
    body["output"] = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "14 °C and rain.", "annotations": []}],
        },
    ]
    body["usage"]["output_tokens_details"]["reasoning_tokens"] = 12
    body["usage"]["input_tokens_details"]["cached_tokens"] = 40
    openai.types.responses.Response.model_validate(body)
    recorder.reply(200, json.dumps(body).encode())
    response = await _model(recorder).complete(request((user(QUESTION),)))
    assert response.message.text == "14 °C and rain." and response.stop == "end_turn"
    assert response.usage.reasoning_tokens == 12 and response.usage.cache_read_tokens == 40
    assert response.cost_usd == pytest.approx((21 * 2 + 40 * 0.5 + 18 * 8) / 1e6)


async def test_incomplete_inside_a_call_is_never_executable(recorder: Recorder) -> None:
    body = wire_json("openai-responses-response-function-call.json")
    body["status"] = "incomplete"
    body["incomplete_details"] = {"reason": "max_output_tokens"}
    body["output"][0]["arguments"] = '{"location":"Par'
    body["output"][0]["status"] = "incomplete"
    recorder.reply(200, json.dumps(body).encode())
    response = await _model(recorder).complete(request((user(QUESTION),)))
    assert response.incomplete and response.stop == "max_tokens"
    assert response.raw_stop_reason == "max_output_tokens"
    (call,) = response.message.tool_calls
    assert call.arguments == {} and call.raw_arguments == '{"location":"Par'


async def test_stream_assembles_the_call_and_reports_deltas(recorder: Recorder) -> None:
    seen: list[Delta] = []
    recorder.reply(200, wire_bytes("openai-responses-stream-function-call.sse"))
    response = await _model(recorder, stream=True).complete(
        request((user(QUESTION),), on_delta=seen.append)
    )
    assert response.message.tool_calls == (
        ToolCall("call_1234xyz", "get_weather", {"location": "Paris, France"}),
    )
    assert response.usage.input_tokens == 61
    assert "".join(d.text for d in seen) == '{"location":"Paris, France"}'
    assert {d.call_id for d in seen} == {"call_1234xyz"}


async def test_stream_falls_back_to_assembled_items_when_final_output_is_empty(
    recorder: Recorder,
) -> None:
    body = wire_bytes("openai-responses-stream-function-call.sse")
    head, _, tail = body.partition(b"event: response.completed")
    final = json.loads(tail.split(b"data: ", 1)[1])
    final["response"]["output"] = []
    text_events = (
        b'event: response.output_item.added\ndata: {"type":"response.output_item.added","output_index":1,'
        b'"item":{"type":"message","id":"m","role":"assistant","content":[]}}\n\n'
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","output_index":1,"delta":"Done"}\n\n'
    )
    recorder.reply(
        200,
        head
        + text_events
        + b"event: response.completed\ndata: "
        + json.dumps(final).encode()
        + b"\n\n",
    )
    response = await _model(recorder, stream=True).complete(request((user(QUESTION),)))
    assert response.message.text == "Done"
    assert response.message.tool_calls[0].arguments == {"location": "Paris, France"}


async def test_failed_and_error_events_raise_their_class(recorder: Recorder) -> None:
    failed = {
        "type": "response.failed",
        "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}},
    }
    recorder.reply(200, b"event: response.failed\ndata: " + json.dumps(failed).encode() + b"\n\n")
    with pytest.raises(errors.ServerError):
        await _model(recorder, stream=True).complete(request((user("x"),)))
    error = {"type": "error", "code": "rate_limit_exceeded", "message": "slow down"}
    recorder.reply(200, b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n")
    with pytest.raises(errors.RateLimited):
        await _model(recorder, stream=True).complete(request((user("x"),)))


async def test_http_quota_error_is_not_retryable(recorder: Recorder) -> None:
    recorder.reply(429, wire_bytes("openai-error-429-insufficient-quota.json"))
    with pytest.raises(errors.QuotaExhausted) as caught:
        await _model(recorder).complete(request((user("x"),)))
    assert not caught.value.retryable


async def test_a_failed_response_without_streaming_raises(recorder: Recorder) -> None:
    body = wire_json("openai-responses-response-function-call.json")
    body["status"] = "failed"
    body["error"] = {"code": "server_error", "message": "The model failed."}
    recorder.reply(200, json.dumps(body).encode())
    with pytest.raises(errors.ServerError, match="The model failed"):
        await _model(recorder).complete(request((user("x"),)))
