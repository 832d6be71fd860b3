"""Steering a session from any process: send a message, decide an approval, answer an
elicitation, interrupt or cancel. Each is a control-plane append; the worker running the session acts on it.

Owns the checks that keep these honest (a decision needs a call waiting for one; cancelling
an ended session changes nothing) and the closing of a session no worker is running. A
caller that keeps a current fold of the session (a runtime's views) hands it in as `Known`,
and the operation reads only the events after it; without one, it folds the whole log.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from tether.errors import Conflict, IdempotencyConflict, LeaseHeld, SessionNotFound, UsageError
from tether.events import (
    CANCEL_SCOPES,
    INPUT_ACTIONS,
    ApprovalDecided,
    CancelRequested,
    CancelScope,
    Event,
    InputAction,
    InputAnswered,
    UserMessage,
)
from tether.fold import Folder
from tether.loop import close_canceled_turn
from tether.messages import JSONObject, Message, user
from tether.recovery import closing
from tether.session.lease import holding
from tether.session.log import EventObserver, SessionLog
from tether.state import session_outcome
from tether.store.base import Store
from tether.store.catalog import Admit

ATTEMPTS = 5  # a control append that races other writers re-checks and tries again


KEYED = "ev_key_"  # the prefix of an event id named by an idempotency key


@dataclass(frozen=True, slots=True)
class Known:
    """A fold of the session that its keeper keeps current, and the events up to its last
    seq whose ids an idempotency key named (`KEYED`). An operation appends through a copy of
    the fold, so the keeper's own is never changed but by the keeper."""

    folder: Folder
    keyed: Mapping[str, Event]


def control_owner() -> str:
    return f"control:{socket.gethostname()}:{os.getpid()}"


async def _load(store: Store, session_id: str, known: Known | None = None) -> SessionLog:
    if known is None:
        log = await SessionLog.load(store, session_id)
    else:
        log = SessionLog(store, session_id, _private(known.folder))
        await log.refresh()  # decide on the log as it is now, as a full read would
    if log.folder.last_seq == 0:
        raise SessionNotFound(session_id)
    return log


def _private(folder: Folder) -> Folder:
    """A copy of a fold to append through. A fold changes its lists, dicts and sets in place
    and replaces everything else whole (messages and events are immutable), so copying
    those containers one level deep makes the copy independent."""
    twin = copy.copy(folder)
    for name, value in vars(folder).items():
        if isinstance(value, list | dict | set):
            setattr(twin, name, copy.copy(value))
    return twin


async def send_message(
    store: Store,
    session_id: str,
    message: str | Message,
    key: str | None = None,
    *,
    known: Known | None = None,
    admit: Admit | None = None,
) -> bool:
    """Add a user message; the session runs it when next run or resumed. With an
    idempotency `key`, the message is added once, whatever process sends it how often: the
    key names its event, so a send finds an earlier one in the log itself. False when it
    was sent already; `IdempotencyConflict` when the key was used for another message.
    `admit`: the tenant's quota of running sessions, which a message that opens a turn (to
    a session idle when it lands) is admitted by, in its append (`QuotaExceeded`)."""
    text = message if isinstance(message, Message) else user(message)
    event_id = None if key is None else message_event_id(key)
    earlier: list[Event] = []

    def note(event: Event) -> None:
        if event.id == event_id:
            earlier.append(event)

    folder = Folder()
    if known is not None:  # first, before any await: the fold and its keys agree now
        folder = _private(known.folder)
        if event_id is not None and event_id in known.keyed:
            earlier.append(known.keyed[event_id])
    log = SessionLog(store, session_id, folder, observers=(note,) if event_id else ())
    # The whole log without a fold, else what came after it; `note` sees what it brings.
    # (Sending the keyed event again at its own seq would pass as a retry, and say "sent".)
    await log.refresh()
    if log.folder.last_seq == 0:
        raise SessionNotFound(session_id)
    for _ in range(ATTEMPTS):
        if earlier:
            sent = earlier[0].payload
            if not isinstance(sent, UserMessage) or sent.message != text:
                raise IdempotencyConflict(
                    f"idempotency key {key!r} was used for another message to {session_id}"
                )
            await store.mark_runnable(session_id)  # should the first send have stopped short
            return False
        if log.folder.terminal:
            raise UsageError(f"session {session_id} has ended ({log.folder.state})")
        try:
            opens = admit if log.folder.state == "idle" else None
            await log.append(
                UserMessage(text), ids=None if event_id is None else (event_id,), admit=opens
            )
            await store.mark_runnable(session_id)  # a worker process picks the session up
            return True
        except Conflict:
            continue  # the fold caught up, and `note` saw what it brought
    raise Conflict(session_id, log.folder.last_seq, log.folder.last_seq)


