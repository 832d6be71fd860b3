"""A real HTTP server on loopback for the codec tests.

`FakeServer` is a minimal HTTP/1.1 server on asyncio streams: it parses one request per
connection, asks a handler for a `Reply`, and writes it plainly or chunk by chunk (streams).
The dialects it can speak are in `toy_dialects.py`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Json = Any


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Json:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    # When set, the body is sent with chunked transfer, one write (and a pause) per chunk.
    chunks: list[bytes] | None = None
    # Close the connection after the chunks without the final empty chunk.
    cut: bool = False
    # Before writing chunk number `hold_at`, wait for `resume`: the stream stays open, half
    # sent, until the test lets it go on (at most a minute).
    hold_at: int | None = None
    resume: asyncio.Event | None = None
    # More such holds, by chunk number: the test lets each go on in turn.
    holds: dict[int, asyncio.Event] = field(default_factory=dict)
    # Seconds between chunks, as a model's tokens come (0: only a yield to the loop).
    pace: float = 0.0


Handler = Callable[[Received], Reply]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Error",
    529: "Overloaded",
}


class FakeServer:
    """`async with FakeServer(handler) as server:` then point a codec at `server.url`."""

    def __init__(self, handler: Handler, *, keep_alive: bool = False) -> None:
        self.handler = handler
        self.keep_alive = keep_alive
        self.requests: list[Received] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return  # the client closed an idle kept-alive connection
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                received = Received(method, path, headers, body)
                self.requests.append(received)
                try:
                    await self._write(writer, self.handler(received))
                except ConnectionError:
                    return  # the client went away mid-answer (a cancelled call)
                if not self.keep_alive:
                    return
        finally:
            writer.close()

    async def _write(self, writer: asyncio.StreamWriter, reply: Reply) -> None:
        status = f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}\r\n"
        headers = {"connection": "keep-alive" if self.keep_alive else "close", **reply.headers}
        if reply.chunks is None:
            headers["content-length"] = str(len(reply.body))
        else:
            headers["transfer-encoding"] = "chunked"
        writer.write(
            (status + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
        )
        if reply.chunks is None:
            writer.write(reply.body)
        else:
            for i, chunk in enumerate(reply.chunks):
                hold = reply.resume if i == reply.hold_at else reply.holds.get(i)
                if hold is not None:
                    await asyncio.wait_for(hold.wait(), 60)
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
                await asyncio.sleep(reply.pace)
            if not reply.cut:
                writer.write(b"0\r\n\r\n")
        await writer.drain()
