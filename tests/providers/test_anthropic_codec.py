"""The Anthropic Messages codec against the reference wire files and the official SDK types."""

from __future__ import annotations

import json

import anthropic.types
import pydantic
import pytest

from tether import errors
from tether.messages import (
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    assistant,
    tool_results,
    user,
)
from tether.providers.anthropic import AnthropicModel, encode_request
from tether.providers.base import Delta
from tether.settings import ModelSettings, Reasoning

from .conftest import Recorder, wire_bytes, wire_json
from .transcripts import ANTHROPIC_TURN, QUESTION, WEATHER, request

PARAMS = pydantic.TypeAdapter(anthropic.types.MessageCreateParams)


def _validates(body: dict) -> None:  # type: ignore[type-arg]
    PARAMS.validate_python(body)


# The documented shapes carry no cache breakpoints (tests/providers/test_prompt_cache.py).
UNCACHED = ModelSettings(cache=False)


def test_first_request_matches_the_documented_shape() -> None:
    expected = wire_json("anthropic-request-tools.json")
    del expected["tool_choice"]  # auto is the default; tether does not send it
    body = encode_request(
        "claude-sonnet-4-5",
        request(
            (user(QUESTION),),
            (WEATHER,),
            system="You are a helpful assistant.",
            max_output_tokens=1024,
            settings=UNCACHED,
        ),
    )
    assert body == expected
    _validates(body)


def test_tool_results_travel_as_one_user_message_of_result_blocks() -> None:
    expected = wire_json("anthropic-request-tool-result.json")
    # Both content forms are valid; tether always sends the plain string.
    expected["messages"][2]["content"][1]["content"] = expected["messages"][2]["content"][1][
        "content"
    ][0]["text"]
    tool = dict(expected["tools"][0])
    body = encode_request(
        "claude-sonnet-4-5",
        request(ANTHROPIC_TURN, (WEATHER,), max_output_tokens=1024, settings=UNCACHED),
    )
    assert body["messages"] == expected["messages"]
    assert body["tools"][0]["name"] == tool["name"]
    _validates(body)


def test_user_words_after_results_join_the_same_user_turn() -> None:
    messages = (*ANTHROPIC_TURN, user("Also, is it raining?"))
    body = encode_request("claude-sonnet-4-5", request(messages))
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user"]
    last = body["messages"][-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "tool_result", "text"]
    _validates(body)


def test_max_tokens_defaults_to_the_catalog_output_limit_capped() -> None:
    assert encode_request("claude-sonnet-4-5", request((user("hi"),)))["max_tokens"] == 16_384
    assert encode_request("claude-3-5-haiku", request((user("hi"),)))["max_tokens"] == 8192
    assert encode_request("some-new-model", request((user("hi"),)))["max_tokens"] == 16_384
    assert "temperature" not in encode_request("claude-sonnet-4-5", request((user("hi"),)))


def _model(recorder: Recorder, stream: bool = False) -> AnthropicModel:
    return AnthropicModel(
        "claude-sonnet-4-5", api_key="sk-test", http_client=recorder.client(), stream=stream
    )


async def test_tool_use_response_becomes_one_message_with_text_and_calls(
    recorder: Recorder,
) -> None:
    anthropic.types.Message.model_validate(wire_json("anthropic-response-tool-use.json"))
    recorder.reply(200, wire_bytes("anthropic-response-tool-use.json"))
    response = await _model(recorder).complete(request(ANTHROPIC_TURN[:1], (WEATHER,)))
    message = response.message
    assert message.role == "assistant"
    assert message.text == "I'll check both cities."
    assert [c.arguments["location"] for c in message.tool_calls] == [
        "San Francisco, CA",
        "Paris, France",
    ]
    assert response.stop == "tool_calls" and response.raw_stop_reason == "tool_use"
    assert response.usage.input_tokens == 472 and response.usage.output_tokens == 121
    assert response.cost_usd == pytest.approx((472 * 3 + 121 * 15) / 1e6)
    import hashlib

    assert (
        response.response_hash
        == hashlib.sha256(wire_bytes("anthropic-response-tool-use.json")).hexdigest()
    )
    sent = recorder.requests[0]
    assert sent.url == "https://api.anthropic.com/v1/messages"
    assert (
        sent.headers["x-api-key"] == "sk-test" and sent.headers["anthropic-version"] == "2023-06-01"
    )


async def test_end_turn_response_has_text_only(recorder: Recorder) -> None:
    anthropic.types.Message.model_validate(wire_json("anthropic-response-end-turn.json"))
    recorder.reply(200, wire_bytes("anthropic-response-end-turn.json"))
    response = await _model(recorder).complete(request(ANTHROPIC_TURN))
    assert response.stop == "end_turn" and not response.message.tool_calls
    assert response.message.text.startswith("San Francisco is 15 °C")


