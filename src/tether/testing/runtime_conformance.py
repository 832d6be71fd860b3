"""The runtime conformance suite: what every `Runtime` must do, as plain async checks.

Each check takes a runtime whose workers run sessions (models and tools from
`runtime_fixtures`) and raises AssertionError on a violation. Every poll it makes is checked
against the one before with `validate_observation`. A runtime's tests run them all, e.g.
`@pytest.mark.parametrize("check", RUNTIME_CHECKS)`.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, get_args

from tether.errors import IdempotencyConflict, SessionNotFound, UsageError
from tether.events import Event, UserMessage
from tether.providers.base import Delta
from tether.runtime.base import (
    Capabilities,
    CapabilityRefused,
    InvalidForkPoint,
    Runtime,
    SessionRef,
    SessionSpec,
    SessionStatus,
)
from tether.session.fork import FORKED_BEFORE, ForkPoint
from tether.state import ForkOrigin, State, validate_observation
from tether.testing.runtime_fixtures import MODEL, TOOLS

Check = Callable[[Runtime], Awaitable[None]]
WAIT = 30.0  # generous: a slow machine passes, a hung runtime still fails


def spec(task: str, **changes: object) -> SessionSpec:
    return SessionSpec(model=MODEL, task=task, tools=TOOLS, **changes)  # type: ignore[arg-type]


class Observer:
    """Polls one session; every observation must be able to follow the one before it."""

    def __init__(self, runtime: Runtime, ref: SessionRef) -> None:
        self.runtime, self.ref = runtime, ref
        self.last: SessionStatus | None = None
        self.polls = 0

    async def poll(self) -> SessionStatus:
        status = await self.runtime.poll(self.ref, timeout=WAIT)
        assert status.session_id == self.ref.session_id
        if self.last is not None:
            validate_observation(self.last.view, status.view)
        self.last, self.polls = status, self.polls + 1
        return status

    async def until(self, what: str, ok: Callable[[SessionStatus], bool]) -> SessionStatus:
        async with asyncio.timeout(WAIT):
            while True:
                status = await self.poll()
                if ok(status):
                    return status
                await asyncio.sleep(0.01)
        raise AssertionError(f"unreachable: waiting for {what}")

    async def settled(self) -> SessionStatus:
        return await self.until("a settled state", lambda s: s.settled)


async def collect(runtime: Runtime, ref: SessionRef, after_seq: int = 0) -> list[Event]:
    return [e async for e in runtime.events(ref, after_seq, timeout=WAIT)]


async def first_events(rt: Runtime, ref: SessionRef, count: int) -> list[Event]:
    """The session's first `count` events, from a session that may stay open."""
    taken: list[Event] = []
    stream = rt.events(ref, 0, timeout=WAIT)
    try:
        async for event in stream:
            taken.append(event)
            if len(taken) == count:
                break
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    return taken


def assert_dense(events: list[Event], first: int = 1) -> None:
    seqs = [e.seq for e in events]
    assert seqs == list(range(first, first + len(seqs))), f"not dense from {first}: {seqs}"


async def capabilities_are_declared_and_a_spec_asking_for_more_is_refused(rt: Runtime) -> None:
    caps = await rt.capabilities(timeout=WAIT)
    for needed in ("cancel", "interrupt", "approvals", "event_stream"):
        assert needed in caps.held(), f"the suite needs {needed}; declared {sorted(caps.held())}"
    key = f"caps-{secrets.token_hex(4)}"
    missing = set(Capabilities.names()) - caps.held()
    if missing:
        try:
            await rt.start(spec("echo no", requires=Capabilities.of(missing)), idempotency_key=key)
        except CapabilityRefused as exc:
            assert all(name in str(exc) for name in missing), str(exc)
        else:
            raise AssertionError(f"a spec requiring {sorted(missing)} was accepted")
    try:
        await rt.start(spec("echo no", requires=Capabilities.of(["no_such_capability"])))
    except UsageError as exc:
        assert "no_such_capability" in str(exc)
    else:
        raise AssertionError("a spec requiring an unknown capability was accepted")
    # The refused start created nothing: its key is still free for another spec.
    ref = await rt.start(spec("echo yes", requires=caps), idempotency_key=key)
    status = await Observer(rt, ref).settled()
    assert status.last_output == "echo: yes", status.last_output


