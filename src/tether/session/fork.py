"""Forking a session: a new session whose log is another's up to a point, then its own.

The child references the parent's prefix (`Store.fork`): nothing of it is copied, so a fork
of a 100,000-event session costs what a fork of a 100-event one does. Finding and checking
the fork point reads only what it must:

- the point: an exact seq (`ForkPoint(seq=)`); the start of turn N, after the message that
  opened it (`turn=`), so the child's first request repeats the parent's; the end of turn N
  (`after_turn=`); by default the parent's end (before its `session.ended`, if it ended).
  A turn is found by reading the log from its start up to it; a seq or the end by reading
  back from it only as far as the main thread's last answer.
- the check: a fork point is a commit point. The transcript must be well formed there: no
  call of the main thread without its result (`open_calls="cancel"` answers them instead:
  `canceled` if it never started, `unknown_effect` if it did; never run again), no sub-agent
  thread still running, not past the session's end.

The child's first event is `session.forked`: where it came from, and its whole
configuration (the parent's, with `ForkChanges` applied). Its catalog row is the parent's
task with the child's own state and counters, all zero. Marking it runnable is the caller's
(a runtime's worker can rebuild its runner from `metadata.runner`; an `Agent` session is run
by an `Agent`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from tether.errors import SessionNotFound, UsageError
from tether.events import (
    Event,
    ForkKind,
    ModelResponded,
    SessionCreated,
    SessionEnded,
    SessionForked,
    ToolFinished,
    TurnEnded,
    UserMessage,
    format_time,
)
from tether.fold import Folder
from tether.messages import JSONObject, canonical_json, user
from tether.session.log import new_event_id, new_session_id
from tether.session.origin import Setup, setup_of
from tether.store import catalog
from tether.store.base import ForkLink, Store

OpenCalls = Literal["refuse", "cancel"]
PAGE = 500  # events read at once while looking for a point
# The window's first page, doubled up to PAGE: the last answer is mostly a few events before
# the point, and a long session's page of 500 cost a fork of it twice a short one's.
_FIRST_PAGE = 16

FORKED_BEFORE = "The call was not run: the session was forked before it ran."
FORKED_RUNNING = (
    "The session was forked while this call was running, so its effects are unknown: it may "
    "or may not have happened. It was not repeated. Inspect the current state before "
    "repeating it."
)
# Metadata of the parent's that is not the child's: its start's idempotency key, and the
# experiment tag of a parent that was an experiment's run (its child is no such run). The
# trace id is kept: a fork's spans go on in its parent's trace (its prefix's spans are there).
NOT_INHERITED = frozenset({"idempotency", "experiment"})


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """Where to fork: at most one of `seq`, `turn` and `after_turn`; none: the parent's end."""

    seq: int | None = None
    turn: int | None = None  # the start of turn N: after its opening message
    after_turn: int | None = None  # the end of turn N: its `turn.ended`

    def __post_init__(self) -> None:
        given = [v for v in (self.seq, self.turn, self.after_turn) if v is not None]
        if len(given) > 1:
            raise UsageError("a fork point is one of seq, turn and after_turn")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in given):
            raise UsageError("a fork point's seq or turn is a whole number from 1")

    def describe(self) -> str:
        if self.seq is not None:
            return f"seq {self.seq}"
        if self.turn is not None:
            return f"the start of turn {self.turn}"
        if self.after_turn is not None:
            return f"the end of turn {self.after_turn}"
        return "its end"


