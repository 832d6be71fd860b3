"""Sessions run by a LocalRuntime pass one model gateway per backend: a session queued behind
a busy backend says so when polled (its state stays `waiting_model`), priorities and tenants
reach the gateway, a queued session cancels at once, and the figures count what happened."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from tether.errors import RateLimited
from tether.fold import fold
from tether.published import model_factory
from tether.runtime import LocalRuntime, SessionRef
from tether.runtime.base import SessionSpec, SessionStatus
from tether.scheduler import GatewayConfig
from tether.store import MemoryStore
from tether.testing import Fail, ScriptedModel
from tether.testing.runtime_conformance import Observer, spec

BACKEND = "scripted:runtime"  # the name of runtime_fixtures' model
HOLD = "note 1 30"  # the first model call answers after 30 s: it holds the only slot
THROTTLED = "python:runtime.test_gateway:throttled"


@model_factory
def throttled() -> ScriptedModel:
    """A backend whose first answer is a 429 asking for 30 s of quiet."""
    return ScriptedModel(
        [Fail(RateLimited("slow down", status=429, retry_after=30.0)), "fine"],
        repeat_last=True,
        name="scripted:throttled",
    )


@pytest.fixture
async def runtime() -> AsyncIterator[LocalRuntime]:
    """Room for four sessions, but only one model request in flight at a time."""
    store = MemoryStore()
    async with LocalRuntime(
        store,
        workers=4,
        poll_interval=0.02,
        watch_interval=0.02,
        gateway=GatewayConfig(max_concurrency=1),
    ) as rt:
        yield rt


def at_gateway(kind: str) -> Callable[[SessionStatus], bool]:
    return lambda s: s.waiting is not None and s.waiting.kind == kind


async def holding(rt: LocalRuntime, task: str = HOLD, **changes: object) -> Observer:
    """A session whose model call holds the gateway's only slot."""
    ref = await rt.start(spec(task, end_after_turn=True, **changes))
    watch = Observer(rt, ref)
    await watch.until("its call is out", at_gateway("sending"))
    return watch


async def queued(rt: LocalRuntime, task: str = "note 1", **changes: object) -> Observer:
    ref = await rt.start(spec(task, end_after_turn=True, **changes))
    watch = Observer(rt, ref)
    await watch.until("queued at the gateway", at_gateway("queued"))
    return watch


async def test_a_session_queued_behind_a_busy_backend_says_so_and_runs_when_the_slot_frees(
    runtime: LocalRuntime,
) -> None:
    first = await holding(runtime)
    second = await queued(runtime)
    status = second.last
    assert status is not None and status.state == "waiting_model"
    assert status.waiting_reason is not None and status.waiting_reason.startswith("queued")
    assert first.last is not None and first.last.waiting_reason == "waiting for the model's answer"
    # The reason is live, never stored: the log folds to plain waiting_model.
    events = await runtime.store.read(second.ref.session_id)
    assert fold(events)[1].state == "waiting_model"
    assert all("queued" not in e.canonical() for e in events)
    # Over the wire form too: a client reading the JSON sees the same.
    again = SessionStatus.from_json(status.to_json())
    assert again.waiting == status.waiting and again.to_json() == status.to_json()

    await runtime.cancel(first.ref)
    done = await second.until("the end", lambda s: s.terminal)
    assert done.state == "completed" and done.last_output == "noted 1", done.to_json()
    assert done.waiting is None

    [figures] = runtime.figures()
    assert figures.backend == BACKEND and figures.max_concurrency == 1
    assert figures.requests == 3 and figures.succeeded == 2 and figures.cancelled == 1
    assert figures.queue_depth == 0 and figures.in_flight == 0
    assert figures.wait["interactive"].count == 3
    assert (figures.wait["interactive"].max or 0.0) > 0.0  # the second session did wait


