"""Priority aging: interactive calls go before batch ones, but a batch call's priority rises
with its wait, so batch work cannot starve under interactive load; and a parked session's
next call keeps the place its parked one had (on a virtual clock)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tether.errors import Parked
from tether.scheduler.clock import run_virtual
from tether.scheduler.gateway import PLACE_GRACE, Gateway, GatewayConfig, SessionModel, Ticket
from tether.scheduler.queue import Entry, FairQueue
from tether.testing import Delay, ScriptedModel

from .support import request


def now() -> float:
    return asyncio.get_running_loop().time()


async def keep_busy(model: SessionModel, until: float, served: list[float]) -> None:
    """An interactive session that asks again as soon as it is answered."""
    while now() < until:
        asked = now()
        await model.complete(request("i"))
        served.append(now() - asked)


def batch_waits(batch_aging: float | None, load_for: float = 600.0) -> tuple[list[float], float]:
    """Four interactive sessions keep a one-call-at-a-time backend (1 s a call) busy for
    `load_for` seconds; ten batch calls are queued at the start. Each batch call's wait
    (the load's end when it was never served) and the interactive calls' worst wait."""

    async def main() -> tuple[list[float], float]:
        model = ScriptedModel([lambda messages: Delay(1.0, messages[0].text)])
        gateway = Gateway(model, GatewayConfig(max_concurrency=1, batch_aging=batch_aging))
        served: list[float] = []
        load = [
            asyncio.create_task(
                keep_busy(gateway.for_session(session_id=f"i{n}"), load_for, served)
            )
            for n in range(4)
        ]
        await asyncio.sleep(0.1)
        waits: list[float] = []

        async def batch(n: int) -> None:
            asked = now()
            await gateway.for_session(session_id=f"b{n}", priority="batch").complete(request())
            waits.append(now() - asked)

        jobs = [asyncio.create_task(batch(n)) for n in range(10)]
        await asyncio.gather(*load)
        starved = [load_for for job in jobs if not job.done()]
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        return waits + starved, max(served)

    return run_virtual(main())


def test_without_aging_batch_calls_starve_under_interactive_load() -> None:
    waits, _ = batch_waits(None)
    assert waits == [600.0] * 10  # not one served in ten minutes


def test_with_aging_every_batch_call_is_served_within_its_bound() -> None:
    waits, worst_interactive = batch_waits(30.0)
    assert len(waits) == 10
    # Each waits at most the aging, plus the interactive calls' own wait, plus the batch
    # calls ahead of it (one second each).
    assert max(waits) <= 30.0 + worst_interactive + 10 * 1.0
    assert min(waits) >= 30.0  # none before its priority rose
    # Interactive calls still go first most of the time: ten batch calls took ten seconds
    # of six hundred.
    assert worst_interactive <= 4.0 + 10 * 1.0


def test_a_batch_entry_goes_first_once_it_waited_the_aging_longer() -> None:
    queue: FairQueue[str] = FairQueue(batch_aging=10.0)
    queue.push(Entry("t", "batch", 1.0, 0, "old batch", since=0.0))
    queue.push(Entry("t", "interactive", 1.0, 1, "young interactive", since=9.0))
    assert (queue.peek() or pytest.fail()).payload == "young interactive"
    queue.push(Entry("t", "interactive", 1.0, 2, "younger interactive", since=11.0))
    popped = queue.pop()
    assert popped is not None and popped.payload == "young interactive"
    # The oldest interactive one now arrived 11 s after the batch one: the batch goes.
    assert [e.payload for e in (queue.pop(), queue.pop()) if e] == [
        "old batch",
        "younger interactive",
    ]


def test_aging_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="batch_aging"):
        FairQueue(batch_aging=-1.0)


def parked_then_back(back_at: float, asked_ago: float | None = None) -> list[tuple[str, float]]:
    """A spent budget (6 a minute: one call every 10 s); a session's call parks at 0, three
    other calls queue after it, and the parked session asks again at `back_at`. With
    `asked_ago`, its worker first says it asked that many seconds ago (`Gateway.resume`, as
    its log says)."""

    async def main() -> list[tuple[str, float]]:
        model = ScriptedModel([lambda messages: "ok"])
        gateway = Gateway(model, GatewayConfig(requests_per_minute=6))
        for _ in range(6):
            await gateway.complete(request())
        sent: list[tuple[str, float]] = []

        async def ask(session: str, ticket: Ticket | None = None) -> None:
            await gateway.submit(request(), ticket or Ticket(session_id=session))
            sent.append((session, now()))

        parks = Ticket(session_id="parks", park_after=5.0)
        with pytest.raises(Parked):
            await ask("parks", parks)
        others = [asyncio.create_task(ask(f"other-{n}")) for n in range(3)]
        await asyncio.sleep(back_at)
        if asked_ago is not None:
            gateway.resume("parks", time.time() - asked_ago)
        await ask("parks", parks)
        await asyncio.gather(*others)
        return sent

    return run_virtual(main())


def test_a_parked_session_keeps_its_place_in_the_queue_when_it_comes_back() -> None:
    # Back as its wait ends: it goes before the calls that queued after it parked.
    assert parked_then_back(9.9)[0] == ("parks", pytest.approx(10.0))


def test_a_parked_session_that_comes_back_too_late_queues_anew() -> None:
    sent = parked_then_back(10.0 + PLACE_GRACE + 1)
    assert [s for s, _ in sent] == ["other-0", "other-1", "other-2", "parks"]


def test_the_place_a_call_kept_here_outranks_one_its_log_names() -> None:
    # Its worker says it asked just now (the log's time of a later ask): the place it kept
    # when it parked here, before the others, stays.
    assert parked_then_back(9.9, asked_ago=0.0)[0] == ("parks", pytest.approx(10.0))


def first_asked_elsewhere(asked_ago: float) -> list[str]:
    """A spent budget; three calls queue; then a session whose call was first asked
    `asked_ago` seconds ago in another process (this gateway never saw it) asks here."""

    async def main() -> list[str]:
        model = ScriptedModel([lambda messages: "ok"])
        gateway = Gateway(model, GatewayConfig(requests_per_minute=6))
        for _ in range(6):
            await gateway.complete(request())
        sent: list[str] = []

        async def ask(session: str) -> None:
            await gateway.submit(request(), Ticket(session_id=session))
            sent.append(session)

        others = [asyncio.create_task(ask(f"other-{n}")) for n in range(3)]
        await asyncio.sleep(5.0)
        gateway.resume("elsewhere", time.time() - asked_ago)
        await asyncio.gather(ask("elsewhere"), *others)
        return sent

    return run_virtual(main())


def test_a_call_first_asked_in_another_process_keeps_its_place_here() -> None:
    # Asked a minute ago: before the calls that queued here five seconds ago.
    assert first_asked_elsewhere(60.0) == ["elsewhere", "other-0", "other-1", "other-2"]
    # Asked after them (a second ago): behind them, in arrival order.
    assert first_asked_elsewhere(1.0) == ["other-0", "other-1", "other-2", "elsewhere"]
