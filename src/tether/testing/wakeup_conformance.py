"""Store conformance checks for wakeups (`mark_runnable`, `runnable`, `clear_runnable`):
how workers find sessions with work without folding every log. Part of `STORE_CHECKS`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tether.store.base import Store, Wakeup

Check = Callable[[Store], Awaitable[None]]


async def a_marked_session_is_runnable_until_its_mark_is_cleared(store: Store) -> None:
    assert await store.runnable() == []
    await store.mark_runnable("s1")
    await store.mark_runnable("s1")  # marking twice still lists it once
    listed = await store.runnable()
    assert [w.session_id for w in listed] == ["s1"], listed
    assert await store.clear_runnable(listed[0])
    assert await store.runnable() == []
    assert not await store.clear_runnable(listed[0]), "a mark was cleared twice"


async def a_mark_made_after_reading_survives_the_clear(store: Store) -> None:
    await store.mark_runnable("s1")
    seen = (await store.runnable())[0]
    await store.mark_runnable("s1")  # e.g. a message sent while the worker ran the turn
    assert not await store.clear_runnable(seen), "a newer mark was cleared with an old token"
    again = await store.runnable()
    assert [w.session_id for w in again] == ["s1"] and again[0].token > seen.token
    assert await store.clear_runnable(again[0])
    assert await store.runnable() == []


async def runnable_sessions_come_oldest_mark_first_and_within_the_limit(store: Store) -> None:
    for sid in ("s3", "s1", "s2"):
        await store.mark_runnable(sid)
        await asyncio.sleep(0.002)  # distinct mark times on a coarse clock
    await store.mark_runnable("s3")  # a new mark keeps the session's place
    assert [w.session_id for w in await store.runnable()] == ["s3", "s1", "s2"]
    assert [w.session_id for w in await store.runnable(limit=2)] == ["s3", "s1"]


async def a_session_under_a_live_lease_is_not_runnable_until_it_expires(store: Store) -> None:
    await store.mark_runnable("s1")
    await store.mark_runnable("s2")
    held = await store.claim("s1", "worker-a", ttl=30)
    short = await store.claim("s2", "worker-b", ttl=0.05)
    assert await store.runnable() == []
    await asyncio.sleep(0.1)  # s2's worker died: its session becomes runnable again
    assert [w.session_id for w in await store.runnable()] == ["s2"]
    await store.release(held)
    assert {w.session_id for w in await store.runnable()} == {"s1", "s2"}
    assert short.generation >= 1


async def clearing_an_unknown_mark_is_not_an_error(store: Store) -> None:
    assert not await store.clear_runnable(Wakeup("nobody", 1))


WAKEUP_CHECKS: list[Check] = [
    a_marked_session_is_runnable_until_its_mark_is_cleared,
    a_mark_made_after_reading_survives_the_clear,
    runnable_sessions_come_oldest_mark_first_and_within_the_limit,
    a_session_under_a_live_lease_is_not_runnable_until_it_expires,
    clearing_an_unknown_mark_is_not_an_error,
]
