"""The session log's appends go one at a time (parallel tool calls finish together), in
arrival order, and a cancelled waiter neither loses nor blocks anyone's append."""

from __future__ import annotations

import asyncio

import pytest

from tether.events import Event, SessionCreated, ToolStarted, UserMessage
from tether.messages import user
from tether.session.log import SessionLog, Turnstile
from tether.store import MemoryStore


class SlowStore(MemoryStore):
    """A memory store whose appends suspend, so appends of one log overlap."""

    async def append(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def, override]
        await asyncio.sleep(0.005)
        await super().append(*args, **kwargs)


async def test_overlapping_appends_are_numbered_in_arrival_order_without_conflicts() -> None:
    store = SlowStore()
    log = SessionLog(store, "s")
    await log.append(SessionCreated("m"), UserMessage(user("go")))
    await asyncio.gather(*(log.append(ToolStarted(f"c{i}", "t")) for i in range(5)))
    events: list[Event] = await store.read("s")
    assert [e.seq for e in events] == list(range(1, 8))
    assert [e.payload.call_id for e in events[2:]] == [f"c{i}" for i in range(5)]  # type: ignore[union-attr]
    assert log.folder.last_seq == 7


async def test_a_cancelled_waiter_leaves_the_turnstile_to_the_others() -> None:
    gate = Turnstile()
    assert gate.enter()
    order: list[str] = []

    async def take(name: str) -> None:
        await gate.wait()
        order.append(name)
        gate.leave()

    first = asyncio.create_task(take("first"))
    second = asyncio.create_task(take("second"))
    third = asyncio.create_task(take("third"))
    await asyncio.sleep(0)
    second.cancel()
    gate.leave()
    await asyncio.gather(first, third)
    with pytest.raises(asyncio.CancelledError):
        await second
    assert order == ["first", "third"]
    assert gate.enter()  # free again


async def test_a_waiter_cancelled_as_it_is_handed_the_turn_passes_it_on() -> None:
    gate = Turnstile()
    assert gate.enter()
    handed = asyncio.create_task(gate.wait())
    after = asyncio.create_task(gate.wait())
    await asyncio.sleep(0)
    gate.leave()  # hands over to `handed`...
    handed.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await handed
    await asyncio.wait_for(after, 1)  # the turn went on to the next waiter
    gate.leave()
    assert gate.enter()