async def a_session_runs_its_task_and_every_poll_is_a_valid_observation(rt: Runtime) -> None:
    ref = await rt.start(spec("note 3", end_after_turn=True))
    watch = Observer(rt, ref)
    first = await watch.poll()
    assert first.state in get_args(State), f"an unnamed state: {first.state}"
    status = await watch.settled()
    assert status.state == "completed" and status.stop_reason == "end_turn", status.to_json()
    assert status.last_output == "noted 3" and status.view.steps == 4
    assert status.usage.input_tokens > 0 and (status.cost_usd or 0) > 0
    finished = [e for e in await collect(rt, ref) if e.type == "tool.finished"]
    assert [getattr(e.payload, "outcome", "") for e in finished] == ["ok"] * 3


async def send_opens_a_new_turn_on_an_idle_session(rt: Runtime) -> None:
    ref = await rt.start(spec("echo one"))
    watch = Observer(rt, ref)
    await watch.settled()
    await rt.send(ref, "echo two", timeout=WAIT)
    status = await watch.until("the second turn", lambda s: s.view.turns == 2 and s.settled)
    assert status.last_output == "echo: two" and status.stop_reason == "end_turn"
    try:
        await rt.send(ref, "   ", timeout=WAIT)
    except UsageError:
        pass
    else:
        raise AssertionError("an empty message was accepted")


async def an_ended_session_can_be_cancelled_and_its_evidence_stays_readable(rt: Runtime) -> None:
    ref = await rt.start(spec("echo done", end_after_turn=True))
    watch = Observer(rt, ref)
    status = await watch.until("completed", lambda s: s.terminal)
    assert status.state == "completed", status.state
    before = await collect(rt, ref)
    assert before[-1].type == "session.ended"
    await rt.cancel(ref, timeout=WAIT)  # success, and nothing changes
    await rt.cancel(ref, timeout=WAIT)
    after = await watch.poll()
    assert after.state == "completed" and after.last_output == "echo: done"
    assert await collect(rt, ref) == before
    for refused in (rt.send(ref, "echo more", timeout=WAIT), rt.decide(ref, "call_0_0", True)):
        try:
            await refused
        except UsageError:
            pass
        else:
            raise AssertionError("an ended session accepted more input")
    assert await collect(rt, ref) == before


async def cancel_ends_a_running_session(rt: Runtime) -> None:
    ref = await rt.start(spec("hang"))
    watch = Observer(rt, ref)
    await watch.until("the model call", lambda s: s.state == "waiting_model")
    await rt.cancel(ref, timeout=WAIT)
    status = await watch.until("canceled", lambda s: s.terminal)
    assert status.state == "canceled" and status.stop_reason == "interrupted", status.to_json()
    types = [e.type for e in await collect(rt, ref)]
    assert "cancel.requested" in types and types[-1] == "session.ended", types


async def interrupt_ends_the_turn_and_the_session_stays_usable(rt: Runtime) -> None:
    ref = await rt.start(spec("hang"))
    watch = Observer(rt, ref)
    await watch.until("the model call", lambda s: s.state == "waiting_model")
    await rt.interrupt(ref, timeout=WAIT)
    status = await watch.until("interrupted", lambda s: s.stop_reason == "interrupted")
    assert status.state == "idle", status.state
    await rt.interrupt(ref, timeout=WAIT)  # nothing runs: nothing to do, not an error
    await rt.send(ref, "echo back", timeout=WAIT)
    status = await watch.until("the next turn", lambda s: s.view.turns == 2 and s.settled)
    assert status.last_output == "echo: back", status.to_json()


