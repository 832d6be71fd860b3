"""Each codec against a real HTTP server on loopback speaking its dialect: plain and streamed
answers, parallel calls, rate limits with their headers, errors and cut streams mid-answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether import errors
from tether.messages import ToolResult, tool_results, user
from tether.providers.base import Delta, Model, ModelRequest, ToolSpec
from tether.providers.registry import model_from_string

from .fake_servers import FakeServer, Received, Reply
from .toy_dialects import HANDLERS, ToyModel, sse

ADD = ToolSpec(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
PLAN = [("add", {"a": 2, "b": 3}), ("add", {"a": 40, "b": 2})]
DIALECTS = ["anthropic", "openai", "openai-responses", "ollama"]
MODEL_NAMES = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-4.1",
    "openai-responses": "gpt-4.1",
    "ollama": "qwen3",
}


def build(dialect: str, url: str, stream: bool) -> Model:
    base = url + "/v1" if dialect.startswith("openai") else url
    return model_from_string(
        f"{dialect}:{MODEL_NAMES[dialect]}", api_key="sk-loopback", base_url=base, stream=stream
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_parallel_calls_then_answer_over_real_http(dialect: str, stream: bool) -> None:
    toy = ToyModel(PLAN)
    seen: list[Delta] = []
    async with FakeServer(HANDLERS[dialect](toy)) as server:
        model = build(dialect, server.url, stream)
        first = await model.complete(
            ModelRequest(
                model.name, "Use the tools.", (user("add twice"),), (ADD,), 256, seen.append
            )
        )
        calls = first.message.tool_calls
        assert [c.arguments for c in calls] == [a for _, a in PLAN]
        assert len({c.id for c in calls}) == 2
        assert first.stop == "tool_calls" and not first.incomplete
        assert first.usage.input_tokens >= 100 and first.usage.output_tokens == 20
        results = tool_results(
            [ToolResult(c.id, str(c.arguments["a"] + c.arguments["b"])) for c in calls]
        )
        second = await model.complete(
            ModelRequest(
                model.name,
                "Use the tools.",
                (user("add twice"), first.message, results),
                (ADD,),
                256,
                seen.append,
            )
        )
        await model.aclose()  # type: ignore[attr-defined]
    assert second.message.text.strip() == "Results: 5, 42"
    assert second.stop == "end_turn" and not second.message.tool_calls
    if stream:
        assert any(d.kind == "text" for d in seen)
    else:
        assert seen == []
    assert server.requests[0].json().get("stream", False) is stream
    # the second request carried both results, answered in call order
    assert (
        json.dumps(server.requests[1].json()).count('"5"')
        + json.dumps(server.requests[1].json()).count('"42"')
        >= 2
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_ollama_calls_without_ids_get_the_same_ids_when_asked_again(stream: bool) -> None:
    async with FakeServer(HANDLERS["ollama"](ToyModel(PLAN))) as server:
        model = build("ollama", server.url, stream)
        request = ModelRequest(model.name, None, (user("add twice"),), (ADD,))
        once = await model.complete(request)
        twice = await model.complete(request)
    assert [c.id for c in once.message.tool_calls] == [c.id for c in twice.message.tool_calls]


RATE_HEADERS = {
    "anthropic": {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2000-01-01T00:00:00Z",
        "retry-after": "7",
    },
    "openai": {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "7s"},
    "openai-responses": {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "0m7s"},
    "ollama": {"retry-after": "7"},
}
RATE_BODIES = {
    "anthropic": {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
    "openai": {
        "error": {
            "message": "Rate limit reached",
            "type": "requests",
            "code": "rate_limit_exceeded",
        }
    },
    "openai-responses": {
        "error": {"message": "Rate limit reached", "type": "tokens", "code": "rate_limit_exceeded"}
    },
    "ollama": {"error": "too many requests"},
}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_429_with_rate_limit_headers_is_rate_limited_with_a_wait(
    dialect: str, stream: bool
) -> None:
    reply = Reply(429, json.dumps(RATE_BODIES[dialect]).encode(), RATE_HEADERS[dialect])
    async with FakeServer(lambda _: reply) as server:
        model = build(dialect, server.url, stream)
        with pytest.raises(errors.RateLimited) as caught:
            await model.complete(ModelRequest(model.name, None, (user("hi"),)))
    assert caught.value.retry_after == 7.0
    assert caught.value.status == 429 and caught.value.retryable


def _midstream_error(dialect: str) -> Reply:
    if dialect == "anthropic":
        chunks = sse(
            [
                (
                    "message_start",
                    {
                        "type": "message_start",
                        "message": {
                            "id": "m",
                            "type": "message",
                            "role": "assistant",
                            "content": [],
                            "model": "x",
                            "usage": {"input_tokens": 1, "output_tokens": 1},
                        },
                    },
                ),
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                ),
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": "Hel"},
                    },
                ),
                (
                    "error",
                    {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"},
                    },
                ),
            ]
        )
    elif dialect == "openai":
        chunks = sse(
            [
                (
                    None,
                    {"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]},
                ),
                (None, {"error": {"message": "overloaded", "type": "overloaded_error"}}),
            ]
        )
    elif dialect == "openai-responses":
        chunks = sse(
            [
                (
                    "response.output_text.delta",
                    {"type": "response.output_text.delta", "output_index": 0, "delta": "Hel"},
                ),
                ("error", {"type": "error", "code": "overloaded_error", "message": "Overloaded"}),
            ]
        )
    else:
        chunks = [
            b'{"message":{"role":"assistant","content":"Hel"},"done":false}\n',
            b'{"error":"model overloaded"}\n',
        ]
    return Reply(chunks=chunks)


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_an_error_in_the_middle_of_a_200_stream_raises(dialect: str) -> None:
    seen: list[Delta] = []
    async with FakeServer(lambda _: _midstream_error(dialect)) as server:
        model = build(dialect, server.url, stream=True)
        with pytest.raises(errors.ProviderError) as caught:
            await model.complete(
                ModelRequest(model.name, None, (user("hi"),), on_delta=seen.append)
            )
    assert caught.value.retryable
    expected = errors.ServerError if dialect == "ollama" else errors.Overloaded
    assert type(caught.value) is expected
    assert seen == [Delta("text", "Hel")]


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_stream_cut_by_the_connection_is_a_connection_failure(dialect: str) -> None:
    toy = ToyModel(PLAN)
    handler = HANDLERS[dialect](toy)

    def cut(request: Received) -> Reply:
        reply = handler(request)
        assert reply.chunks is not None
        return Reply(chunks=reply.chunks[:2], cut=True)

    async with FakeServer(cut) as server:
        model = build(dialect, server.url, stream=True)
        with pytest.raises(errors.ConnectionFailed):
            await model.complete(ModelRequest(model.name, None, (user("hi"),), (ADD,)))


async def test_nobody_listening_is_a_connection_failure() -> None:
    async with FakeServer(lambda _: Reply()) as server:
        url = server.url
    model = build("openai", url, stream=False)
    with pytest.raises(errors.ConnectionFailed):
        await model.complete(ModelRequest(model.name, None, (user("hi"),)))


async def test_auth_headers_are_the_dialects_own() -> None:
    seen: dict[str, dict[str, Any]] = {}
    for dialect in DIALECTS:
        handler = HANDLERS[dialect](ToyModel(PLAN))
        async with FakeServer(handler) as server:
            model = build(dialect, server.url, stream=False)
            await model.complete(ModelRequest(model.name, None, (user("hi"),)))
            seen[dialect] = server.requests[0].headers
    assert (
        seen["anthropic"]["x-api-key"] == "sk-loopback" and "authorization" not in seen["anthropic"]
    )
    assert seen["openai"]["authorization"] == "Bearer sk-loopback"
    assert seen["openai-responses"]["authorization"] == "Bearer sk-loopback"


def test_a_model_survives_being_used_from_two_event_loops() -> None:
    """`Agent.run_sync` twice means two `asyncio.run` loops around one model; a connection
    kept alive from the first loop must not be reused by the second."""
    import asyncio
    import threading

    ready = threading.Event()
    stop: list[asyncio.Event] = []
    urls: list[str] = []
    server_loop: list[asyncio.AbstractEventLoop] = []

    async def serve() -> None:
        async with FakeServer(HANDLERS["openai"](ToyModel(PLAN)), keep_alive=True) as server:
            urls.append(server.url)
            stop.append(asyncio.Event())
            server_loop.append(asyncio.get_running_loop())
            ready.set()
            await stop[0].wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(),))
    thread.start()
    try:
        assert ready.wait(10)
        model = build("openai", urls[0], False)

        async def ask() -> str:
            response = await model.complete(ModelRequest("m", None, (user("hi"),)))
            return response.message.text

        assert asyncio.run(ask()).startswith("Results")
        assert asyncio.run(ask()).startswith("Results")
    finally:
        server_loop[0].call_soon_threadsafe(stop[0].set)
        thread.join(10)
