"""`recovery.closing`: every closer appends what is open as one batch. A process that dies
while closing leaves the session as it was or closed whole, never half closed (a call
answered and its turn still open, or a turn closed and its session not ended)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pytest

from tether.events import (
    Event,
    ModelRequested,
    ModelResponded,
    SessionCreated,
    SessionEnded,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UserMessage,
)
from tether.fold import Folder
from tether.loop import close_canceled_turn
from tether.messages import ToolCall, assistant, user
from tether.recovery import UNKNOWN_EFFECT, closing
from tether.runtime.worker import Worker
from tether.session.log import SessionLog
from tether.store.base import Lease
from tether.store.memory import MemoryStore

CALLS = (ToolCall("c1", "charge", {"amount": 5}), ToolCall("c2", "notify", {}))


async def session_with_open_calls(store: MemoryStore, sid: str = "s1") -> SessionLog:
    """A turn whose answer asked for two calls: c1 started (a write), c2 not yet."""
    log = SessionLog(store, sid)
    await log.append(SessionCreated("m"), UserMessage(user("pay")))
    await log.append(ModelRequested("m", "h", 1))
    await log.append(ModelResponded(assistant("", CALLS)), ToolStarted("c1", "charge", "write"))
    return log


def fold_of(events: Sequence[Event]) -> Folder:
    return Folder().apply_all(events)


async def test_a_cancel_answers_each_open_call_and_closes_turn_and_session_in_one_batch() -> None:
    log = await session_with_open_calls(MemoryStore())
    batch = closing(log.folder, "interrupted", "stopped", calls="canceled", end="canceled")
    assert [type(p) for p in batch] == [ToolFinished, ToolFinished, TurnEnded, SessionEnded]
    c1, c2 = batch[0], batch[1]
    assert isinstance(c1, ToolFinished) and isinstance(c2, ToolFinished)
    # c1 is a write no run of the closer's was running (its own calls are answered as they
    # stop): a gone runner started it, so it may have happened.
    assert (c1.call_id, c1.outcome, c2.call_id, c2.outcome) == (
        "c1",
        "unknown_effect",
        "c2",
        "canceled",
    )
    assert c1.content == UNKNOWN_EFFECT and "before it ran" in c2.content


async def test_an_abandoned_started_call_is_answered_unknown_effect_never_canceled() -> None:
    log = await session_with_open_calls(MemoryStore())
    batch = closing(log.folder, "error", "cannot run", calls="abandoned", end="failed")
    c1, c2 = batch[0], batch[1]
    assert isinstance(c1, ToolFinished) and isinstance(c2, ToolFinished)
    assert (c1.outcome, c1.content) == ("unknown_effect", UNKNOWN_EFFECT)
    assert (c2.outcome, c2.content) == ("canceled", "The call never ran: cannot run")
    assert batch[-1] == SessionEnded("failed", "cannot run")


async def test_a_turn_that_stops_for_approvals_keeps_its_calls_open() -> None:
    log = await session_with_open_calls(MemoryStore())
    assert closing(log.folder, "awaiting_approval", "a call waits") == [
        TurnEnded("awaiting_approval", "a call waits")
    ]


async def test_an_ended_session_has_nothing_to_close_and_an_idle_one_only_ends() -> None:
    store = MemoryStore()
    log = await session_with_open_calls(store)
    await log.append(*closing(log.folder, "interrupted", calls="canceled"))
    assert not log.folder.turn_open
    assert closing(log.folder, "x", end="canceled", end_detail="bye") == [
        SessionEnded("canceled", "bye")
    ]
    await log.append(SessionEnded("canceled", "bye"))
    assert closing(log.folder, "x", calls="canceled", end="failed") == []


class DiesAfter(MemoryStore):
    """A store whose process dies (the append raises, nothing of it written) after
    `appends` more appends have landed."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: int | None = None

    async def append(
        self,
        session_id: str,
        events: Sequence[Event],
        expected_seq: int,
        lease: Lease | None = None,
        **catalog: Any,  # the row and the admission, passed on as they came
    ) -> None:
        if self.appends is not None:
            if self.appends == 0:
                raise SystemExit("the process died here")
            self.appends -= 1
        await super().append(session_id, events, expected_seq, lease, **catalog)


def whole_or_untouched(before: Folder, events: Sequence[Event]) -> None:
    after = fold_of(events)
    if after.last_seq == before.last_seq:
        return  # untouched: the next runner finds the same open work
    assert after.terminal, "the close landed in part: the session is not ended"
    assert not after.turn_open
    answered = {e.payload.call_id for e in events if isinstance(e.payload, ToolFinished)}
    assert answered == {call.id for call in before.open_calls}


@pytest.mark.parametrize("survives", [0, 1, 2, 3])
async def test_a_cancel_that_dies_part_way_leaves_nothing_half_closed(survives: int) -> None:
    store = DiesAfter()
    log = await session_with_open_calls(store)
    before = fold_of(await store.read("s1"))
    store.appends = survives
    with contextlib.suppress(SystemExit):
        await close_canceled_turn(log, "interrupted", end_session=True)
    store.appends = None
    whole_or_untouched(before, await store.read("s1"))


@pytest.mark.parametrize("survives", [0, 1, 2, 3])
async def test_a_worker_failing_a_session_dies_part_way_and_leaves_nothing_half_closed(
    survives: int,
) -> None:
    store = DiesAfter()
    await session_with_open_calls(store)
    before = fold_of(await store.read("s1"))
    worker = Worker(store)
    store.appends = survives
    with contextlib.suppress(SystemExit):
        await worker._fail("s1", "the runner cannot be built")
    store.appends = None
    events = await store.read("s1")
    whole_or_untouched(before, events)
    answers = {e.payload.call_id: e.payload for e in events if isinstance(e.payload, ToolFinished)}
    if answers:  # c1 had started: its effects are unknown, never "it did not run"
        assert (answers["c1"].outcome, answers["c1"].content) == ("unknown_effect", UNKNOWN_EFFECT)
