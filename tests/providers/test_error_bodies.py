"""Error bodies over real HTTP, streamed or not: a streaming request the server answers with a
JSON error (an error status, or 200 with `application/json`) reports the provider's own
message, type or code and status, classified as the same body is when not streamed; a whole
answer's error body is not said to come from a stream; a Responses error names its code."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import pytest

from tether import errors
from tether.messages import user
from tether.providers.base import Delta, Model, ModelRequest
from tether.providers.registry import model_from_string

from .fake_servers import FakeServer, Handler, Received, Reply
from .test_loopback import MODEL_NAMES
from .toy_dialects import HANDLERS, ToyModel

MODELS = {
    "anthropic": "anthropic:claude-sonnet-4-5",
    "openai": "openai:gpt-4.1",
    "openai-responses": "openai-responses:gpt-4.1",
    "openrouter": "openrouter:meta-llama/llama-3.3-70b-instruct",
}


def build(dialect: str, url: str, stream: bool) -> Model:
    base = url if dialect == "anthropic" else url + "/v1"
    return model_from_string(MODELS[dialect], api_key="sk-loopback", base_url=base, stream=stream)


@dataclass(frozen=True)
class Case:
    dialect: str
    status: int  # the HTTP status the body comes with when it is not sent with 200
    body: Any
    expected: type[errors.ProviderError]
    said: str  # the provider's own words, which the error must carry
    label: str = ""  # its type and/or code, as the error message names them
    stated: int | None = None  # a status the body itself states (OpenRouter's `code`)

    @property
    def raw(self) -> bytes:
        return json.dumps(self.body).encode()


def _anthropic(kind: str, message: str) -> Any:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}


def _openai(message: str, kind: str | None, code: str | None) -> Any:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


RATE = "Rate limit reached for gpt-4.1 on tokens per min (TPM). Please try again in 84ms."
QUOTA = "You exceeded your current quota, please check your plan and billing details."
WINDOW = "Your input exceeds the context window of this model. Please adjust your input."
UPSTREAM = "meta-llama/llama-3.3-70b-instruct is temporarily rate-limited upstream."

CASES = [
    Case(
        "anthropic",
        529,
        _anthropic("overloaded_error", "Overloaded"),
        errors.Overloaded,
        "Overloaded",
        "overloaded_error",
    ),
    Case(
        "anthropic",
        400,
        _anthropic("invalid_request_error", "prompt is too long: 205000 tokens > 200000 maximum"),
        errors.ContextOverflow,
        "prompt is too long",
        "invalid_request_error",
    ),
    Case(
        "anthropic",
        401,
        _anthropic("authentication_error", "invalid x-api-key"),
        errors.AuthenticationError,
        "invalid x-api-key",
        "authentication_error",
    ),
    Case(
        "openai",
        429,
        _openai(RATE, "tokens", "rate_limit_exceeded"),
        errors.RateLimited,
        "Rate limit reached for gpt-4.1",
        "rate_limit_exceeded",
    ),
    Case(
        "openai",
        429,
        _openai(QUOTA, "insufficient_quota", "insufficient_quota"),
        errors.QuotaExhausted,
        "exceeded your current quota",
        "insufficient_quota",
    ),
    Case(
        "openai-responses",
        400,
        _openai(WINDOW, "invalid_request_error", "context_length_exceeded"),
        errors.ContextOverflow,
        "exceeds the context window",
        "context_length_exceeded",
    ),
    Case(
        "openai-responses",
        429,
        _openai(RATE, "tokens", "rate_limit_exceeded"),
        errors.RateLimited,
        "Rate limit reached for gpt-4.1",
        "rate_limit_exceeded",
    ),
    Case(
        "openrouter",
        429,
        {
            "error": {
                "message": "Provider returned error",
                "code": 429,
                "metadata": {"raw": UPSTREAM, "provider_name": "OpenInference"},
            },
            "user_id": "user_1",
        },
        errors.RateLimited,
        "temporarily rate-limited upstream",
        stated=429,
    ),
    Case(
        "openrouter",
        402,
        {"error": {"message": "Insufficient credits. Add more using /credits", "code": 402}},
        errors.QuotaExhausted,
        "Insufficient credits",
        stated=402,
    ),
    Case(
        "openrouter",
        401,
        {"error": {"message": "No auth credentials found", "code": 401}},
        errors.AuthenticationError,
        "No auth credentials found",
        stated=401,
    ),
]
IDS = [f"{c.dialect}-{c.status}-{c.expected.__name__}" for c in CASES]


async def _failure(case: Case, reply: Reply, stream: bool) -> errors.ProviderError:
    async with FakeServer(lambda _: reply) as server:
        model = build(case.dialect, server.url, stream)
        with pytest.raises(errors.ProviderError) as caught:
            await model.complete(ModelRequest(model.name, None, (user("hi"),)))
        await model.aclose()  # type: ignore[attr-defined]
    return caught.value


def _same(one: errors.ProviderError, other: errors.ProviderError) -> None:
    assert type(one) is type(other)
    assert (one.message, one.status, one.retryable, one.retry_after, one.body) == (
        other.message,
        other.status,
        other.retryable,
        other.retry_after,
        other.body,
    )


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_a_streamed_request_refused_with_an_error_status_reads_the_body(case: Case) -> None:
    reply = Reply(case.status, case.raw, {"content-type": "application/json"})
    streamed = await _failure(case, reply, stream=True)
    assert type(streamed) is case.expected and streamed.retryable is case.expected.retryable
    assert streamed.status == case.status
    assert case.said in streamed.message and streamed.body == case.raw.decode()
    _same(streamed, await _failure(case, reply, stream=False))


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_a_streamed_request_answered_200_with_a_json_error_reads_the_body(
    case: Case,
) -> None:
    reply = Reply(200, case.raw, {"content-type": "application/json; charset=utf-8"})
    streamed = await _failure(case, reply, stream=True)
    assert type(streamed) is case.expected and streamed.retryable is case.expected.retryable
    assert case.said in streamed.message
    assert streamed.status == case.stated
    assert streamed.body == case.raw.decode()
    assert "the stream ended" not in streamed.message
    # the very error a request that did not stream gets from the same answer
    _same(streamed, await _failure(case, reply, stream=False))


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_an_error_body_in_a_whole_200_answer_is_not_said_to_be_in_a_stream(
    case: Case,
) -> None:
    reply = Reply(200, case.raw, {"content-type": "application/json"})
    error = await _failure(case, reply, stream=False)
    assert type(error) is case.expected
    assert "inside the stream" not in error.message
    assert error.message.startswith("HTTP 2xx with an error body: ")
    assert case.said in error.message and error.status == case.stated


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_an_ollama_error_body_in_a_whole_200_answer_is_not_said_to_be_in_a_stream(
    stream: bool,
) -> None:
    body = json.dumps({"error": "model runner has unexpectedly stopped"}).encode()
    async with FakeServer(lambda _: Reply(200, body, {"content-type": "application/json"})) as s:
        model = model_from_string("ollama:qwen3", base_url=s.url, stream=stream)
        with pytest.raises(errors.ServerError) as caught:
            await model.complete(ModelRequest(model.name, None, (user("hi"),)))
    assert caught.value.message == (
        "HTTP 2xx with an error body: model runner has unexpectedly stopped"
    )
    assert caught.value.retryable and caught.value.body == body.decode()


DIALECTS = ["anthropic", "openai", "openai-responses", "ollama"]


def _served_as(content_type: str, stream: bool, dialect: str) -> Handler:
    """The toy dialect's answer, streamed or whole whatever was asked, typed `content_type`."""
    handler = HANDLERS["openai" if dialect == "openrouter" else dialect](ToyModel([]))

    def handle(request: Received) -> Reply:
        asked = {**request.json(), "stream": stream}
        reply = handler(replace(request, body=json.dumps(asked).encode()))
        reply.headers["content-type"] = content_type
        return reply

    return handle