async def test_cache_tokens_count_inside_input(recorder: Recorder) -> None:
    body = wire_json("anthropic-response-end-turn.json")
    body["usage"] = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 200,
    }
    import json

    recorder.reply(200, json.dumps(body).encode())
    response = await _model(recorder).complete(request((user("hi"),)))
    assert response.usage.input_tokens == 1210
    assert (response.usage.cache_read_tokens, response.usage.cache_write_tokens) == (1000, 200)
    assert response.cost_usd == pytest.approx((10 * 3 + 1000 * 0.3 + 200 * 3.75 + 5 * 15) / 1e6)


async def test_stream_assembles_text_and_call_and_reports_deltas(recorder: Recorder) -> None:
    seen: list[Delta] = []
    recorder.reply(
        200, wire_bytes("anthropic-stream-tool-use.sse"), {"content-type": "text/event-stream"}
    )
    response = await _model(recorder, stream=True).complete(
        request((user("weather?"),), (WEATHER,), on_delta=seen.append)
    )
    assert recorder.sent()["stream"] is True
    assert response.message.parts == (
        Text("Okay, let's check the weather:"),
        ToolCall(
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "get_weather",
            {"location": "San Francisco, CA", "unit": "fahrenheit"},
        ),
    )
    assert response.stop == "tool_calls" and not response.incomplete
    assert response.usage.input_tokens == 472 and response.usage.output_tokens == 89
    assert "".join(d.text for d in seen if d.kind == "text") == "Okay, let's check the weather:"
    tool_input = "".join(d.text for d in seen if d.kind == "tool_input")
    assert tool_input == '{"location": "San Francisco, CA", "unit": "fahrenheit"}'
    assert {d.call_id for d in seen if d.kind == "tool_input"} == {"toolu_01T1x1fJ34qAmk2tNTrN7Up6"}


async def test_a_call_cut_by_max_tokens_is_incomplete_and_never_executable(
    recorder: Recorder,
) -> None:
    recorder.reply(200, wire_bytes("anthropic-stream-max-tokens-incomplete-tool-use.sse"))
    response = await _model(recorder, stream=True).complete(request((user("write notes"),)))
    assert response.incomplete and response.stop == "max_tokens"
    assert response.raw_stop_reason == "max_tokens"
    (call,) = response.message.tool_calls
    assert call.arguments == {} and call.raw_arguments is not None
    assert call.raw_arguments.startswith('{"path": "notes.md"')


async def test_non_streamed_max_tokens_inside_a_call_is_incomplete(recorder: Recorder) -> None:
    body = wire_json("anthropic-response-tool-use.json")
    body["stop_reason"] = "max_tokens"
    import json

    recorder.reply(200, json.dumps(body).encode())
    response = await _model(recorder).complete(request((user("x"),)))
    assert response.incomplete and response.stop == "max_tokens"
    first, last = response.message.tool_calls
    assert first.raw_arguments is None and last.raw_arguments is not None and last.arguments == {}


async def test_an_error_event_inside_a_200_stream_raises_its_class(recorder: Recorder) -> None:
    recorder.reply(200, wire_bytes("anthropic-stream-error-overloaded.sse"))
    with pytest.raises(errors.Overloaded) as caught:
        await _model(recorder, stream=True).complete(request((user("hi"),)))
    assert caught.value.retryable


async def test_a_stream_cut_before_message_stop_is_a_connection_failure(recorder: Recorder) -> None:
    body = wire_bytes("anthropic-stream-tool-use.sse")
    recorder.reply(200, body[: body.index(b"event: message_delta")])
    with pytest.raises(errors.ConnectionFailed):
        await _model(recorder, stream=True).complete(request((user("hi"),)))


async def test_http_errors_are_classified_with_rate_limit_headers(recorder: Recorder) -> None:
    recorder.reply(
        429,
        wire_bytes("anthropic-error-429-rate-limit.json"),
        {"retry-after": "5", "anthropic-ratelimit-input-tokens-remaining": "0"},
    )
    with pytest.raises(errors.RateLimited) as caught:
        await _model(recorder).complete(request((user("hi"),)))
    assert caught.value.retry_after == 5.0 and caught.value.status == 429


async def test_streamed_http_errors_are_classified_too(recorder: Recorder) -> None:
    recorder.reply(400, wire_bytes("anthropic-error-400-prompt-too-long.json"))
    with pytest.raises(errors.ContextOverflow):
        await _model(recorder, stream=True).complete(request((user("hi"),)))


async def test_malformed_input_json_in_a_stream_gives_raw_arguments(recorder: Recorder) -> None:
    body = wire_bytes("anthropic-stream-tool-use.sse").replace(b'renheit\\"}', b'renheit\\"')
    recorder.reply(200, body)
    response = await _model(recorder, stream=True).complete(request((user("hi"),)))
    (call,) = response.message.tool_calls
    assert (
        call.arguments == {}
        and call.raw_arguments == '{"location": "San Francisco, CA", "unit": "fahrenheit"'
    )
    assert not response.incomplete


