"""An event stream's bytes: the frames of events and deltas, and `Frames`, which turns a
runtime's stream into chunks for the response. What the stream carries and when it ends is
`app`'s; here, only how frames are batched and kept bounded.

One pump task per stream reads the runtime's generator and renders frames; the response
takes every frame ready at once, so the events a worker committed together (a step's
answer, the turn's end) reach the client in one write rather than one each. The pump
stops once `BATCH` frames wait: a client that reads slowly holds at most that many.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from tether.events import Event
from tether.providers.base import Delta
from tether.server.summary import summary_json

FIRST = asyncio.FIRST_COMPLETED
BATCH = 64  # frames a stream holds ready for a client that has not taken them yet
END = b'event: end\ndata: {"reason":"session_ended"}\n\n'
TIMED_OUT = b'event: end\ndata: {"reason":"timeout"}\n\n'


def sse_frame(event: Event, brief: bool = False) -> bytes:
    """`brief`: the event's summary (`summary`) as its data, not the whole event."""
    data = summary_json(event) if brief else event.canonical()
    return f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n".encode()


def delta_frame(delta: Delta) -> bytes:
    """No `id`: a delta is not in the log, so a reconnecting client resumes by event seq."""
    data = json.dumps({"kind": delta.kind, "text": delta.text, "call_id": delta.call_id})
    return f"event: delta\ndata: {data}\n\n".encode()


class Frames:
    """The frames of `source` (events and deltas), rendered by a pump task as they come;
    `take` waits for some and returns all that are ready, joined. After the last, the `end`
    frame (its reason: the session ended, or the stream's `timeout`); then `take` returns
    b"". `counted` is called once per event rendered."""

    def __init__(
        self,
        source: AsyncGenerator[Event | Delta, None],
        brief: bool,
        counted: Callable[[], None],
    ) -> None:
        self._source = source
        self._brief = brief
        self._counted = counted
        self._ready: list[bytes] = []
        self._wake = asyncio.Event()  # frames are ready, or the pump ended
        self._room = asyncio.Event()  # the client took what was ready
        self._room.set()
        self._pump = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            async for item in self._source:
                if isinstance(item, Delta):
                    self._ready.append(delta_frame(item))
                else:
                    self._counted()
                    self._ready.append(sse_frame(item, self._brief))
                self._wake.set()
                if len(self._ready) >= BATCH:
                    self._room.clear()
                    await self._room.wait()
            self._ready.append(END)
        except TimeoutError:  # the client's `timeout`: it may reconnect from its last id
            self._ready.append(TIMED_OUT)
        finally:
            self._wake.set()

    async def take(self) -> bytes:
        """Every frame ready, at once (waiting for one); b"" once the stream has ended.
        The pump's failure is raised here."""
        while not self._ready:
            if self._pump.done():
                self._pump.result()
                return b""
            self._wake.clear()
            await self._wake.wait()
        ready, self._ready = self._ready, []
        self._room.set()
        return b"".join(ready)

    async def aclose(self) -> None:
        self._pump.cancel()
        with contextlib.suppress(BaseException):
            await self._pump
        await self._source.aclose()


async def chunks(
    frames: Frames, closing: asyncio.Future[None], keepalive: float
) -> AsyncIterator[bytes]:
    """The stream's chunks: an opening comment, then the frames as they come, a keepalive
    comment after each quiet `keepalive` seconds. Ends after the `end` frame, or at once
    without one when `closing` is done (the client reconnects elsewhere from its last id)."""
    yield b": tether event stream\n\n"
    while True:
        taking = asyncio.ensure_future(frames.take())
        try:
            either: set[asyncio.Future[Any]] = {taking, closing}
            while not (await asyncio.wait(either, timeout=keepalive, return_when=FIRST))[0]:
                yield b": keepalive\n\n"
            if closing.done():
                return
            chunk = taking.result()
        finally:
            if not taking.done():
                taking.cancel()
                with contextlib.suppress(BaseException):
                    await taking
        if not chunk:
            return
        yield chunk
