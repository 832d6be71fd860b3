"""Store conformance checks for wakeups (`mark_runnable`, `runnable`, `clear_runnable`, and
`defer` with `queued`): how workers find sessions with work without folding every log, and how
a session is kept back for a while. Part of `STORE_CHECKS`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tether.errors import UsageError
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


async def a_deferred_mark_is_not_runnable_until_its_time(store: Store) -> None:
    await store.mark_runnable("s1")
    await store.mark_runnable("s2")
    await store.defer("s1", 0.3, "backoff")
    assert [w.session_id for w in await store.runnable()] == ["s2"]
    await asyncio.sleep(0.4)
    # Its time has come: it is back, in its old place (oldest mark first).
    assert [w.session_id for w in await store.runnable()] == ["s1", "s2"]
    assert await store.queued("s1") is None


async def queued_says_until_when_and_why_a_session_is_kept_back(store: Store) -> None:
    assert await store.queued("s1") is None  # not marked
    await store.mark_runnable("s1")
    assert await store.queued("s1") is None  # marked, runnable now
    # The store's clock, whatever the caller's: a lease taken now expires by it too.
    probe = await store.claim("probe", "worker-a", ttl=60)
    await store.defer("s1", 60, "parked")
    queued = await store.queued("s1")
    assert queued is not None, "a deferred mark was not reported"
    assert queued.session_id == "s1" and queued.reason == "parked"
    assert abs(queued.not_before - probe.expires) < 5, (queued, probe)
    await store.defer("s1", 120, "backoff")  # a later deferral replaces the earlier one
    later = await store.queued("s1")
    assert later is not None and later.reason == "backoff"
    assert 50 < later.not_before - queued.not_before < 70, (queued, later)
    await store.defer("s1", 0, "backoff")  # 0 lifts it
    assert await store.queued("s1") is None
    assert [w.session_id for w in await store.runnable()] == ["s1"]


async def a_mark_during_a_deferral_keeps_it_deferred_but_bumps_the_token(store: Store) -> None:
    await store.mark_runnable("s1")
    seen = (await store.runnable())[0]
    await store.defer("s1", 0.3, "parked")
    await store.mark_runnable("s1")  # e.g. a message sent to the parked session
    assert await store.runnable() == [], "a new mark let a parked session run sooner"
    queued = await store.queued("s1")
    assert queued is not None and queued.reason == "parked"
    await asyncio.sleep(0.4)
    again = await store.runnable()
    assert [w.session_id for w in again] == ["s1"] and again[0].token > seen.token
    assert not await store.clear_runnable(seen), "the mark made during the deferral was lost"
    assert await store.clear_runnable(again[0])
    assert await store.runnable() == []


async def deferring_an_unmarked_session_marks_it(store: Store) -> None:
    await store.defer("s1", 0.2, "parked")
    assert await store.runnable() == []
    queued = await store.queued("s1")
    assert queued is not None and queued.reason == "parked"
    await asyncio.sleep(0.3)
    listed = await store.runnable()
    assert [w.session_id for w in listed] == ["s1"]
    assert await store.clear_runnable(listed[0])
    assert await store.runnable() == [] and await store.queued("s1") is None


async def clearing_a_deferred_mark_drops_its_deferral(store: Store) -> None:
    await store.mark_runnable("s1")
    seen = (await store.runnable())[0]
    await store.defer("s1", 60, "backoff")  # the token stays: the reader may still clear it
    assert await store.clear_runnable(seen)
    assert await store.queued("s1") is None
    await store.mark_runnable("s1")  # a new mark starts undeferred
    assert [w.session_id for w in await store.runnable()] == ["s1"]


async def a_deferral_of_a_bad_length_or_reason_is_refused(store: Store) -> None:
    await store.mark_runnable("s1")
    for seconds, reason in (
        (-1.0, "parked"),
        (float("nan"), "parked"),
        (float("inf"), "parked"),
        (5.0, "later"),
    ):
        try:
            await store.defer("s1", seconds, reason)  # type: ignore[arg-type]
        except UsageError:
            pass
        else:
            raise AssertionError(f"defer({seconds!r}, {reason!r}) was accepted")
    assert await store.queued("s1") is None
    assert [w.session_id for w in await store.runnable()] == ["s1"]


WAKEUP_CHECKS: list[Check] = [
    a_marked_session_is_runnable_until_its_mark_is_cleared,
    a_mark_made_after_reading_survives_the_clear,
    runnable_sessions_come_oldest_mark_first_and_within_the_limit,
    a_session_under_a_live_lease_is_not_runnable_until_it_expires,
    clearing_an_unknown_mark_is_not_an_error,
    a_deferred_mark_is_not_runnable_until_its_time,
    queued_says_until_when_and_why_a_session_is_kept_back,
    a_mark_during_a_deferral_keeps_it_deferred_but_bumps_the_token,
    deferring_an_unmarked_session_marks_it,
    clearing_a_deferred_mark_drops_its_deferral,
    a_deferral_of_a_bad_length_or_reason_is_refused,
]