async def an_approval_waits_for_a_decision(rt: Runtime) -> None:
    for allow, expected in ((True, "guarded said: done: launch"), (False, "denied")):
        ref = await rt.start(spec("guarded launch"))
        watch = Observer(rt, ref)
        status = await watch.until("an approval", lambda s: s.state == "waiting_approval")
        (call_id,) = status.view.pending_approvals
        assert status.view.open_calls[0].name == "guarded"
        try:
            await rt.decide(ref, "call_no_such", True, timeout=WAIT)
        except UsageError as exc:
            assert "call_no_such" in str(exc)
        else:
            raise AssertionError("a decision on a call that waits for none was accepted")
        await rt.decide(ref, call_id, allow, None if allow else "not today", timeout=WAIT)
        status = await watch.until("the answer", lambda s: s.state == "idle")
        assert expected in status.last_output, status.last_output


async def a_failing_model_ends_a_one_turn_session_failed(rt: Runtime) -> None:
    ref = await rt.start(spec("fail", end_after_turn=True))
    status = await Observer(rt, ref).until("the end", lambda s: s.terminal)
    assert status.state == "failed" and status.stop_reason == "error", status.to_json()


async def events_are_the_log_so_far_then_live_and_end_with_the_session(rt: Runtime) -> None:
    ref = await rt.start(spec("note 3 0.05", end_after_turn=True))
    events = await collect(rt, ref)  # subscribed while the session runs
    assert_dense(events)
    assert [e.type for e in events[:2]] == ["session.created", "user.message"]
    assert events[-1].type == "session.ended"
    status = await Observer(rt, ref).poll()
    assert status.state == "completed" and status.last_seq == events[-1].seq


async def an_event_stream_resumes_after_any_seq_without_gaps_or_duplicates(rt: Runtime) -> None:
    ref = await rt.start(spec("note 4 0.05", end_after_turn=True))
    head: list[Event] = []
    async for event in rt.events(ref, 0, timeout=WAIT):
        head.append(event)
        if len(head) == 4:
            break  # a subscriber goes away mid-session...
    tail = await collect(rt, ref, after_seq=head[-1].seq)  # ...and comes back
    whole = head + tail
    assert_dense(whole)
    assert whole[-1].type == "session.ended"
    for after in range(len(whole) + 1):
        again = await collect(rt, ref, after_seq=after)
        assert again == whole[after:], f"resuming after seq {after}"


async def unknown_sessions_are_not_found(rt: Runtime) -> None:
    ref = SessionRef(f"ses_{secrets.token_hex(8)}")
    attempts: list[Callable[[], Awaitable[object]]] = [
        lambda: rt.poll(ref, timeout=WAIT),
        lambda: rt.cancel(ref, timeout=WAIT),
        lambda: rt.interrupt(ref, timeout=WAIT),
        lambda: rt.send(ref, "echo hi", timeout=WAIT),
        lambda: rt.decide(ref, "call_0_0", True, timeout=WAIT),
        lambda: collect(rt, ref),
    ]
    for attempt in attempts:
        try:
            await attempt()
        except SessionNotFound as exc:
            assert ref.session_id in str(exc)
        else:
            raise AssertionError("an unknown session was found")


async def bad_specs_are_refused_before_anything_is_created(rt: Runtime) -> None:
    key = f"bad-{secrets.token_hex(4)}"
    bad = [
        SessionSpec(model="no-such-provider:model", task="echo hi"),
        SessionSpec(model=MODEL, task="echo hi", tools=("tether_no_such_module:tools",)),
        SessionSpec(model=MODEL, task="   "),
        SessionSpec(model=MODEL, task="echo hi", metadata={"tenant": "someone-else"}),
    ]
    for refused in bad:
        try:
            await rt.start(refused, idempotency_key=key, timeout=WAIT)
        except UsageError as exc:
            assert str(exc).strip(), "a refusal without a message"
        else:
            raise AssertionError(f"a bad spec was accepted: {refused}")
    ref = await rt.start(spec("echo fine"), idempotency_key=key)  # the key is still free
    assert (await Observer(rt, ref).settled()).last_output == "echo: fine"