def message_event_id(key: str) -> str:
    """The id of the `user.message` event sent with idempotency `key` (per session)."""
    return f"{KEYED}{hashlib.sha256(key.encode()).hexdigest()[:32]}"


async def decide(
    store: Store,
    session_id: str,
    call_id: str,
    allow: bool,
    reason: str | None = None,
    *,
    known: Known | None = None,
) -> None:
    """Record an approval decision for a call that waits for one. `call_id` is as the
    session's view lists it: a sub-agent's call is `THREAD:CALL_ID`, and its decision is
    appended on that thread."""
    log = await _load(store, session_id, known)
    for _ in range(ATTEMPTS):
        if log.folder.terminal:
            raise UsageError(
                f"session {session_id} has ended ({log.folder.state}): nothing to decide"
            )
        pending = log.folder.pending_approvals
        if call_id not in pending:
            waiting = ", ".join(pending) or "none"
            raise UsageError(
                f"call {call_id} of session {session_id} is not waiting for a decision "
                f"(waiting: {waiting})"
            )
        thread, call = _thread_call(log.folder, call_id)
        try:
            await log.append(ApprovalDecided(call, allow, reason), threads=(thread,))
            await store.mark_runnable(session_id)
            return
        except Conflict:
            continue
    raise Conflict(session_id, log.folder.last_seq, log.folder.last_seq)


async def answer(
    store: Store,
    session_id: str,
    call_id: str,
    data: Mapping[str, object] | None = None,
    action: str = "accept",
    *,
    known: Known | None = None,
) -> None:
    """Answer the elicitation a running call waits on (`SessionView.pending_inputs`, named
    like approvals): `accept` with `data`, a JSON object valid against the schema the server
    asked for, or `decline` / `cancel` without. The call's runner, or whoever runs the
    session next, goes on with it."""
    chosen = _input_action(action)
    log = await _load(store, session_id, known)
    for _ in range(ATTEMPTS):
        if log.folder.terminal:
            raise UsageError(
                f"session {session_id} has ended ({log.folder.state}): nothing to answer"
            )
        pending = log.folder.pending_inputs
        asked = pending.get(call_id)
        if asked is None:
            waiting = ", ".join(pending) or "none"
            raise UsageError(
                f"call {call_id} of session {session_id} is not waiting for input "
                f"(waiting: {waiting})"
            )
        content = _checked_input(asked.schema, data) if chosen == "accept" else {}
        thread, call = _thread_call(log.folder, call_id)
        try:
            await log.append(InputAnswered(call, chosen, content, asked.key), threads=(thread,))
            await store.mark_runnable(session_id)
            return
        except Conflict:
            continue
    raise Conflict(session_id, log.folder.last_seq, log.folder.last_seq)


def _input_action(action: str) -> InputAction:
    for known in INPUT_ACTIONS:
        if action == known:
            return known
    raise UsageError(f"an answer is 'accept', 'decline' or 'cancel', not {action!r}")