class _Keep:
    """A change not given: the parent's value stays (`system`, where None is a value: no
    system prompt)."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()


def merged(metadata: JSONObject, changes: JSONObject) -> JSONObject:
    """The parent's metadata less what a fork never inherits, with `changes` merged over it
    (a None value removes a key)."""
    out = {k: v for k, v in metadata.items() if k not in NOT_INHERITED}
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class ForkChanges:
    """What the child does differently from its parent; None (or, for `system`, leaving it
    out) keeps the parent's. `metadata` is merged over the parent's (a None value removes a
    key)."""

    model: str | None = None
    system: str | None = KEEP
    tools: JSONObject | None = None  # tool name -> schema hash, as `session.created` holds
    limits: JSONObject | None = None
    metadata: JSONObject | None = None

    def apply(
        self, config: SessionCreated | SessionForked
    ) -> tuple[str, str | None, JSONObject, JSONObject, JSONObject]:
        metadata = merged(config.metadata, self.metadata or {})
        return (
            self.model or config.model,
            config.system if self.system is KEEP else self.system,
            dict(config.tools if self.tools is None else self.tools),
            dict(config.limits if self.limits is None else self.limits),
            metadata,
        )


@dataclass(frozen=True, slots=True)
class Forked:
    """A fork made: the child, where it branched off, and what it holds."""

    session_id: str
    parent: str
    at: int  # the parent's seq the child's log shares up to
    parent_last_seq: int  # the parent's last seq when it was forked: `at` < it dropped some
    state: str  # the child's: `pending` (a turn to run) or `idle`
    kind: ForkKind
    answered: tuple[str, ...] = ()  # the open calls the fork answered (`open_calls="cancel"`)


async def fork(
    store: Store,
    parent: str,
    point: ForkPoint = ForkPoint(),
    *,
    changes: ForkChanges = ForkChanges(),
    message: str | None = None,
    kind: ForkKind = "fork",
    open_calls: OpenCalls = "refuse",
    tenant: str | None = None,
    session_id: str | None = None,
    now: float | None = None,
    admit: Callable[[str], Awaitable[None]] | None = None,
) -> Forked:
    """Fork `parent` at `point` into a new session (`session_id`, or a new id). `tenant`: the
    caller's, when it has one: another tenant's session is not found (`SessionNotFound`), as
    one that does not exist. `message`: a user message that opens the child's first turn (or
    joins the open turn of a fork made mid-turn). Refused with `UsageError`, saying why and
    storing nothing, at a point that is not a commit point. `admit`: called with the child's
    state (`pending`: it has a turn to run) before anything is stored; what it raises (a
    tenant's quota refusing another running session) refuses the fork."""
    row = await store.catalog_row(parent)
    if row is None or (tenant is not None and row.tenant != tenant):
        raise SessionNotFound(f"no session {parent}")
    last = row.last_seq
    at = await locate(store, parent, point, last)
    window, from_start = await _window(store, parent, at)
    folder = _fold_window(window, from_start)
    ending = window[-1].payload if window else None
    if isinstance(ending, SessionEnded):
        raise UsageError(
            f"seq {at} of session {parent} is its end (session.ended): fork at seq {at - 1} "
            "or earlier"
        )
    open_now = [c for c in folder.open_calls if c.id not in folder.results]
    running = [n.thread for n in folder.thread_nodes.values() if n.status == "running"]
    if running:
        raise UsageError(
            f"at seq {at} session {parent} has sub-agent threads running "
            f"({', '.join(running)}): fork where they have finished"
        )
    if open_now and open_calls == "refuse":
        names = ", ".join(f"{c.name} ({c.id})" for c in open_now)
        raise UsageError(
            f"at seq {at} session {parent} has calls without results: {names}; fork where "
            "every call has its result (for instance after a turn), or have the fork answer "
            "them (open_calls='cancel', --answer-open)"
        )
    config = await config_of(store, parent)
    model, system, tools, limits, metadata = changes.apply(config)
    child = session_id or new_session_id()
    stamp = format_time(time.time() if now is None else now)
    last_event = window[-1]
    forked = SessionForked(
        parent=parent,
        parent_seq=at,
        parent_event=last_event.id,
        prefix_digest=prefix_digest(parent, last_event),
        model=model,
        system=system,
        tools=tools,
        limits=limits,
        metadata=metadata,
        kind=kind,
    )
    payloads: list[SessionForked | ToolFinished | UserMessage] = [forked]
    for call in open_now:
        started = call.id in folder.started
        payloads.append(
            ToolFinished(
                call.id,
                "unknown_effect" if started else "canceled",
                FORKED_RUNNING if started else FORKED_BEFORE,
            )
        )
    if message is not None:
        payloads.append(UserMessage(user(message)))
    events = [
        Event(child, at + 1 + i, new_event_id(), stamp, payload)
        for i, payload in enumerate(payloads)
    ]
    folder.session_id = child  # the window was read as the parent's
    folder.apply_all(events)
    if admit is not None:
        await admit(folder.state)
    new_row = catalog.row_of(folder, parent=parent)
    if not from_start:  # the window began mid-log: the task is the parent's first message's
        new_row = dataclasses.replace(new_row, task=row.task)
    await store.fork(child, ForkLink(parent, at), events, row=new_row)
    return Forked(
        child,
        parent,
        at,
        last,
        folder.state,
        kind,
        tuple(c.id for c in open_now),
    )


def prefix_digest(parent: str, last: Event) -> str:
    """The digest a `session.forked` records of the prefix it shares: the parent's id, the
    seq and the canonical bytes of the prefix's last event (its id included). Constant cost:
    the log is append-only and ids are unique, so these pin the events before it."""
    body = canonical_json(dataclasses.replace(last, session_id=parent).to_json())
    return hashlib.sha256(f"{parent}\n{last.seq}\n{body}".encode()).hexdigest()


async def config_of(store: Store, session_id: str) -> Setup:
    """The session's configuration: its own first event (after the prefix, for a fork), as
    whoever runs or continues it must read it (a fork's first event is its parent's)."""
    payload = await setup_of(store, session_id)
    if payload is None:
        raise SessionNotFound(f"session {session_id} has no session.created")
    return payload


async def locate(store: Store, parent: str, point: ForkPoint, last: int) -> int:
    """The seq of `point` in session `parent`, whose last seq is `last` (`UsageError`: there
    is no such point); not yet checked as a commit point (`fork` does)."""
    if point.seq is not None:
        if point.seq > last:
            raise UsageError(f"session {parent} ends at seq {last}: there is no seq {point.seq}")
        return point.seq
    if point.turn is None and point.after_turn is None:
        tail = await store.read(parent, last - 1, limit=1) if last else []
        ended = bool(tail) and isinstance(tail[-1].payload, SessionEnded)
        return last - 1 if ended else last
    return await _turn_seq(store, parent, point)


async def _turn_seq(store: Store, parent: str, point: ForkPoint) -> int:
    """Turn N's start (the seq of the main thread's first message after the end of turn
    N - 1) or end (the seq of the main thread's N-th `turn.ended`), read from the start."""
    wanted = point.turn if point.turn is not None else point.after_turn
    assert wanted is not None
    ended, after = 0, 0
    while True:
        page = await store.read(parent, after, limit=PAGE)
        for event in page:
            if event.thread:
                continue
            payload = event.payload
            if isinstance(payload, TurnEnded):
                ended += 1
                if point.after_turn is not None and ended == wanted:
                    return event.seq
            elif (
                isinstance(payload, UserMessage) and point.turn is not None and ended == wanted - 1
            ):
                return event.seq
        if len(page) < PAGE:
            break
        after = page[-1].seq
    raise UsageError(
        f"session {parent} has no turn {wanted} to fork at ({point.describe()}): it has "
        f"{ended} finished turn(s)"
    )


async def _window(store: Store, parent: str, at: int) -> tuple[list[Event], bool]:
    """The events up to `at` from the main thread's last answer (or the session's first
    event), read back a page at a time; and whether they begin at the log's start."""
    window: list[Event] = []
    end = at
    size = _FIRST_PAGE
    while end > 0:
        begin = max(0, end - size)
        size = min(size * 2, PAGE)
        page = await store.read(parent, begin, limit=end - begin)
        window[:0] = page
        for i in range(len(page) - 1, -1, -1):
            event = page[i]
            # Not a `session.forked`: whether a turn was open there is its prefix's to say.
            if not event.thread and isinstance(event.payload, ModelResponded | SessionCreated):
                return window[i:], event.seq == 1
        end = begin
    return window, True


def _fold_window(window: list[Event], from_start: bool) -> Folder:
    """A fold of the window good for what a fork checks (open calls, running threads, whether
    a turn is open): exact from the log's start; from the main thread's last answer, which
    came inside an open turn, for the rest."""
    folder = Folder()
    if not from_start:
        folder.turn_open = True
    return folder.apply_all(window)
