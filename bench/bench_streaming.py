"""What streaming costs per model call: the same 200-token answer of a loopback OpenAI Chat
server, asked whole (`stream: false`) and streamed (one SSE event per token), through tether's
codec and through a bare httpx client doing the least it can (one POST and `json.loads`; or
reading the lines and `json.loads` of each event), printed side by side.

The server runs in a child process (`tests/providers/fake_servers.py`), so the CPU time
measured (`time.process_time` of this process) is the client's alone. A streamed answer is
sent either at once (the events coalesce into a few reads) or paced, one event per
millisecond, so that each event is a read of its own, as a model's tokens come. The streamed
codec hands every delta to an observer: a no-op, or a `tether serve` event hub with no
subscriber (what a worker's session with nobody watching pays). Wall times are printed for
completeness; the fake generates nothing, so they say little about a real model's latency.

    .venv/bin/python bench/bench_streaming.py [--calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

from providers.fake_servers import FakeServer, Received, Reply
from tether.messages import user
from tether.providers.base import Delta, ModelRequest
from tether.providers.openai_chat import OpenAIChatModel
from tether.runtime.hub import EventHub
from tether.store import MemoryStore

TOKENS = 200
PACE = 0.001  # seconds between streamed events when paced
MODEL = "gpt-4o-mini"


def answer_text() -> list[str]:
    return [f"word{i} " for i in range(TOKENS)]


def _chunk(delta: dict[str, object], finish: str | None) -> bytes:
    data = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(data)}\n\n".encode()


USAGE = {"prompt_tokens": 20, "completion_tokens": TOKENS, "total_tokens": 20 + TOKENS}


def handle(received: Received) -> Reply:
    body = received.json()
    words = answer_text()
    if not body.get("stream"):
        whole = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(words)},
                    "finish_reason": "stop",
                }
            ],
            "usage": USAGE,
        }
        return Reply(body=json.dumps(whole).encode(), headers={"content-type": "application/json"})
    chunks = [_chunk({"role": "assistant", "content": ""}, None)]
    chunks += [_chunk({"content": w}, None) for w in words]
    chunks.append(_chunk({}, "stop"))
    usage = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": USAGE}
    chunks.append(f"data: {json.dumps(usage)}\n\n".encode())
    chunks.append(b"data: [DONE]\n\n")
    pace = float(received.headers.get("x-pace", "0"))
    return Reply(chunks=chunks, pace=pace, headers={"content-type": "text/event-stream"})


async def serve() -> None:
    """The child: serve until stdin closes."""
    async with FakeServer(handle, keep_alive=True) as server:
        print(server.url, flush=True)
        await asyncio.to_thread(sys.stdin.read)


Call = Callable[[], Awaitable[object]]


async def measure(call: Call, calls: int) -> tuple[float, float]:
    """Mean client CPU µs and wall ms per call, after three warm-up calls."""
    for _ in range(3):
        await call()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        await call()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu / calls * 1e6, wall / calls * 1e3


def request_body(stream: bool) -> dict[str, object]:
    body: dict[str, object] = {"model": MODEL, "messages": [{"role": "user", "content": "go"}]}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def main(calls: int) -> None:
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        asyncio.run(compare(child.stdout.readline().strip(), calls))
    finally:
        child.stdin.close()
        child.wait(10)


async def compare(url: str, calls: int) -> None:
    store = MemoryStore()
    hub = EventHub(store)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:

            async def bare_json() -> object:
                response = await client.post("/v1/chat/completions", json=request_body(False))
                return json.loads(response.content)

            def bare_sse(pace: float) -> Call:
                async def call() -> object:
                    headers = {"x-pace": str(pace)}
                    body = request_body(True)
                    parsed = []
                    async with client.stream(
                        "POST", "/v1/chat/completions", json=body, headers=headers
                    ) as response:
                        async for line in response.aiter_lines():
                            if line.startswith("data: ") and line != "data: [DONE]":
                                parsed.append(json.loads(line[6:]))
                    return parsed

                return call

            def codec(stream: bool, pace: float, observer: Callable[[Delta], None] | None) -> Call:
                model = OpenAIChatModel(
                    MODEL,
                    api_key="sk-bench",
                    base_url=url + "/v1",
                    http_client=client,
                    stream=stream,
                    extra_headers={"x-pace": str(pace)},
                )
                request = ModelRequest(MODEL, None, (user("go"),), on_delta=observer)

                async def call() -> object:
                    response = await model.complete(request)
                    assert response.message.text == "".join(answer_text())
                    return response

                return call

            def nothing(delta: Delta) -> None:
                pass

            to_hub = partial(hub.publish_delta, "ses_nobody_watches")
            rows: list[tuple[str, Call]] = [
                ("bare: POST, json.loads", bare_json),
                ("tether codec, stream: false", codec(False, 0.0, None)),
                ("bare: SSE lines, json.loads each (at once)", bare_sse(0.0)),
                ("tether codec, streamed (at once)", codec(True, 0.0, nothing)),
                ("bare: SSE lines, json.loads each (paced)", bare_sse(PACE)),
                ("tether codec, streamed (paced)", codec(True, PACE, nothing)),
                ("tether codec, streamed (paced) to a hub, unwatched", codec(True, PACE, to_hub)),
            ]
            print(f"one model call, a {TOKENS}-token answer, {calls} calls each (loopback):")
            print(f"{'':52s} {'client CPU/call':>16s} {'wall/call':>10s}")
            for name, call in rows:
                cpu, wall = await measure(call, calls)
                print(f"{name:52s} {cpu:13,.0f} µs {wall:7.1f} ms")
    finally:
        await hub.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve())
    else:
        main(args.calls)
