"""Invariants every committed session log must keep, checked after any run in any test.

`assert_log_invariants(events)` reads only the events: numbering, calls answered exactly
once, one `turn.ended` per turn, and that successive views obey `validate_observation`.
It knows nothing of how a test produced the log.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TypeVar

from tether.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    ModelFailed,
    ModelRequested,
    ModelResponded,
    SessionCreated,
    SessionEnded,
    SessionForked,
    ThreadFinished,
    ThreadStarted,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UserMessage,
)
from tether.fold import Folder, fold
from tether.state import validate_observation
from tether.store.base import Store

P = TypeVar("P")

# Folding every prefix afresh is quadratic; past this many events only the incremental views
# are compared with each other and the full fold with the last one.
_FULL_PREFIX_FOLDS = 300


def assert_log_invariants(events: Sequence[Event], *, turn_closed: bool = True) -> None:
    """Raise AssertionError naming the first broken invariant of one session's log.

    `turn_closed=False` accepts a log whose last turn is still open (a crashed runner)."""
    assert events, "the log is empty"
    _check_envelope(events)
    threads = _by_thread(events)
    for thread, own in threads.items():
        _check_calls(own, thread)
        # A decision on a thread below reopens this one's turn too (it waits on that call).
        below = f"{thread}/" if thread else ""
        reopening = [
            e
            for e in events
            if e.thread == thread
            or (e.thread.startswith(below) and e.thread and isinstance(e.payload, ApprovalDecided))
        ]
        _check_turns(reopening, turn_closed, thread)
    _check_threads(events, threads, turn_closed)
    for thread in threads:
        _check_views(events, thread)


def _by_thread(events: Sequence[Event]) -> dict[str, list[Event]]:
    """Each thread's own events, the main thread's first, the others in start order."""
    out: dict[str, list[Event]] = {"": []}
    for event in events:
        out.setdefault(event.thread, []).append(event)
    return out


def _check_threads(
    events: Sequence[Event], threads: dict[str, list[Event]], turn_closed: bool
) -> None:
    """A sub-agent's thread opens with `thread.started`, under a thread that started first
    and for a call of it that was started; it finishes at most once, as its last event;
    and it finishes before the parent's call is answered (its answer is the result)."""
    position = {e.seq: i for i, e in enumerate(events)}
    for thread, own in threads.items():
        if not thread:
            continue
        first = own[0].payload
        assert isinstance(first, ThreadStarted) and first.thread == thread, (
            f"thread {thread} opens with {own[0].type}"
        )
        parent = thread.rpartition("/")[0]
        assert parent in threads, f"thread {thread} has no parent thread {parent!r}"
        parent_events = threads[parent]
        assert parent_events[0].seq < own[0].seq, f"thread {thread} starts before its parent"
        starts = [
            e.seq
            for e in parent_events
            if isinstance(e.payload, ToolStarted)
            and e.payload.call_id == first.parent_call_id
            and e.seq < own[0].seq
        ]
        assert starts, f"thread {thread} runs call {first.parent_call_id}, never started"
        finished = [e for e in own if isinstance(e.payload, ThreadFinished)]
        assert len(finished) <= 1, f"thread {thread} finished {len(finished)} times"
        if finished:
            assert finished[0] is own[-1], f"thread {thread} has events after thread.finished"
        answers = [
            e
            for e in parent_events
            if isinstance(e.payload, ToolFinished)
            and e.payload.call_id == first.parent_call_id
            and e.seq > starts[-1]
        ]
        if answers and answers[0].payload.outcome in ("ok", "error") and turn_closed:
            assert finished and position[finished[0].seq] < position[answers[0].seq], (
                f"call {first.parent_call_id} was answered before thread {thread} finished"
            )


def _check_envelope(events: Sequence[Event]) -> None:
    session_id = events[0].session_id
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(events) + 1)), f"seq is not dense from 1: {seqs}"
    assert all(e.session_id == session_id for e in events), "events of two sessions in one log"
    ids = Counter(e.id for e in events)
    assert max(ids.values()) == 1, f"event ids repeat: {[i for i, n in ids.items() if n > 1]}"
    assert isinstance(events[0].payload, SessionCreated), f"the log opens with {events[0].type}"
    created = [e.seq for e in events if isinstance(e.payload, SessionCreated)]
    assert created == [1], f"session.created at seqs {created}"
    ended = [e.seq for e in events if isinstance(e.payload, SessionEnded)]
    assert len(ended) <= 1, f"session.ended at seqs {ended}"
    if ended:
        assert ended[0] == events[-1].seq, f"events follow session.ended (seq {ended[0]})"


