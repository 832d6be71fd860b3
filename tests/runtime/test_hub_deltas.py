"""A live stream yields each delta after the event it follows: a worker's deltas come straight
from its run, its events through the store, and a delta that arrives before the event that
opened its call (the call's request, or a retry's failure) waits for that event, so a reader
never shows a retried call's new output before it hears of the retry."""

from __future__ import annotations

from tether.events import Event, UserMessage
from tether.messages import user
from tether.providers.base import Delta
from tether.runtime.hub import EventHub, stream_events
from tether.store import MemoryStore
from tether.testing.store_conformance import make_events


async def _not_ended() -> tuple[bool, int]:
    return False, 0


def _said(item: Event | Delta) -> str:
    if isinstance(item, Delta):
        return f"delta {item.text}"
    return f"event {item.seq}"


async def test_a_delta_published_before_its_event_reached_the_hub_waits_for_it() -> None:
    store = MemoryStore()
    await store.append("s", make_events("s", 1, [UserMessage(user("go"))]), 0)
    hub = EventHub(store, interval=3600.0)  # only pokes bring news: the test says when
    stream = stream_events(hub, "s", 0, _not_ended, deltas=True)
    seen = [_said(await anext(stream))]
    hub.publish_delta("s", Delta("text", "before"))  # the call opened by event 1
    seen.append(_said(await anext(stream)))
    # Event 2 (a retry's failure, say) is committed and said to the hub; the next attempt's
    # delta reaches the stream before the hub has read event 2 from the store.
    (second,) = make_events("s", 2, [UserMessage(user("again"))])
    await store.append("s", [second], 1)
    hub.committed(second)
    hub.publish_delta("s", Delta("text", "after"))
    seen += [_said(await anext(stream)), _said(await anext(stream))]
    await stream.aclose()
    await hub.close()
    assert seen == ["event 1", "delta before", "event 2", "delta after"]


async def test_the_hub_keeps_no_seq_of_a_session_nobody_watches() -> None:
    store = MemoryStore()
    hub = EventHub(store, interval=3600.0)
    (event,) = make_events("s", 1, [UserMessage(user("go"))])
    hub.committed(event)
    hub.publish_delta("s", Delta("text", "lost"))  # no subscriber: nothing is kept
    assert hub.subscribers == 0 and not hub._committed
    await hub.close()
