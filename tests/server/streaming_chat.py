"""A loopback OpenAI Chat server for served sessions that stream: each answer is a list of
stream deltas (text, reasoning, a tool call's argument fragments) written as real SSE chunks
over a socket (`providers/fake_servers.py`), held at barriers the test lets go, so a test
knows where the stream stands without a sleep; and a reader of `tether serve`'s event stream,
frame by frame, as it comes.

Chunk numbers, for the holds: 0 is the assistant's role, 1..N the deltas, then the finish,
the usage and `[DONE]`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from providers.fake_servers import FakeServer, Received, Reply
from server.support import ACME_HEADERS

SSE = {"content-type": "text/event-stream"}
MODEL = "openai:gpt-4o-mini"


def text(*pieces: str) -> list[dict[str, Any]]:
    return [{"content": p} for p in pieces]


def reasoning(*pieces: str) -> list[dict[str, Any]]:
    return [{"reasoning_content": p} for p in pieces]


def call(call_id: str, name: str, *fragments: str) -> list[dict[str, Any]]:
    """A tool call opened with its id and name, then its arguments in `fragments`."""
    opened = {"index": 0, "id": call_id, "type": "function", "function": {"name": name}}
    opened["function"]["arguments"] = ""
    more = [{"tool_calls": [{"index": 0, "function": {"arguments": f}}]} for f in fragments]
    return [{"tool_calls": [opened]}, *more]


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    data = {
        "id": "chatcmpl-live",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta else [],
        **extra,
    }
    return f"data: {json.dumps(data)}\n\n".encode()


def chunks(deltas: list[dict[str, Any]]) -> list[bytes]:
    finish = "tool_calls" if any("tool_calls" in d for d in deltas) else "stop"
    usage = {
        "prompt_tokens": 12,
        "completion_tokens": len(deltas),
        "total_tokens": 12 + len(deltas),
    }
    return [
        _chunk({"role": "assistant", "content": ""}),
        *(_chunk(d) for d in deltas),
        _chunk({"content": ""}, finish),
        _chunk({}, usage=usage),
        b"data: [DONE]\n\n",
    ]


@dataclass
class Turn:
    """One answer: its deltas, and the barriers before some of its chunks (by number)."""

    deltas: list[dict[str, Any]]
    holds: dict[int, asyncio.Event] = field(default_factory=dict)
    cut: bool = False  # the connection closes after the chunks, with no finish or [DONE]

    def reply(self) -> Reply:
        sent = chunks(self.deltas)
        if self.cut:
            sent = sent[: 1 + len(self.deltas)]
        return Reply(chunks=sent, holds=self.holds, cut=self.cut, headers=SSE)


class StreamingChat:
    """`async with StreamingChat([Turn(...), ...]) as chat:` answers the n-th request with
    the n-th turn, streamed; `asked` is set at each request. Set `serve_env(chat)` on a
    `tether serve` so that `openai:gpt-4o-mini` calls it."""

    def __init__(self, turns: list[Turn]) -> None:
        self.turns = turns
        self.asked = asyncio.Event()
        self.server = FakeServer(self._handle)

    def _handle(self, received: Received) -> Reply:
        self.asked.set()
        turn = self.turns[len(self.server.requests) - 1]
        return turn.reply()

    @property
    def bodies(self) -> list[Any]:
        return [r.json() for r in self.server.requests]

    async def __aenter__(self) -> StreamingChat:
        await self.server.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for turn in self.turns:  # let every held stream go, so the server closes at once
            for hold in turn.holds.values():
                hold.set()
        await self.server.__aexit__(*exc)


def serve_env(chat: StreamingChat) -> dict[str, str]:
    return {"OPENAI_BASE_URL": f"{chat.server.url}/v1", "OPENAI_API_KEY": "sk-loopback"}


async def start(client: httpx.AsyncClient, task: str, **spec: Any) -> str:
    body = {"model": MODEL, "task": task, "end_after_turn": True, **spec}
    response = await client.post("/v1/sessions", headers=ACME_HEADERS, json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["session_id"])


@dataclass
class Frame:
    kind: str  # the SSE event: an event type, "delta" or "end"
    data: Any


async def frames(response: httpx.Response) -> AsyncIterator[Frame]:
    """The frames of an event stream as they come."""
    kind, data = "message", []
    async for line in response.aiter_lines():
        if line:
            name, _, value = line.partition(":")
            if name == "event":
                kind = value.strip()
            elif name == "data":
                data.append(value.removeprefix(" "))
            continue
        if data:
            joined = "\n".join(data)
            yield Frame(kind, joined if kind == "end" else json.loads(joined))
        kind, data = "message", []


async def until(
    stream: AsyncIterator[Frame], wanted: Callable[[Frame], bool], seen: list[Frame]
) -> Frame:
    """Read frames into `seen` up to the first one `wanted` takes (at most 30 s)."""
    async with asyncio.timeout(30):
        async for frame in stream:
            seen.append(frame)
            if wanted(frame):
                return frame
    raise AssertionError(f"the stream ended first: {[f.kind for f in seen]}")
