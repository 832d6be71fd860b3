"""Every error body of the wire examples, in and out of streams, maps to its error class."""

from __future__ import annotations

import json

import pytest

from tether import errors
from tether.providers.classify import (
    classify_anthropic,
    classify_ollama,
    classify_openai,
    read_error,
    stream_error,
)

from .conftest import wire_bytes, wire_json

CASES = [
    (classify_anthropic, "anthropic-error-400-invalid-request.json", 400, errors.BadRequest),
    (classify_anthropic, "anthropic-error-400-prompt-too-long.json", 400, errors.ContextOverflow),
    (classify_anthropic, "anthropic-error-429-rate-limit.json", 429, errors.RateLimited),
    (classify_anthropic, "anthropic-error-529-overloaded.json", 529, errors.Overloaded),
    (classify_openai, "openai-error-400-context-length.json", 400, errors.ContextOverflow),
    (classify_openai, "openai-error-400-invalid-request.json", 400, errors.BadRequest),
    (classify_openai, "openai-error-429-insufficient-quota.json", 429, errors.QuotaExhausted),
    (classify_openai, "openai-error-429-rate-limit.json", 429, errors.RateLimited),
    (classify_openai, "openrouter-error-429.json", 429, errors.RateLimited),
    (
        classify_openai,
        "vllm-error-400-context-length-legacy-flat.json",
        400,
        errors.ContextOverflow,
    ),
    (
        classify_openai,
        "vllm-error-400-context-length-v0.10.1plus.json",
        400,
        errors.ContextOverflow,
    ),
    (classify_ollama, "ollama-error-404-model-not-found.json", 404, errors.BadRequest),
]


@pytest.mark.parametrize(("classify", "name", "status", "expected"), CASES)
def test_each_wire_error_body_gets_its_class(classify, name, status, expected) -> None:  # type: ignore[no-untyped-def]
    error = classify(status, wire_bytes(name), {})
    assert type(error) is expected
    assert error.status == status
    assert error.body == wire_bytes(name).decode()
    assert error.retryable is expected.retryable


def test_quota_exhausted_is_never_retried_even_on_429() -> None:
    error = classify_openai(429, wire_bytes("openai-error-429-insufficient-quota.json"), {})
    assert not error.retryable
    assert error.retry_after is None


def test_rate_limit_wait_comes_from_retry_after_header() -> None:
    body = wire_bytes("anthropic-error-429-rate-limit.json")
    error = classify_anthropic(429, body, {"retry-after": "12"})
    assert isinstance(error, errors.RateLimited) and error.retry_after == 12.0


def test_rate_limit_wait_falls_back_to_the_message_text() -> None:
    error = classify_openai(429, wire_bytes("openai-error-429-rate-limit.json"), {})
    assert error.retry_after == pytest.approx(0.084)


def test_openrouter_names_the_upstream_reason() -> None:
    error = classify_openai(429, wire_bytes("openrouter-error-429.json"), {})
    assert "temporarily rate-limited upstream" in error.message


def test_vllm_legacy_flat_and_nested_shapes_read_the_same() -> None:
    flat = read_error(wire_json("vllm-error-400-context-length-legacy-flat.json"))
    nested = read_error(wire_json("vllm-error-400-context-length-v0.10.1plus.json"))
    assert flat.type == nested.type == "BadRequestError"
    assert flat.status == nested.status == 400
    assert "maximum context length" in flat.message and "maximum context length" in nested.message


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (401, errors.AuthenticationError),
        (403, errors.AuthenticationError),
        (404, errors.BadRequest),
        (422, errors.BadRequest),
        (402, errors.QuotaExhausted),
        (408, errors.ServerError),
        (500, errors.ServerError),
        (502, errors.ServerError),
        (503, errors.ServerError),
        (529, errors.Overloaded),
    ],
)
def test_status_alone_decides_when_the_body_says_nothing(status, expected) -> None:  # type: ignore[no-untyped-def]
    error = classify_openai(status, b"<html>Bad Gateway</html>", {})
    assert type(error) is expected
    assert "Bad Gateway" in error.message


def test_anthropic_credit_exhaustion_on_400_is_quota() -> None:
    body = json.dumps(
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "Your credit balance is too low to access the Anthropic API.",
            },
        }
    ).encode()
    assert type(classify_anthropic(400, body, {})) is errors.QuotaExhausted


def test_a_429_mentioning_prompt_length_is_still_a_rate_limit() -> None:
    # Anthropic's 429 text says "reduce the prompt length": that is not an overflow.
    error = classify_anthropic(429, wire_bytes("anthropic-error-429-rate-limit.json"), {})
    assert type(error) is errors.RateLimited


def _stream_payload(name: str, marker: str) -> object:
    for line in wire_bytes(name).decode().splitlines():
        if marker in line:
            raw = line.removeprefix("data: ")
            return json.loads(raw)
    raise AssertionError(marker)


@pytest.mark.parametrize(
    ("name", "marker", "expected"),
    [
        ("anthropic-stream-error-overloaded.sse", "overloaded_error", errors.Overloaded),
        ("openai-chat-stream-error-midstream.sse", '"error"', errors.ServerError),
        ("openrouter-stream-error-midstream.sse", '"error"', errors.ServerError),
        ("ollama-stream-error-midstream.ndjson", '"error"', errors.ServerError),
    ],
)
def test_errors_inside_a_200_stream_get_their_class(name, marker, expected) -> None:  # type: ignore[no-untyped-def]
    error = stream_error(_stream_payload(name, marker))
    assert type(error) is expected
    assert error.status is None
    assert "inside the stream" in error.message


def test_stream_error_events_of_the_responses_api_are_flat() -> None:
    payload = {
        "type": "error",
        "code": "rate_limit_exceeded",
        "message": "slow down",
        "param": None,
    }
    assert type(stream_error(payload)) is errors.RateLimited
    overflow = {"type": "error", "code": "context_length_exceeded", "message": "too long"}
    assert type(stream_error(overflow)) is errors.ContextOverflow