def _checked_input(schema: JSONObject, data: object) -> JSONObject:
    """`data` as the answer's content, or a `UsageError` saying where it fails the schema."""
    import jsonschema  # type: ignore[import-untyped]  # loaded only when an answer comes

    if not isinstance(data, Mapping):
        raise UsageError("an accepted answer is a JSON object (the fields the server asked for)")
    content: JSONObject = {str(k): v for k, v in data.items()}
    try:
        validator = jsonschema.validators.validator_for(schema)
        validator.check_schema(schema)
        error = jsonschema.exceptions.best_match(validator(schema).iter_errors(content))
    except jsonschema.exceptions.SchemaError as exc:
        raise UsageError(
            f"the server asked with a schema that is not valid: {exc.message}"
        ) from None
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the answer"
        raise UsageError(
            f"the answer does not match the requested schema at {where}: {error.message}"
        )
    return content


def _thread_call(folder: Folder, key: str) -> tuple[str, str]:
    """The thread and call id an approval key names (`state.approval_key`)."""
    thread, colon, call_id = key.partition(":")
    if colon and thread in folder.thread_nodes:
        return thread, call_id
    return "", key


async def request_stop(
    store: Store,
    session_id: str,
    scope: str,
    reason: str | None = None,
    *,
    known: Known | None = None,
) -> str:
    """`scope="turn"` interrupts the running turn; `scope="session"` ends the session.

    With a worker running the session, this only asks, and the worker closes what it runs.
    With none, it takes the session's lease for a moment and closes it itself. Stopping an
    ended session, or interrupting an idle one, changes nothing. Returns what was done."""
    stops = _cancel_scope(scope)
    log = await _load(store, session_id, known)
    for _ in range(ATTEMPTS):
        folder = log.folder
        if folder.terminal:
            return f"nothing to do: the session has ended ({folder.state})"
        if scope == "turn" and not folder.turn_open:
            return f"nothing to do: no turn is running ({folder.state})"
        try:
            held = await store.current_lease(session_id)
            if held is not None:
                asked = folder.cancel_scope in ("session", scope)
                if not asked:
                    await log.append(CancelRequested(stops, reason))
                    # Should that worker die, whoever takes the session over closes it.
                    await store.mark_runnable(session_id)
                if await store.current_lease(session_id) is not None:
                    return (
                        "asked already: the running worker will stop"
                        if asked
                        else ("asked the running worker to stop")
                    )
                # The worker released the session meanwhile, perhaps without seeing the
                # request: close it here.
            await _close_unattended(log, stops, reason)
            return "canceled" if scope == "session" else "interrupted"
        except (Conflict, LeaseHeld):
            await log.refresh()
    raise Conflict(session_id, log.folder.last_seq, log.folder.last_seq)


def _cancel_scope(scope: str) -> CancelScope:
    for known in CANCEL_SCOPES:
        if scope == known:
            return known
    raise UsageError(f"scope must be 'turn' or 'session', not {scope!r}")


async def _close_unattended(log: SessionLog, scope: CancelScope, reason: str | None) -> None:
    async with holding(log, control_owner(), ttl=30):
        # Decide on what the log holds now: another closer may have finished meanwhile.
        if log.folder.terminal or (scope == "turn" and not log.folder.turn_open):
            return
        if log.folder.cancel_scope not in ("session", scope):
            await log.append(CancelRequested(scope, reason))
        await close_canceled_turn(log, "interrupted", end_session=scope == "session")


async def settle(
    store: Store,
    session_id: str,
    owner: str,
    ttl: float,
    *,
    keep_open: frozenset[str] = frozenset(),
    observers: tuple[EventObserver, ...] = (),
) -> None:
    """End a session whose last turn stopped for good (`state.session_outcome`), unless it
    stopped for one of `keep_open`: what a run's `end_session` does in the turn's own commit,
    done after it (a worker's session whose turn another closed; a review, which stays open
    after a limit so that it can be continued). A session whose lease another holds is left
    to that one."""
    log = await SessionLog.load(store, session_id, observers=observers)
    with contextlib.suppress(LeaseHeld):
        async with holding(log, owner, ttl):
            f = log.folder
            if f.terminal or f.turn_open or f.stop_reason is None or f.stop_reason in keep_open:
                return
            end = session_outcome(f.stop_reason)
            if end is not None:
                batch = closing(f, f.stop_reason, end=end, end_detail=f.stop_detail)
                if batch:
                    await log.append(*batch)
