"""Steering with a fold the caller keeps current (`Known`, a runtime's views) reads only the
events after it, never the whole log, and decides exactly as a full read would."""

from __future__ import annotations

import pytest

from counting import CountingStore
from tether.errors import IdempotencyConflict, UsageError
from tether.events import ApprovalDecided, ApprovalRequested, SessionCreated, UserMessage
from tether.messages import user
from tether.runtime.sessions import Views
from tether.session import control
from tether.store import MemoryStore
from tether.testing.store_conformance import make_events


async def _long_session(store: MemoryStore, messages: int = 3_000) -> None:
    payloads = [SessionCreated(model="m"), *(UserMessage(user(f"m{i}")) for i in range(messages))]
    await store.append("s", make_events("s", 1, payloads), 0)


async def test_a_send_with_a_current_fold_reads_no_log() -> None:
    store = CountingStore()
    await _long_session(store)
    views = Views(store)
    await views.get("s")
    store.reads.clear()
    assert await control.send_message(store, "s", "hello", "k1", known=views.known("s"))
    assert store.events_read == 0
    assert (await views.get("s")).last_seq == 3_002
    store.reads.clear()
    # The retry finds its key in the fold's keyed events, and still reads nothing.
    assert not await control.send_message(store, "s", "hello", "k1", known=views.known("s"))
    with pytest.raises(IdempotencyConflict):
        await control.send_message(store, "s", "other", "k1", known=views.known("s"))
    assert store.events_read == 0
    assert await store.last_seq("s") == 3_002


async def test_a_send_with_a_stale_fold_reads_only_the_news_and_finds_its_key_there() -> None:
    store = CountingStore()
    await _long_session(store)
    views = Views(store)
    await views.get("s")
    stale = views.known("s")
    assert await control.send_message(store, "s", "hello", "k1")  # another process, say
    store.reads.clear()
    assert not await control.send_message(store, "s", "hello", "k1", known=stale)
    assert store.events_read == 1
    assert await store.last_seq("s") == 3_002


async def test_steering_never_changes_the_keepers_fold() -> None:
    store = MemoryStore()
    await _long_session(store, 3)
    views = Views(store)
    folder = await views.get("s")
    messages = list(folder.messages)
    await control.send_message(store, "s", "hello", known=views.known("s"))
    await control.request_stop(store, "s", "session", known=views.known("s"))
    assert folder.last_seq == 4 and folder.messages == messages and not folder.terminal
    assert (await views.get("s")).terminal


async def test_a_decision_with_a_stale_fold_sees_the_call_asked_for_since() -> None:
    store = CountingStore()
    await _long_session(store, 3)
    views = Views(store)
    await views.get("s")
    stale = views.known("s")
    await store.append("s", make_events("s", 5, [ApprovalRequested("c1", "rm")], tag="w"), 4)
    store.reads.clear()
    await control.decide(store, "s", "c1", True, known=stale)
    assert store.events_read == 1  # the approval request, and nothing before it
    assert (await views.get("s")).decisions == {"c1": ApprovalDecided("c1", True, None)}
    with pytest.raises(UsageError, match="not waiting"):
        await control.decide(store, "s", "c2", True, known=views.known("s"))


async def test_a_session_dropped_from_the_views_is_steered_from_the_whole_log() -> None:
    store = MemoryStore()
    for sid in ("s", "t"):
        await store.append(sid, make_events(sid, 1, [SessionCreated(model="m")]), 0)
    views = Views(store, size=1)
    await views.get("s")
    await views.get("t")
    assert views.known("s") is None and views.known("t") is not None
    assert await control.send_message(store, "s", "hi", "k", known=views.known("s"))
    assert not await control.send_message(store, "s", "hi", "k")