async def test_cancelling_a_session_queued_at_the_gateway_ends_it_at_once(
    runtime: LocalRuntime,
) -> None:
    first = await holding(runtime)
    second = await queued(runtime)
    await runtime.cancel(second.ref)
    ended = await second.until("canceled", lambda s: s.terminal)
    assert ended.state == "canceled"
    # At once: the holder's call (30 s) is still out, so nothing freed the slot for it.
    still = await first.poll()
    assert still.state == "waiting_model" and still.waiting is not None
    assert still.waiting.kind == "sending"
    [figures] = runtime.figures()
    assert figures.queue_depth == 0 and figures.cancelled == 1 and figures.in_flight == 1
    await runtime.cancel(first.ref)
    assert (await first.until("canceled", lambda s: s.terminal)).state == "canceled"


async def test_an_interactive_session_goes_before_a_batch_one_queued_earlier(
    runtime: LocalRuntime,
) -> None:
    first = await holding(runtime)
    batch = await queued(runtime, HOLD, priority="batch")
    interactive = await queued(runtime, HOLD)
    await runtime.cancel(first.ref)
    await interactive.until("its call is out", at_gateway("sending"))
    assert (await batch.poll()).waiting is not None
    assert batch.last is not None and batch.last.waiting is not None
    assert batch.last.waiting.kind == "queued"
    [figures] = runtime.figures()
    assert figures.queue_depth_by_priority == {"interactive": 0, "batch": 1}
    for watch in (batch, interactive):
        await runtime.cancel(watch.ref)
        assert (await watch.until("canceled", lambda s: s.terminal)).state == "canceled"


async def test_the_sessions_tenant_is_the_gateways_tenant(runtime: LocalRuntime) -> None:
    acme = runtime.for_tenant("acme")
    ref = await acme.start(spec("echo hi", end_after_turn=True))
    done = await Observer(acme, ref).until("the end", lambda s: s.terminal)
    assert done.state == "completed"
    [figures] = runtime.figures()
    assert figures.requests_by_tenant == {"acme": 1}


async def test_a_session_another_process_runs_has_no_waiting_reason() -> None:
    store = MemoryStore()
    async with (
        LocalRuntime(store, workers=0) as front,
        LocalRuntime(store, workers=2, poll_interval=0.02, watch_interval=0.02) as back,
    ):
        ref = await front.start(spec(HOLD, end_after_turn=True))
        await Observer(back, ref).until("its call is out", at_gateway("sending"))
        status = await front.poll(SessionRef(ref.session_id))
        assert status.state == "waiting_model" and status.waiting is None
        assert front.figures() == []
        await front.cancel(ref)
        assert (await Observer(back, ref).until("canceled", lambda s: s.terminal)).terminal


@pytest.fixture
async def unparked() -> AsyncIterator[LocalRuntime]:
    """As `runtime`, but a session waits out a spent budget in its slot (no parking)."""
    async with LocalRuntime(
        MemoryStore(),
        workers=4,
        poll_interval=0.02,
        watch_interval=0.02,
        gateway=GatewayConfig(max_concurrency=1),
        park_after=None,
    ) as rt:
        yield rt


async def test_a_session_backing_off_says_until_when_and_a_cancel_ends_it_at_once(
    unparked: LocalRuntime,
) -> None:
    runtime = unparked
    first = Observer(
        runtime, await runtime.start(SessionSpec(THROTTLED, "go", end_after_turn=True))
    )
    status = await first.until("backing off", at_gateway("retrying"))
    assert status.state == "waiting_model" and status.waiting is not None
    assert status.waiting.error is not None and "rate_limited" in status.waiting.error
    assert status.waiting.until is not None and status.waiting.attempt == 1
    assert status.waiting_reason is not None
    assert status.waiting_reason.startswith("retrying after error rate_limited")
    # The 429 said the backend's budget is spent: a second session waits for it too.
    second = Observer(
        runtime, await runtime.start(SessionSpec(THROTTLED, "go", end_after_turn=True))
    )
    held = await second.until("rate limited", at_gateway("rate_limited"))
    assert held.waiting_reason is not None and held.waiting_reason.startswith("rate limited")
    for watch in (first, second):
        await runtime.cancel(watch.ref)
        assert (await watch.until("canceled", lambda s: s.terminal)).state == "canceled"
    [figures] = runtime.figures()
    assert figures.rate_limited == 1 and figures.retries == 1 and figures.cancelled == 2
