"""A session's setup event: what it runs with, as its log says.

A session's setup is its `session.created` (seq 1), or, for a fork, its `session.forked`: the
first event of its own, right after the prefix it shares with its parent (whose
`session.created` is the parent's setup, not the fork's). Everything that rebuilds a runner or
reads a session's tags from its log reads it here.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.events import Event, SessionCreated, SessionForked
from tether.store.base import Store

Setup = SessionCreated | SessionForked


async def setup_event(store: Store, session_id: str) -> Event | None:
    """The event that set the session up; None for a session with no events."""
    link = await store.fork_link(session_id)
    found = await store.read(session_id, 0 if link is None else link.at, limit=1)
    return found[0] if found else None


async def setup_of(store: Store, session_id: str) -> Setup | None:
    """The setup payload; None when the session has none (no events, or a log that does not
    begin with one)."""
    event = await setup_event(store, session_id)
    payload = None if event is None else event.payload
    return payload if isinstance(payload, SessionCreated | SessionForked) else None


def setup_in(events: Sequence[Event]) -> Setup | None:
    """The setup of a whole log already read: its last `session.forked`, else its
    `session.created`."""
    event = setup_event_in(events)
    payload = None if event is None else event.payload
    return payload if isinstance(payload, SessionCreated | SessionForked) else None


def setup_event_in(events: Sequence[Event]) -> Event | None:
    """The setup event of a whole log already read (`setup_in`), with its seq and time: where
    the session's own work begins."""
    for event in reversed(events):
        if not event.thread and isinstance(event.payload, SessionForked):
            return event
    first = events[0] if events else None
    return first if first is not None and isinstance(first.payload, SessionCreated) else None
