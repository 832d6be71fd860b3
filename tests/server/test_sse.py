"""An event stream's frames: what is ready goes out in one chunk, a slow client holds at most
`BATCH` frames, and the stream's end says why."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

from tether.errors import StoreError
from tether.events import Event, UserMessage
from tether.messages import user
from tether.providers.base import Delta
from tether.server.sse import BATCH, END, TIMED_OUT, Frames, chunks, sse_frame
from tether.testing.store_conformance import make_events

EVENTS = make_events("s", 1, [UserMessage(user(f"m{i}")) for i in range(3 * BATCH)])


async def source(
    events: list[Event], then: BaseException | None = None, pulled: list[int] | None = None
) -> AsyncGenerator[Event | Delta, None]:
    for event in events:
        if pulled is not None:
            pulled.append(event.seq)
        yield event
    if then is not None:
        raise then


async def test_events_ready_together_go_out_in_one_chunk() -> None:
    counted: list[None] = []
    frames = Frames(source(EVENTS[:5]), False, lambda: counted.append(None))
    await asyncio.sleep(0)
    assert await frames.take() == b"".join(sse_frame(e) for e in EVENTS[:5]) + END
    assert await frames.take() == b"" and len(counted) == 5
    await frames.aclose()


async def test_a_client_that_does_not_read_holds_at_most_a_batch() -> None:
    pulled: list[int] = []
    frames = Frames(source(EVENTS, pulled=pulled), False, lambda: None)
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(pulled) == BATCH
    first = await frames.take()
    assert first == b"".join(sse_frame(e) for e in EVENTS[:BATCH])
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(pulled) == 2 * BATCH
    await frames.aclose()


@pytest.mark.parametrize(("then", "end"), [(None, END), (TimeoutError(), TIMED_OUT)])
async def test_the_stream_ends_with_its_reason(then: BaseException | None, end: bytes) -> None:
    frames = Frames(source(EVENTS[:1], then), False, lambda: None)
    closing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    got = [chunk async for chunk in chunks(frames, closing, 60)]
    assert got[0].startswith(b":") and b"".join(got[1:]) == sse_frame(EVENTS[0]) + end
    await frames.aclose()


async def test_a_failure_of_the_source_reaches_the_response() -> None:
    frames = Frames(source([], StoreError("closed")), False, lambda: None)
    with pytest.raises(StoreError):
        await frames.take()
    await frames.aclose()


async def test_a_quiet_stream_sends_keepalives_and_closing_ends_it_without_an_end() -> None:
    async def quiet() -> AsyncGenerator[Event | Delta, None]:
        await asyncio.sleep(3600)
        yield EVENTS[0]

    frames = Frames(quiet(), False, lambda: None)
    closing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    got: list[bytes] = []
    async for chunk in chunks(frames, closing, 0.01):
        got.append(chunk)
        if len(got) == 3:
            closing.set_result(None)
    assert got[1:] == [b": keepalive\n\n"] * (len(got) - 1) and END not in b"".join(got)
    await frames.aclose()
