"""The runtime's views fold a session the first time page by page, never the whole log at
once, and fold it exactly as a full fold does."""

from __future__ import annotations

from counting import CountingStore
from tether.events import SessionCreated, UserMessage
from tether.fold import fold
from tether.messages import user
from tether.runtime.sessions import PAGE, Views
from tether.testing.store_conformance import make_events


async def test_a_long_session_is_folded_a_page_at_a_time() -> None:
    store = CountingStore()
    payloads = [SessionCreated(model="m"), *(UserMessage(user(f"m{i}")) for i in range(4 * PAGE))]
    await store.append("s", make_events("s", 1, payloads), 0)
    folder = await Views(store).get("s")
    assert max(store.reads) == PAGE and sum(store.reads) == 4 * PAGE + 1
    transcript, view = fold(await store.read("s"))
    assert folder.transcript() == transcript and folder.view() == view