async def an_idempotency_key_returns_the_same_session(rt: Runtime) -> None:
    key = f"idem-{secrets.token_hex(4)}"
    first = await rt.start(spec("echo once"), idempotency_key=key)
    again = await rt.start(spec("echo once"), idempotency_key=key)
    assert first == again
    try:
        await rt.start(spec("echo twice"), idempotency_key=key)
    except UsageError as exc:
        assert key in str(exc)
    else:
        raise AssertionError("an idempotency key was reused for another spec")
    status = await Observer(rt, first).settled()
    assert status.view.turns == 1 and status.last_output == "echo: once"


async def waits_honour_their_deadline_and_cancellation(rt: Runtime) -> None:
    ref = await rt.start(spec("echo open"))
    await Observer(rt, ref).settled()  # idle: its stream stays open for more
    loop = asyncio.get_running_loop()
    began = loop.time()
    seen: list[Event] = []
    try:
        async for event in rt.events(ref, 0, timeout=0.5):
            seen.append(event)
    except TimeoutError:
        pass
    else:
        raise AssertionError("a stream of an open session ended before its deadline")
    assert 0.4 <= loop.time() - began < WAIT, loop.time() - began
    assert_dense(seen)
    assert seen and seen[-1].type == "turn.ended"

    async def consume() -> None:
        async for _ in rt.events(ref, 0):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=WAIT)
    assert done and task.cancelled(), "cancelling a stream's consumer did not stop it"


async def a_live_stream_carries_the_models_output_as_it_comes(rt: Runtime) -> None:
    """With `live_deltas`, `live()` yields the answer's text as deltas before the event that
    records the answer; without, it is the event stream alone. Either way its events are
    exactly `events()`'s."""
    caps = await rt.capabilities(timeout=WAIT)
    ref = await rt.start(spec("echo one"))
    settled = await Observer(rt, ref).settled()
    stream = rt.live(ref, 0, timeout=WAIT)
    items: list[Event | Delta] = []
    try:
        async with asyncio.timeout(WAIT):
            # Everything logged so far first: from then on the stream is surely listening,
            # so the next turn's output cannot slip past it.
            while (
                not items
                or not isinstance(items[-1], Event)
                or (items[-1].seq < settled.view.last_seq)
            ):
                items.append(await anext(stream))
            await rt.send(ref, "echo two", timeout=WAIT)
            while True:  # to the second turn's end
                item = await anext(stream)
                items.append(item)
                if isinstance(item, Event) and item.type == "turn.ended":
                    break
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    events = [i for i in items if isinstance(i, Event)]
    assert events == await first_events(rt, ref, len(events)), "live events differ from events()"
    assert_dense(events)
    deltas = [(n, i) for n, i in enumerate(items) if isinstance(i, Delta)]
    if not caps.live_deltas:
        assert deltas == [], "a runtime without live_deltas streamed deltas"
        return
    second = max(
        n for n, i in enumerate(items) if isinstance(i, Event) and i.seq <= settled.view.last_seq
    )
    answered = next(
        n
        for n, i in enumerate(items)
        if n > second and isinstance(i, Event) and i.type == "model.responded"
    )
    texts = "".join(d.text for n, d in deltas if n > second and d.kind == "text")
    assert texts == "echo: two", (texts, items)
    assert all(n < answered for n, d in deltas if n > second), "a delta came after its answer"


