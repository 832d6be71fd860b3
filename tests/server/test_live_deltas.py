"""Served sessions stream: a session started over HTTP on a real `tether serve` with a real
provider model (`openai:gpt-4o-mini`, its base URL a loopback fake that streams real SSE and
holds the stream at barriers) shows the model's text on `GET .../stream?deltas=true` while
the answer is still coming, from where a watcher attached mid-call; reasoning and tool-input
deltas too; a cancel mid-stream ends the session, and a stream cut after some output is
still retried, as an unstreamed call is."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from server.streaming_chat import (
    Frame,
    StreamingChat,
    Turn,
    call,
    frames,
    reasoning,
    serve_env,
    start,
    text,
    until,
)
from server.support import ACME_HEADERS, serve, settled
from tether.testing.runtime_conformance import TOOLS

STREAM_HEADERS = {**ACME_HEADERS, "Accept": "text/event-stream"}


def deltas(seen: list[Frame], kind: str) -> list[dict[str, Any]]:
    return [f.data for f in seen if f.kind == "delta" and f.data["kind"] == kind]


def joined(seen: list[Frame], kind: str) -> str:
    return "".join(d["text"] for d in deltas(seen, kind))


def is_type(kind: str) -> Any:
    return lambda frame: frame.kind == kind


@dataclass
class Watch:
    """A session started on a real `tether serve` whose model is `chat`, and its event
    stream with deltas, opened once the model was asked (so the watcher comes mid-call)."""

    chat: StreamingChat
    client: httpx.AsyncClient
    sid: str
    stream: AsyncIterator[Frame]
    seen: list[Frame] = field(default_factory=list)

    async def until(self, kind: str) -> Frame:
        return await until(self.stream, is_type(kind), self.seen)


@contextlib.asynccontextmanager
async def watched(
    tmp_path: Path, turns: list[Turn], task: str, **spec: Any
) -> AsyncIterator[Watch]:
    async with StreamingChat(turns) as chat:
        with serve(tmp_path, "--workers", "2", env=serve_env(chat)) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                sid = await start(client, task, **spec)
                await asyncio.wait_for(chat.asked.wait(), 30)
                path = f"/v1/sessions/{sid}/stream"
                params = {"deltas": "true"}
                async with client.stream("GET", path, params=params, headers=STREAM_HEADERS) as r:
                    yield Watch(chat, client, sid, frames(r))


async def test_a_served_openai_session_streams_its_text_before_the_answer_is_complete(
    tmp_path: Path,
) -> None:
    pieces = ["Hello ", "from ", "the ", "loopback ", "model, ", "streamed ", "slowly."]
    subscribed, delta_seen = asyncio.Event(), asyncio.Event()
    # Chunks 1 and 2 go before anyone watches; 3 waits for the watcher, 7 (the last piece,
    # the answer's end behind it) until the watcher has seen a delta.
    answer = Turn(text(*pieces), holds={3: subscribed, 7: delta_seen})
    async with watched(tmp_path, [answer], "say hello") as w:
        # The call is under way (its request is in the log) when the watcher comes.
        await w.until("model.requested")
        subscribed.set()
        first = await w.until("delta")
        assert not any(f.kind == "model.responded" for f in w.seen)
        assert first.data["kind"] == "text"
        delta_seen.set()
        await w.until("end")
        status = await settled(w.client, w.sid)
    seen, chat = w.seen, w.chat
    whole = "".join(pieces)
    assert status["state"] == "completed" and status["last_output"] == whole
    streamed = joined(seen, "text")
    # Everything from where the watcher came on, in order; what went before may be lost.
    assert whole.endswith(streamed) and streamed.endswith("the loopback model, streamed slowly.")
    kinds = [f.kind for f in seen]
    assert kinds.index("delta") < kinds.index("model.responded") < kinds.index("session.ended")
    (responded,) = [f.data for f in seen if f.kind == "model.responded"]
    assert responded["data"]["first_token_ms"] > 0
    (body,) = chat.bodies
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_reasoning_and_tool_input_deltas_reach_the_http_stream(tmp_path: Path) -> None:
    subscribed = asyncio.Event()
    turns = [
        Turn(
            reasoning("I should ", "note it down.")
            + call("call_note_1", "note", '{"text', '": "streamed', ' input"}'),
            holds={1: subscribed},
        ),
        Turn(text("Noted: ", "streamed input")),
    ]
    async with watched(tmp_path, turns, "note this", tools=list(TOOLS)) as w:
        await w.until("model.requested")
        subscribed.set()
        await w.until("end")
        status = await settled(w.client, w.sid)
    seen, chat = w.seen, w.chat
    assert status["state"] == "completed" and status["last_output"] == "Noted: streamed input"
    assert [d["text"] for d in deltas(seen, "reasoning")] == ["I should ", "note it down."]
    tool_input = deltas(seen, "tool_input")
    assert [d["text"] for d in tool_input] == ['{"text', '": "streamed', ' input"}']
    assert {d["call_id"] for d in tool_input} == {"call_note_1"}
    assert joined(seen, "text") == "Noted: streamed input"
    # Each kind came before the answer that holds it was recorded.
    kinds = [(f.kind, f.data.get("kind") if f.kind == "delta" else None) for f in seen]
    assert kinds.index(("delta", "tool_input")) < kinds.index(("model.responded", None))
    finished = [f.data for f in seen if f.kind == "tool.finished"]
    assert [e["data"]["content"] for e in finished] == ["noted: streamed input"]
    assert all(body["stream"] is True for body in chat.bodies) and len(chat.bodies) == 2


async def test_a_cancel_mid_stream_ends_the_session(tmp_path: Path) -> None:
    subscribed, never = asyncio.Event(), asyncio.Event()  # the answer never ends by itself
    answer = Turn(text("a first piece", " and never more"), holds={1: subscribed, 2: never})
    async with watched(tmp_path, [answer], "go on forever") as w:
        await w.until("model.requested")
        subscribed.set()
        # The worker is reading the stream: the cancel comes mid-answer.
        await w.until("delta")
        cancel = await w.client.post(f"/v1/sessions/{w.sid}/cancel", headers=ACME_HEADERS)
        assert cancel.status_code == 200, cancel.text
        await w.until("end")
        status = await settled(w.client, w.sid)
    seen, chat = w.seen, w.chat
    assert status["state"] == "canceled" and status["stop_reason"] == "interrupted"
    types = [f.kind for f in seen]
    assert "model.responded" not in types and "session.ended" in types
    assert joined(seen, "text") == "a first piece" and len(chat.bodies) == 1


async def test_a_stream_cut_after_some_output_is_retried(tmp_path: Path) -> None:
    subscribed = asyncio.Event()
    turns = [
        Turn(text("a doomed ", "first attempt"), holds={1: subscribed}, cut=True),
        Turn(text("the answer ", "that came whole")),
    ]
    async with watched(tmp_path, turns, "try twice") as w:
        await w.until("model.requested")
        subscribed.set()
        await w.until("end")
        status = await settled(w.client, w.sid)
    seen, chat = w.seen, w.chat
    assert status["state"] == "completed" and status["last_output"] == "the answer that came whole"
    (failed,) = [f.data["data"] for f in seen if f.kind == "model.failed"]
    assert failed["error_class"] == "connection_failed" and failed["retrying_in"] is not None
    # The watcher saw the first attempt's output, then the failure, then the retry's.
    failure = next(i for i, f in enumerate(seen) if f.kind == "model.failed")
    assert joined(seen[:failure], "text") == "a doomed first attempt"
    assert joined(seen[failure:], "text") == "the answer that came whole"
    assert len(chat.bodies) == 2