def test_a_call_with_unreadable_arguments_is_sent_back_as_an_empty_input() -> None:
    bad = ToolCall("toolu_1", "get_weather", {}, '{"location": ')
    body = encode_request(
        "claude-sonnet-4-5",
        request(
            (
                user("x"),
                assistant("", [bad]),
                tool_results([ToolResult("toolu_1", "invalid input", True)]),
            )
        ),
    )
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    ]
    _validates(body)


async def test_bearer_auth_replaces_the_api_key_header(recorder: Recorder) -> None:
    recorder.reply(200, wire_bytes("anthropic-response-end-turn.json"))
    model = AnthropicModel(
        "claude-sonnet-4-5", api_key="sk-test", http_client=recorder.client(), bearer=True
    )
    await model.complete(request((user("hi"),)))
    sent = recorder.requests[0].headers
    assert sent["authorization"] == "Bearer sk-test" and "x-api-key" not in sent


async def test_streamed_thinking_is_kept_with_its_signature_and_offered_as_reasoning(
    recorder: Recorder,
) -> None:
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {"usage": {"input_tokens": 5, "output_tokens": 1}},
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "hmm"},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "sig"},
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy"},
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "text_delta", "text": "Hi."},
            },
        ),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 9},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    body = b"".join(f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in events)
    recorder.reply(200, body)
    seen: list[Delta] = []
    response = await _model(recorder, stream=True).complete(
        request((user("hi"),), on_delta=seen.append)
    )
    assert response.message.parts == (
        Thinking("hmm", "anthropic", {"signature": "sig"}),
        Thinking("", "anthropic", {"redacted": "EmwKAhgBEgy"}),
        Text("Hi."),
    )
    assert seen == [Delta("reasoning", "hmm"), Delta("text", "Hi.")]
    assert response.usage.output_tokens == 9


async def test_betas_go_in_one_anthropic_beta_header(recorder: Recorder) -> None:
    recorder.reply(200, wire_bytes("anthropic-response-end-turn.json"))
    model = AnthropicModel(
        "claude-sonnet-4-5",
        api_key="sk-test",
        http_client=recorder.client(),
        betas=("interleaved-thinking-2025-05-14", "other-2025-01-01"),
    )
    await model.complete(request((user("hi"),)))
    sent = recorder.requests[0].headers
    assert sent["anthropic-beta"] == "interleaved-thinking-2025-05-14,other-2025-01-01"


def test_thinking_goes_back_as_it_came_and_another_providers_is_left_out() -> None:
    turn = Message(
        "assistant",
        (
            Thinking("hmm", "anthropic", {"signature": "sig"}),
            Thinking("", "anthropic", {"redacted": "EmwK"}),
            Thinking("other", "openai-responses", {"encrypted_content": "gAAA"}),
            Text("Let me look."),
            ToolCall("toolu_1", "search", {"q": "x"}),
        ),
    )
    body = encode_request(
        "claude-sonnet-4-5",
        request(
            (user("hi"), turn),
            settings=ModelSettings(reasoning=Reasoning(budget_tokens=2048), cache=False),
        ),
    )
    _validates(body)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "EmwK"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "x"}},
        ],
    }


async def test_a_whole_answer_keeps_its_thinking_blocks_first(recorder: Recorder) -> None:
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "The user wants x.", "signature": "EqQBCg"},
            {"type": "redacted_thinking", "data": "EmwKAh"},
            {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "x"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 20},
    }
    recorder.reply(200, json.dumps(answer).encode())
    response = await _model(recorder).complete(request((user("hi"),)))
    assert response.message.thinking == (
        Thinking("The user wants x.", "anthropic", {"signature": "EqQBCg"}),
        Thinking("", "anthropic", {"redacted": "EmwKAh"}),
    )
    assert response.stop == "tool_calls" and len(response.message.tool_calls) == 1


async def test_an_error_body_with_status_200_still_raises(recorder: Recorder) -> None:
    recorder.reply(200, wire_bytes("anthropic-error-529-overloaded.json"))
    with pytest.raises(errors.Overloaded):
        await _model(recorder).complete(request((user("hi"),)))


async def test_a_streamed_answer_carries_its_rate_limit_headers(recorder: Recorder) -> None:
    recorder.reply(
        200,
        wire_bytes("anthropic-stream-tool-use.sse"),
        {
            "anthropic-ratelimit-input-tokens-limit": "20000",
            "anthropic-ratelimit-input-tokens-remaining": "19500",
            "anthropic-ratelimit-input-tokens-reset": "2000-01-01T00:00:00Z",
        },
    )
    response = await _model(recorder, stream=True).complete(request((user("hi"),)))
    assert response.rate_limits is not None
    bucket = response.rate_limits.input_tokens
    assert (bucket.limit, bucket.remaining, bucket.reset) == (20000, 19500, 0.0)