async def a_message_sent_again_with_its_key_is_added_once(rt: Runtime) -> None:
    ref = await rt.start(spec("echo one"))
    watch = Observer(rt, ref)
    await watch.settled()
    for _ in range(3):  # a client retrying after lost answers
        await rt.send(ref, "echo two", timeout=WAIT, idempotency_key="msg-1")
    try:
        await rt.send(ref, "echo three", timeout=WAIT, idempotency_key="msg-1")
    except IdempotencyConflict as exc:
        assert "msg-1" in str(exc)
    else:
        raise AssertionError("one idempotency key was accepted for two messages")
    status = await watch.until("the second turn", lambda s: s.view.turns == 2 and s.settled)
    assert status.last_output == "echo: two", status.to_json()
    await rt.send(ref, "echo two", timeout=WAIT, idempotency_key="msg-1")  # long after
    await rt.send(ref, "echo four", timeout=WAIT, idempotency_key="msg-2")
    status = await watch.until("the third turn", lambda s: s.view.turns == 3 and s.settled)
    assert status.last_output == "echo: four", status.to_json()
    events = await first_events(rt, ref, status.view.last_seq)
    texts = [e.payload.message.text for e in events if isinstance(e.payload, UserMessage)]
    assert texts == ["echo one", "echo two", "echo four"], texts


async def the_session_list_holds_the_sessions_newest_first(rt: Runtime) -> None:
    older = await rt.start(spec("echo older"))
    await Observer(rt, older).settled()
    newer = await rt.start(spec("echo newer"))
    status = await Observer(rt, newer).settled()
    listed = await rt.sessions(100, timeout=WAIT)
    ids = [s.session_id for s in listed]
    assert older.session_id in ids and newer.session_id in ids, ids
    assert ids.index(newer.session_id) < ids.index(older.session_id), ids
    mine = listed[ids.index(newer.session_id)]
    assert (mine.state, mine.last_output, mine.steps) == (
        status.state,
        "echo: newer",
        status.view.steps,
    ), mine
    assert len(await rt.sessions(1, timeout=WAIT)) == 1


async def the_session_list_pages_and_filters_from_the_catalog(rt: Runtime) -> None:
    """A page at a time by its cursor, each session once, the last page's cursor None; each
    filter, every sort, counts per state; a bad option refused naming it."""
    tag = secrets.token_hex(4)  # this check's sessions, among any others the runtime holds
    refs = [
        await rt.start(spec(f"echo paged {tag} {n}", metadata={"check": tag, "n": str(n % 2)}))
        for n in range(5)
    ]
    for ref in refs:
        await Observer(rt, ref).settled()
    cancelled = refs[2]
    await rt.cancel(cancelled, timeout=WAIT)
    await Observer(rt, cancelled).until("canceled", lambda s: s.state == "canceled")
    mine = {"check": tag}
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await rt.sessions(2, cursor=cursor, metadata=mine, counts=True, timeout=WAIT)
        assert len(page) <= 2 and page.counts == {"idle": 4, "canceled": 1}, page
        seen += [s.session_id for s in page]
        cursor = page.next_cursor
        if cursor is None:
            break
        assert len(page) == 2 and len(seen) < 5, seen
    assert seen[0] == cancelled.session_id, seen  # the most recently updated first
    assert sorted(seen) == sorted(r.session_id for r in refs), seen

    async def listed(**options: Any) -> list[str]:
        page = await rt.sessions(50, metadata={**mine, **options.pop("meta", {})},
                                 timeout=WAIT, **options)  # fmt: skip
        assert page.next_cursor is None and page.counts is None, page
        return [s.session_id for s in page]

    ids = [r.session_id for r in refs]
    assert await listed(sort="oldest") == ids
    assert await listed(sort="newest") == ids[::-1]
    assert sorted(await listed(sort="tokens")) == sorted(ids)
    assert await listed(state="canceled") == [cancelled.session_id]
    assert sorted(await listed(state=("idle", "canceled"))) == sorted(ids)
    assert sorted(await listed(meta={"n": "1"})) == sorted([ids[1], ids[3]])
    assert await listed(q=f"PAGED {tag} 4") == [ids[4]]
    assert await listed(id_prefix=ids[3]) == [ids[3]]
    assert await listed(model="no-such-model") == []
    first = (await rt.sessions(1, metadata=mine, sort="oldest", timeout=WAIT))[0]
    assert first.session_id == ids[0] and first.task == f"echo paged {tag} 0", first
    assert {"check": tag, "n": "0"}.items() <= first.metadata.items(), first
    assert first.state == "idle" and first.tokens > 0, first
    assert await listed(created_after=first.created, sort="oldest") == ids
    assert await listed(created_before=first.created) == []
    bad: list[tuple[dict[str, Any], str]] = [
        ({"state": "sleeping"}, "unknown state 'sleeping'"),
        ({"sort": "id"}, "sort must be one of"),
        ({"cursor": "not a cursor"}, "is not one this server gave"),
        ({"created_after": "yesterday"}, "created_after must be an ISO 8601"),
        ({"q": "x" * 201}, "q is longer than 200"),
    ]
    for options, says in bad:
        try:
            await rt.sessions(10, timeout=WAIT, **options)
        except UsageError as exc:
            assert says in str(exc), (options, str(exc))
        else:
            raise AssertionError(f"sessions(**{options}) was not refused")


