"""A session whose model call must wait long for its backend is parked (docs/architecture.md: a worker
never sleeps inside a call holding a lease): its run stops unwritten, its slot and lease are
let go, every worker leaves it alone until the wait is over, and then one runs it again. A
poll says it is parked and until when; a cancel ends it at once."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from invariants import kinds
from server.support import check_documented
from tether.errors import RateLimited
from tether.messages import Message
from tether.published import model_factory
from tether.runtime import LocalRuntime
from tether.runtime.base import SessionSpec, SessionStatus
from tether.scheduler import GatewayConfig
from tether.store import Store
from tether.testing import Fail, ScriptedModel
from tether.testing.runtime_conformance import Observer, spec
from tether.testing.scripted import Reply

PAUSE = 2.0  # what the backend's one 429 asks for, in seconds
ONCE = "python:runtime.test_parking:throttled_once"
THIRTY = "python:runtime.test_parking:throttled_for_thirty"


@model_factory
def throttled_once() -> ScriptedModel:
    """A backend whose very first call, of any session, is a 429 asking for `PAUSE` seconds."""
    calls = itertools.count()

    def reply(messages: Sequence[Message]) -> Reply:
        if next(calls) == 0:
            return Fail(RateLimited("slow down", status=429, retry_after=PAUSE))
        return "fine"

    return ScriptedModel([reply], repeat_last=True, name="scripted:throttled-once")


@model_factory
def throttled_for_thirty() -> ScriptedModel:
    """A backend whose every first answer is a 429 asking for 30 s of quiet."""
    return ScriptedModel(
        [Fail(RateLimited("slow down", status=429, retry_after=30.0)), "fine"],
        repeat_last=True,
        name="scripted:throttled-thirty",
    )


def at_gateway(kind: str) -> Callable[[SessionStatus], bool]:
    return lambda s: s.waiting is not None and s.waiting.kind == kind


async def start(rt: LocalRuntime, model: str) -> Observer:
    ref = await rt.start(SessionSpec(model, "go", end_after_turn=True))
    return Observer(rt, ref)


def parked(status: SessionStatus) -> bool:
    return status.waiting is not None and status.waiting.kind == "parked"


async def test_a_parked_session_runs_again_when_the_wait_is_over(store: Store) -> None:
    async with LocalRuntime(
        store, workers=4, poll_interval=0.02, watch_interval=0.02, park_after=PAUSE / 4
    ) as rt:
        first = await start(rt, ONCE)
        await first.until("backing off", at_gateway("retrying"))
        # The 429 spent the backend's budget for everyone: the next call would wait.
        second = await start(rt, ONCE)
        status = await second.until("parked", parked)
        assert status.state == "waiting_model" and status.waiting is not None
        assert status.waiting.until is not None
        assert status.waiting.reason.startswith("parked"), status.waiting.reason
        # The API documents it: the status JSON is what its schema says, and reads back.
        check_documented(status.to_json(), "SessionStatus")
        assert status.to_json()["waiting"] is not None
        assert SessionStatus.from_json(status.to_json()).waiting == status.waiting
        [figures] = rt.figures()
        assert figures.parked == 1 and figures.queue_depth == 0

        done = [await w.until("the end", lambda s: s.terminal) for w in (first, second)]
        assert [(d.state, d.last_output) for d in done] == [("completed", "fine")] * 2
        # The parked run wrote nothing; the next run asked again, as after a crash.
        assert kinds(await store.read(second.ref.session_id)) == [
            "session.created",
            "user.message",
            "model.requested",
            "model.requested",
            "model.responded",
            "turn.ended",
            "session.ended",
        ]
        # The first session backed off inside its call (a retry keeps its slot): one 429.
        [figures] = rt.figures()
        assert (figures.rate_limited, figures.retries, figures.parked) == (1, 1, 1)


async def test_a_parked_session_frees_its_slot_for_other_work(store: Store) -> None:
    async with LocalRuntime(store, workers=2, poll_interval=0.02, watch_interval=0.02) as rt:
        first = await start(rt, THIRTY)  # backs off 30 s in its slot
        await first.until("backing off", at_gateway("retrying"))
        second = await start(rt, THIRTY)  # would wait 30 s for the budget: parked
        await second.until("parked", parked)
        # Two slots: with the second still holding one, nothing else could run.
        other = Observer(rt, await rt.start(spec("echo freed", end_after_turn=True)))
        done = await other.until("the end", lambda s: s.terminal)
        assert (done.state, done.last_output) == ("completed", "echo: freed")
        assert parked(await second.poll())  # still parked: nobody took it early

        # Nor need an interrupt or a cancel wait for the park to end: nobody runs a parked
        # session, so they close it themselves, before they return.
        third = await start(rt, THIRTY)
        await third.until("parked", parked)
        await rt.interrupt(third.ref, timeout=5)
        events = await store.read(third.ref.session_id)
        assert kinds(events)[-2:] == ["cancel.requested", "turn.ended"]
        assert (await third.poll()).state == "idle"
        await rt.cancel(second.ref, timeout=5)
        events = await store.read(second.ref.session_id)
        assert kinds(events)[-3:] == ["cancel.requested", "turn.ended", "session.ended"]
        assert kinds(events).count("model.requested") == 1
        assert (await second.poll()).state == "canceled"
        await rt.cancel(first.ref, timeout=5)
        assert (await first.until("canceled", lambda s: s.terminal)).state == "canceled"


async def test_without_parking_a_session_waits_in_its_slot(store: Store) -> None:
    async with LocalRuntime(
        store,
        workers=4,
        poll_interval=0.02,
        watch_interval=0.02,
        gateway=GatewayConfig(),
        park_after=None,
    ) as rt:
        first = await start(rt, THIRTY)
        await first.until("backing off", at_gateway("retrying"))
        second = await start(rt, THIRTY)
        await second.until("rate limited", at_gateway("rate_limited"))
        [figures] = rt.figures()
        assert figures.parked == 0 and figures.queue_depth == 1
        for watch in (first, second):
            await rt.cancel(watch.ref, timeout=5)
            assert (await watch.until("canceled", lambda s: s.terminal)).state == "canceled"
