"""What a process's workers feed the metrics: takeovers by verdict, parks by reason, and at
each scrape their slots, leases and sessions by state, through the same Prometheus text."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from tether.errors import RateLimited
from tether.events import ModelResponded, SessionCreated, ToolStarted, UserMessage
from tether.messages import Message, ToolCall, user
from tether.published import model_factory
from tether.runtime import LocalRuntime
from tether.runtime.base import SessionSpec, SessionStatus
from tether.runtime.claims import take_work
from tether.session.log import SessionLog
from tether.store.memory import MemoryStore
from tether.telemetry import metrics
from tether.telemetry.metrics import Registry
from tether.telemetry.prometheus import render
from tether.testing import Fail, ScriptedModel
from tether.testing.runtime_conformance import Observer

TTL = 0.1
THROTTLED = "python:telemetry.test_runtime_metrics:throttled"


@model_factory
def throttled() -> ScriptedModel:
    """A backend whose every first answer is a 429 asking for 30 s of quiet."""
    return ScriptedModel(
        [Fail(RateLimited("slow down", status=429, retry_after=30.0)), "fine"],
        repeat_last=True,
        name="scripted:throttled",
    )


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    fresh = Registry(enabled=True)
    monkeypatch.setattr(metrics, "METRICS", fresh)
    yield fresh


async def _session(store: MemoryStore, sid: str, *, calling: bool) -> None:
    log = SessionLog(store, sid)
    await log.append(SessionCreated(model="scripted", system=None, tools={}))
    await log.append(UserMessage(user("go")))
    if calling:  # its worker dies with a call of it in flight: a strike
        answer = Message("assistant", (ToolCall("c1", "write", {}),))
        await log.append(ModelResponded(answer, stop="tool_calls"), ToolStarted("c1", "write"))
    await store.mark_runnable(sid)


async def test_takeovers_are_counted_by_verdict(registry: Registry) -> None:
    store = MemoryStore()
    await _session(store, "innocent", calling=False)
    await _session(store, "guilty", calling=True)
    await take_work(store, "w1", ttl=TTL, limit=5, alone=True, max_claims=2)
    assert registry.takeovers == {}  # first claims: nobody died yet
    await asyncio.sleep(TTL * 1.5)
    for claimed in await take_work(store, "w2", ttl=TTL, limit=5, alone=True, max_claims=2):
        if claimed.lease.session_id == "guilty":  # w2 runs the call again, and dies of it
            log = await SessionLog.load(store, "guilty")
            log.lease = claimed.lease
            await log.append(ToolStarted("c1", "write"))
    await asyncio.sleep(TTL * 1.5)
    await take_work(store, "w3", ttl=30, limit=5, alone=True, max_claims=2)
    assert registry.takeovers == {("forgiven",): 2, ("struck",): 1, ("poisoned",): 1}
    assert registry.parks == {("poisoned",): 1}  # the poisoned one is put aside for good
    text = "\n".join(render(registry))
    assert 'tether_takeovers_total{verdict="poisoned"} 1' in text


async def test_nothing_is_counted_by_the_hooks_while_metrics_are_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    idle = Registry()
    monkeypatch.setattr(metrics, "METRICS", idle)
    store = MemoryStore()
    await _session(store, "s", calling=False)
    await take_work(store, "w1", ttl=TTL, limit=5, alone=True)
    await asyncio.sleep(TTL * 1.5)
    assert await take_work(store, "w2", ttl=30, limit=5, alone=True)  # a takeover
    metrics.parked("parked")
    assert idle.takeovers == {} and idle.parks == {}


def _waiting(kind: str) -> Callable[[SessionStatus], bool]:
    def check(status: SessionStatus) -> bool:
        return status.waiting is not None and status.waiting.kind == kind

    return check


async def test_workers_report_slots_leases_states_and_parks(registry: Registry) -> None:
    async with LocalRuntime(
        MemoryStore(), workers=3, poll_interval=0.02, watch_interval=0.02
    ) as rt:
        first = Observer(rt, await rt.start(SessionSpec(THROTTLED, "go", end_after_turn=True)))
        await first.until("backing off", _waiting("retrying"))
        # The 429 spent the backend's budget: the next session's call would wait 30 s.
        second = Observer(rt, await rt.start(SessionSpec(THROTTLED, "go", end_after_turn=True)))
        await second.until("parked", _waiting("parked"))
        assert registry.parks == {("parked",): 1}
        text = "\n".join(render(registry))
        # The first holds a slot and its lease, waiting on its model; the parked one neither.
        assert 'tether_worker_slots{slot="used"} 1' in text
        assert 'tether_worker_slots{slot="free"} 2' in text
        assert "tether_worker_leases_held 1" in text
        assert 'tether_worker_sessions{state="waiting_model"} 1' in text
        assert 'tether_worker_sessions{state="waiting_tool"} 0' in text
        assert 'tether_parks_total{reason="parked"} 1' in text
        for watch in (first, second):
            await rt.cancel(watch.ref, timeout=5)
    # A closed runtime's worker holds nothing.
    after = "\n".join(render(registry))
    assert 'tether_worker_slots{slot="used"} 0' in after and "tether_worker_leases_held 0" in after