async def _answer(handler: Handler, dialect: str) -> tuple[str, list[Delta]]:
    seen: list[Delta] = []
    async with FakeServer(handler) as server:
        base = server.url + "/v1" if dialect.startswith("openai") else server.url
        model = model_from_string(
            f"{dialect}:{MODEL_NAMES[dialect]}", api_key="sk-loopback", base_url=base, stream=True
        )
        response = await model.complete(
            ModelRequest(model.name, None, (user("hi"),), on_delta=seen.append)
        )
    return response.message.text, seen


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_stream_request_answered_with_a_whole_json_answer_reads_it_whole(
    dialect: str,
) -> None:
    text, seen = await _answer(_served_as("application/json", False, dialect), dialect)
    assert text.strip() == "Results:" and seen == []


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_stream_mistyped_as_json_is_still_read_as_a_stream(dialect: str) -> None:
    text, seen = await _answer(_served_as("application/json", True, dialect), dialect)
    assert text.strip() == "Results:" and "".join(d.text for d in seen) == text


LABELLED = [pytest.param(c, id=i) for c, i in zip(CASES, IDS, strict=True) if c.label]


@pytest.mark.parametrize("case", LABELLED)
async def test_an_error_status_names_the_error_type_or_code(case: Case) -> None:
    reply = Reply(case.status, case.raw, {"content-type": "application/json"})
    error = await _failure(case, reply, stream=False)
    assert error.message.startswith(f"HTTP {case.status}: ")
    assert case.label in error.message


def _responses_stream(event: Any) -> Reply:
    started = {"type": "response.created", "sequence_number": 0, "response": {"status": "x"}}
    chunks = [
        f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()
        for e in (started, {**event, "sequence_number": 1})
    ]
    return Reply(chunks=chunks, headers={"content-type": "text/event-stream"})


@pytest.mark.parametrize(
    ("code", "said", "expected"),
    [
        ("rate_limit_exceeded", RATE, errors.RateLimited),
        ("context_length_exceeded", WINDOW, errors.ContextOverflow),
        ("server_error", "The server had an error.", errors.ServerError),
    ],
)
async def test_a_responses_stream_error_event_names_its_code(
    code: str, said: str, expected: type[errors.ProviderError]
) -> None:
    event = {"type": "error", "code": code, "message": said, "param": None}
    case = Case("openai-responses", 200, event, expected, said)
    error = await _failure(case, _responses_stream(event), stream=True)
    assert type(error) is expected
    assert error.message == f"error inside the stream: {code}: {said}"
    assert error.status is None


async def test_a_failed_response_names_its_code_streamed_or_whole() -> None:
    failed = {"status": "failed", "error": {"code": "rate_limit_exceeded", "message": RATE}}
    event = {"type": "response.failed", "response": failed}
    case = Case("openai-responses", 200, event, errors.RateLimited, RATE)
    streamed = await _failure(case, _responses_stream(event), stream=True)
    assert type(streamed) is errors.RateLimited
    assert streamed.message == f"error inside the stream: rate_limit_exceeded: {RATE}"
    whole = {"id": "resp_1", "object": "response", "output": [], **failed}
    reply = Reply(200, json.dumps(whole).encode(), {"content-type": "application/json"})
    error = await _failure(case, reply, stream=False)
    assert type(error) is errors.RateLimited
    assert error.message == f"HTTP 2xx with an error body: rate_limit_exceeded: {RATE}"
    assert error.body == json.dumps(whole)