RUNTIME_CHECKS: list[Check] = [
    capabilities_are_declared_and_a_spec_asking_for_more_is_refused,
    a_session_runs_its_task_and_every_poll_is_a_valid_observation,
    send_opens_a_new_turn_on_an_idle_session,
    an_ended_session_can_be_cancelled_and_its_evidence_stays_readable,
    cancel_ends_a_running_session,
    interrupt_ends_the_turn_and_the_session_stays_usable,
    an_approval_waits_for_a_decision,
    a_failing_model_ends_a_one_turn_session_failed,
    events_are_the_log_so_far_then_live_and_end_with_the_session,
    an_event_stream_resumes_after_any_seq_without_gaps_or_duplicates,
    unknown_sessions_are_not_found,
    bad_specs_are_refused_before_anything_is_created,
    an_idempotency_key_returns_the_same_session,
    waits_honour_their_deadline_and_cancellation,
    a_live_stream_carries_the_models_output_as_it_comes,
    a_message_sent_again_with_its_key_is_added_once,
    the_session_list_holds_the_sessions_newest_first,
    the_session_list_pages_and_filters_from_the_catalog,
]


async def turns(rt: Runtime, *tasks: str) -> tuple[SessionRef, Observer]:
    """A session that ran one turn per task, settled after each."""
    ref = await rt.start(spec(tasks[0]))
    watch = Observer(rt, ref)
    await watch.settled()
    for number, task in enumerate(tasks[1:], start=2):
        await rt.send(ref, task, timeout=WAIT)
        await watch.until(f"turn {number}", functools.partial(_turns_done, number))
    return ref, watch


def _turns_done(number: int, status: SessionStatus) -> bool:
    return status.view.turns == number and status.settled


def same_events(child: list[Event], parent: list[Event]) -> bool:
    """The child's log holds the parent's events, named as its own."""
    return [(e.seq, e.id, e.payload) for e in child] == [(e.seq, e.id, e.payload) for e in parent]


async def a_fork_at_a_turn_runs_on_from_its_parents_log(rt: Runtime) -> None:
    parent, _ = await turns(rt, "echo one", "note 2", "echo three", "echo four")
    forked = await rt.fork(parent, at=ForkPoint(turn=2), timeout=WAIT)
    assert forked.parent == parent.session_id and forked.state == "pending", forked
    assert forked.kind == "fork" and forked.answered == () and forked.at < forked.parent_last_seq
    child = SessionRef(forked.session_id)
    status = await Observer(rt, child).settled()
    # The child ran the parent's turn 2 again (the scripted model answers the same), alone.
    assert status.last_output == "noted 2" and status.view.turns == 1, status.to_json()
    assert status.view.forked == ForkOrigin(parent.session_id, forked.at, "fork")
    assert (await rt.poll(parent, timeout=WAIT)).view.forked is None
    theirs = await first_events(rt, parent, forked.at)
    ours = await first_events(rt, child, status.last_seq)
    assert same_events(ours[: forked.at], theirs[: forked.at])
    assert all(e.session_id == child.session_id for e in ours)
    assert ours[forked.at].type == "session.forked"
    listed = await rt.sessions(parent=parent.session_id, timeout=WAIT)
    assert [s.session_id for s in listed] == [child.session_id], listed
    assert listed[0].parent == parent.session_id


