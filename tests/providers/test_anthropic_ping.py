"""Anthropic keep-alive `ping` events carry nothing the answer needs: the official SDK skips
them by name without reading their data, so a corrupted or odd ping must not fail a stream."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.messages import user
from tether.providers.base import Delta, ModelRequest
from tether.providers.registry import model_from_string

from .fake_servers import FakeServer, Reply


def event(name: str, data: Any) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return f"event: {name}\ndata: {text}\n\n".encode()


def answer_around(odd: bytes | None) -> list[bytes]:
    """A one-text-block answer, "Hello", with `odd` sent before and inside the block."""
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 12, "output_tokens": 1},
    }
    chunks = [
        event("message_start", {"type": "message_start", "message": message}),
        odd,
        event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        ),
        event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hel"},
            },
        ),
        odd,
        event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "lo"},
            },
        ),
        event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 2},
            },
        ),
        event("message_stop", {"type": "message_stop"}),
    ]
    return [c for c in chunks if c is not None]


ODD_EVENTS = {
    "cut-json": b'event: ping\ndata: {"type": "pi\n\n',
    "not-json": b"event: ping\ndata: keep-alive\n\n",
    "empty-data": b"event: ping\ndata:\n\n",
    "not-an-object": b"event: ping\ndata: [1, 2]\n\n",
    "two-data-lines": b'event: ping\ndata: {"type":\ndata: "ping"} trailing\n\n',
    "unknown-event-name": b"event: heartbeat_v2\ndata: <<binary>>\n\n",
}


@pytest.mark.parametrize("odd", ODD_EVENTS.values(), ids=ODD_EVENTS.keys())
async def test_an_odd_ping_does_not_fail_the_stream(odd: bytes) -> None:
    seen: list[Delta] = []
    async with FakeServer(lambda _: Reply(chunks=answer_around(odd))) as server:
        model = model_from_string(
            "anthropic:claude-sonnet-4-5", api_key="sk-loopback", base_url=server.url, stream=True
        )
        response = await model.complete(
            ModelRequest(model.name, None, (user("hi"),), on_delta=seen.append)
        )
    assert response.message.text == "Hello"
    assert response.stop == "end_turn" and response.usage.output_tokens == 2
    assert seen == [Delta("text", "Hel"), Delta("text", "lo")]


async def test_a_corrupted_event_the_answer_needs_still_fails() -> None:
    from tether import errors

    chunks = answer_around(None)
    chunks[-1] = b'event: message_stop\ndata: {"type": "message_st\n\n'
    async with FakeServer(lambda _: Reply(chunks=chunks)) as server:
        model = model_from_string(
            "anthropic:claude-sonnet-4-5", api_key="sk-loopback", base_url=server.url, stream=True
        )
        with pytest.raises(errors.ServerError, match="message_st"):
            await model.complete(ModelRequest(model.name, None, (user("hi"),)))
