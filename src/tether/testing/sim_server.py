"""A rate-limited model server on loopback: the OpenAI Chat Completions dialect over plain
HTTP/1.1 on 127.0.0.1, enforcing a `Capacity` with `BackendMeter` and answering 429 (with
`retry-after`, and `x-ratelimit-*` headers unless `headers=False`) past it. For the gateway's
tests and benchmarks, so they cross a real socket through the real codec. Not a web server.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from types import TracebackType

from tether.messages import JSONObject, JSONValue
from tether.testing.simulate import (
    Answer,
    BackendMeter,
    Capacity,
    Latency,
    Script,
    default_script,
)

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}


class LoopbackServer:
    """`async with LoopbackServer(capacity) as server:` then `server.base_url`."""

    def __init__(
        self,
        capacity: Capacity,
        *,
        headers: bool = True,
        token_ratio: tuple[float, float] = (1.05, 1.25),
        latency: Latency | None = None,
        script: Script = default_script,
        seed: int = 0,
    ) -> None:
        self.capacity = capacity
        self.headers = headers
        self.token_ratio = token_ratio
        self.latency = latency or Latency()
        self.script = script
        self._rng = random.Random(seed)
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.meter: BackendMeter | None = None
        self.port = 0
        self._closing = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.meter = BackendMeter(self.capacity, loop.time())
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            self._closing = True
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> LoopbackServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                path, body = request
                status, headers, payload = await self._answer(path, body)
                writer.write(_response_bytes(status, headers, payload))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        except asyncio.CancelledError:
            # Our own shutdown: end quietly (asyncio's stream callback trips over a handler
            # task that ends cancelled). Any other cancel propagates.
            if self._closing:
                return
            raise
        finally:
            if task is not None:
                self._handlers.discard(task)
            writer.close()

    async def _answer(self, path: str, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        if not path.endswith("/chat/completions"):
            return _error(404, "not_found", "no such endpoint")
        try:
            body = json.loads(raw)
        except ValueError:
            return _error(400, "invalid_request_error", "the body is not JSON")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "invalid_request_error", "messages must be a list")
        loop = asyncio.get_running_loop()
        assert self.meter is not None
        meter = self.meter
        input_tokens = math.ceil(_wire_chars(body) / 4 * self._rng.uniform(*self.token_ratio))
        max_output = _int(body.get("max_tokens")) or _int(body.get("max_completion_tokens"))
        max_output = max_output or 4096
        refusal = meter.admit(input_tokens, max_output, loop.time())
        if refusal is not None:
            headers = meter.headers(loop.time()) if self.headers else {}
            headers["retry-after-ms"] = str(math.ceil(refusal.retry_after * 1000))
            headers["retry-after"] = str(math.ceil(refusal.retry_after))
            status, _, payload = _error(429, refusal.limit, refusal.message)
            return status, headers, payload
        task, turns = _script_view(body["messages"])
        answer = self.script(task, turns, self._rng)
        output = min(answer.output_tokens, max_output)
        try:
            await asyncio.sleep(self.latency.of(output))
        except BaseException:
            meter.abandon(loop.time())
            raise
        meter.finish(max_output, input_tokens, output, loop.time())
        headers = meter.headers(loop.time()) if self.headers else {}
        completion = _completion(str(body.get("model", "")), answer, turns, input_tokens, output)
        return 200, headers, json.dumps(completion).encode()


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
    line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3:
        raise ValueError("bad request line")
    length = 0
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    return parts[1], await reader.readexactly(length)


def _response_bytes(status: int, headers: dict[str, str], payload: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += ["content-type: application/json", f"content-length: {len(payload)}", "", ""]
    return "\r\n".join(lines).encode("latin-1") + payload


def _error(status: int, kind: str, message: str) -> tuple[int, dict[str, str], bytes]:
    code = "rate_limit_exceeded" if status == 429 else kind
    payload = {"error": {"message": message, "type": kind, "code": code}}
    return status, {}, json.dumps(payload).encode()


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _wire_chars(body: JSONObject) -> int:
    """What the simulated tokenizer reads: message contents, call arguments, tool schemas."""
    chars = len(json.dumps(body.get("tools") or []))
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        chars += len(content) if isinstance(content, str) else 0
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                chars += len(str(function.get("name", ""))) + len(str(function.get("arguments")))
    return chars


def _script_view(messages: list[JSONValue]) -> tuple[str, int]:
    task, turns = "", 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if message.get("role") == "user" and not task and isinstance(content, str):
            task = content
        turns += message.get("role") == "assistant"
    return task, turns


def _completion(
    model: str, answer: Answer, turn: int, input_tokens: int, output: int
) -> JSONObject:
    message: JSONObject = {"role": "assistant", "content": answer.text or None}
    if answer.call is not None:
        name, arguments = answer.call
        message["tool_calls"] = [
            {
                "id": f"call_{turn}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
    elif not answer.text:
        message["content"] = "done"
    return {
        "id": f"chatcmpl-{turn}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if answer.call else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output,
            "total_tokens": input_tokens + output,
        },
    }