def _check_calls(events: Sequence[Event], thread: str = "") -> None:
    """Every call of an executable answer is answered exactly once, before the next model
    request; only a call still waiting for a decision may stay unanswered."""
    asked: dict[str, int] = {}  # call id -> seq of the answer holding it
    finished: Counter[str] = Counter()
    started_after_finish: list[str] = []
    waiting: list[str] = []  # calls of the current answer with no result yet
    for event in events:
        p = event.payload
        if isinstance(p, ModelResponded) and not p.incomplete:
            assert not waiting, f"seq {event.seq}: a new answer while calls {waiting} are open"
            for call in p.message.tool_calls:
                assert call.id not in asked, f"seq {event.seq}: call id {call.id} reused"
                asked[call.id] = event.seq
                waiting.append(call.id)
        elif isinstance(p, ModelRequested):
            assert not waiting, f"seq {event.seq}: model asked again while calls {waiting} are open"
        elif isinstance(p, ToolStarted):
            assert p.call_id in asked, f"seq {event.seq}: tool.started for unknown call {p.call_id}"
            if finished[p.call_id]:
                started_after_finish.append(p.call_id)
        elif isinstance(p, ToolFinished):
            assert p.call_id in asked, (
                f"seq {event.seq}: tool.finished for unknown call {p.call_id}"
            )
            finished[p.call_id] += 1
            if p.call_id in waiting:
                waiting.remove(p.call_id)
        elif isinstance(p, ApprovalRequested | ApprovalDecided):
            assert p.call_id in asked, f"seq {event.seq}: {event.type} for unknown call {p.call_id}"
    twice = sorted(c for c, n in finished.items() if n > 1)
    assert not twice, f"calls answered more than once: {twice}"
    assert not started_after_finish, f"calls started after their answer: {started_after_finish}"
    _, view = fold(events, thread)
    unanswered = set(waiting) - set(view.pending_approvals)
    assert not unanswered, f"calls never answered: {sorted(unanswered)}"


def _check_turns(events: Sequence[Event], turn_closed: bool, thread: str = "") -> None:
    """A user message (or a decision that makes the session runnable, or a handoff's
    conversation) opens a turn; exactly one `turn.ended` closes it, and no model or tool
    work happens outside an open turn."""
    open_turn = False
    for event in events:
        p = event.payload
        if isinstance(p, ThreadStarted) and p.history:
            open_turn = True
        elif isinstance(p, UserMessage):
            assert not open_turn, f"seq {event.seq}: user.message while a turn is open"
            open_turn = True
        elif isinstance(p, ApprovalDecided):
            open_turn = True
        elif isinstance(p, TurnEnded):
            assert open_turn, f"seq {event.seq}: turn.ended ({p.stop_reason}) with no open turn"
            assert p.stop_reason, f"seq {event.seq}: turn.ended without a stop reason"
            open_turn = False
        elif isinstance(p, ModelRequested | ModelResponded | ModelFailed | ToolStarted):
            assert open_turn, f"seq {event.seq}: {event.type} outside an open turn"
    if turn_closed:
        assert not open_turn, "the last turn has no turn.ended"


def _check_views(events: Sequence[Event], thread: str = "") -> None:
    folder = Folder(thread)
    previous = folder.view()
    for k, event in enumerate(events, start=1):
        folder.apply(event)
        current = folder.view()
        # A fork's counters start from zero at its `session.forked`: its own work from there.
        forked = isinstance(event.payload, SessionForked)
        if k > 1 and (not thread or previous.session_id) and not forked:
            validate_observation(previous, current)
        if len(events) <= _FULL_PREFIX_FOLDS or k == len(events):
            transcript, view = fold(events[:k], thread)
            assert view == current, f"incremental and full fold disagree after seq {k}"
            assert transcript.canonical() == folder.transcript().canonical(), (
                f"incremental and full transcripts disagree after seq {k}"
            )
        previous = current


async def read_checked(store: Store, session_id: str, *, turn_closed: bool = True) -> list[Event]:
    """The committed events of a session, after checking every invariant above."""
    events = await store.read(session_id)
    assert_log_invariants(events, turn_closed=turn_closed)
    return events


def payloads(events: Sequence[Event], kind: type[P]) -> list[P]:
    """The payloads of one event type, in log order."""
    return [e.payload for e in events if isinstance(e.payload, kind)]


def kinds(events: Sequence[Event]) -> list[str]:
    """The event types, in log order."""
    return [e.type for e in events]