async def a_fork_with_a_message_is_run_and_one_without_waits(rt: Runtime) -> None:
    parent, _ = await turns(rt, "echo one", "echo two")
    idle = await rt.fork(parent, at=ForkPoint(after_turn=1), timeout=WAIT)
    assert idle.state == "idle", idle
    assert (await rt.poll(SessionRef(idle.session_id), timeout=WAIT)).view.turns == 0
    led = await rt.fork(parent, at=ForkPoint(after_turn=1), message="echo other", timeout=WAIT)
    assert led.state == "pending", led
    status = await Observer(rt, SessionRef(led.session_id)).settled()
    assert status.last_output == "echo: other" and status.view.turns == 1


async def a_fork_with_an_idempotency_key_returns_the_same_child(rt: Runtime) -> None:
    parent, watch = await turns(rt, "echo one")
    key = f"fork-{secrets.token_hex(4)}"
    first = await rt.fork(parent, message="echo again", idempotency_key=key, timeout=WAIT)
    # The parent goes on, to a call that waits for approval: the retry is still the fork
    # the key made (at the end the parent had then), not refused at its end now.
    await rt.send(parent, "guarded launch", timeout=WAIT)
    await watch.until("the approval", lambda s: s.state == "waiting_approval")
    again = await rt.fork(parent, message="echo again", idempotency_key=key, timeout=WAIT)
    assert again.session_id == first.session_id and again.at == first.at
    try:
        await rt.fork(parent, message="echo other", idempotency_key=key, timeout=WAIT)
    except IdempotencyConflict as exc:
        assert key in str(exc)
    else:
        raise AssertionError("an idempotency key was reused for another fork")
    children = await rt.sessions(parent=parent.session_id, timeout=WAIT)
    assert [s.session_id for s in children] == [first.session_id]


async def a_fork_where_a_call_is_open_is_refused_or_answers_it(rt: Runtime) -> None:
    parent = await rt.start(spec("guarded launch"))
    status = await Observer(rt, parent).until(
        "the approval", lambda s: s.state == "waiting_approval"
    )
    [call_id] = status.view.pending_approvals
    try:
        await rt.fork(parent, timeout=WAIT)
    except InvalidForkPoint as exc:
        assert call_id in str(exc) and "guarded" in str(exc), str(exc)
    else:
        raise AssertionError("a fork where a call has no result was accepted")
    assert len(await rt.sessions(parent=parent.session_id, timeout=WAIT)) == 0
    forked = await rt.fork(parent, open_calls="cancel", timeout=WAIT)
    assert forked.answered == (call_id,), forked
    child = await Observer(rt, SessionRef(forked.session_id)).settled()
    # The call was never run: the child's model read the fork's answer instead.
    assert child.last_output == f"guarded said: {FORKED_BEFORE}", child.last_output
    assert child.view.open_calls == () and child.view.turns == 1
    try:
        await rt.fork(SessionRef("ses_nosuchsession00"), timeout=WAIT)
    except SessionNotFound:
        pass
    else:
        raise AssertionError("an unknown session was forked")


# What a runtime that declares `fork` must do (`Runtime.fork`).
FORK_CHECKS: list[Check] = [
    a_fork_at_a_turn_runs_on_from_its_parents_log,
    a_fork_with_a_message_is_run_and_one_without_waits,
    a_fork_with_an_idempotency_key_returns_the_same_child,
    a_fork_where_a_call_is_open_is_refused_or_answers_it,
]


async def run_runtime_conformance(factory: Callable[[], Awaitable[Runtime]]) -> None:
    """Run every check, each on a fresh runtime from `factory`; the fork checks too when
    the runtime declares `fork`."""
    probe = await factory()
    try:
        forks = (await probe.capabilities(timeout=WAIT)).fork
    finally:
        await probe.close()
    for check in [*RUNTIME_CHECKS, *(FORK_CHECKS if forks else [])]:
        runtime = await factory()
        try:
            await check(runtime)
        finally:
            await runtime.close()
