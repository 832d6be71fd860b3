"""Order, backpressure, status and cancellation through the gateway, on a virtual clock."""

from __future__ import annotations

import asyncio

import pytest

from tether import errors
from tether.scheduler.clock import run_virtual
from tether.scheduler.gateway import Gateway, GatewayConfig, SessionModel
from tether.testing import Delay, Fail, ScriptedModel

from .support import in_order, request


def now() -> float:
    return asyncio.get_running_loop().time()


def one_at_a_time(seconds: float = 1.0, **config: object) -> Gateway:
    model = ScriptedModel([lambda messages: Delay(seconds, messages[0].text)])
    return Gateway(model, GatewayConfig(max_concurrency=1, **config))  # type: ignore[arg-type]


async def call(model: SessionModel, text: str, done: list[tuple[str, float]]) -> None:
    await model.complete(request(text))
    done.append((text, now()))


def test_a_tenant_with_one_session_is_not_starved_by_a_tenant_with_a_thousand() -> None:
    async def main() -> None:
        gateway = one_at_a_time()
        done: list[tuple[str, float]] = []
        crowd = [
            asyncio.create_task(
                call(gateway.for_session(tenant="crowd", session_id=f"c{i}"), "c", done)
            )
            for i in range(1000)
        ]
        await asyncio.sleep(0)
        lone = gateway.for_session(tenant="lone", session_id="lone")
        for n in range(5):
            await call(lone, f"lone-{n}", done)
        # Each of its calls waits for at most the one crowd call in flight, then goes.
        assert now() <= 10.0
        assert sum(1 for text, _ in done if text == "c") <= 6
        for task in crowd:
            task.cancel()
        await asyncio.gather(*crowd, return_exceptions=True)

    run_virtual(main())


def test_interactive_calls_pass_queued_batch_calls() -> None:
    async def main() -> None:
        gateway = one_at_a_time()
        done: list[tuple[str, float]] = []
        batch = gateway.for_session(tenant="t", session_id="b", priority="batch")
        tasks = [asyncio.create_task(call(batch, f"batch-{n}", done)) for n in range(5)]
        await asyncio.sleep(0.5)
        urgent = gateway.for_session(tenant="t", session_id="i", priority="interactive")
        await call(urgent, "interactive", done)
        await asyncio.gather(*tasks)
        assert [text for text, _ in done][:2] == ["batch-0", "interactive"]
        assert [text for text, _ in done][2:] == [f"batch-{n}" for n in range(1, 5)]

    run_virtual(main())


def test_equal_calls_go_in_arrival_order() -> None:
    async def main() -> None:
        gateway = one_at_a_time()
        done: list[tuple[str, float]] = []
        bound = [gateway.for_session(tenant="t", session_id=f"s{n}") for n in range(8)]
        await asyncio.gather(*(call(m, f"{n}", done) for n, m in enumerate(bound)))
        assert [text for text, _ in done] == [f"{n}" for n in range(8)]

    run_virtual(main())


def test_past_the_bound_a_fail_fast_gateway_refuses_at_once() -> None:
    async def main() -> None:
        gateway = one_at_a_time(100.0, max_queue=2, when_full="fail")
        held = [asyncio.create_task(gateway.complete(request())) for _ in range(3)]
        await asyncio.sleep(0)  # one in flight, two waiting
        with pytest.raises(errors.GatewayBusy, match="max_queue=2") as raised:
            await gateway.complete(request())
        assert not raised.value.retryable and now() == 0.0
        assert gateway.figures().rejected_busy == 1
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)

    run_virtual(main())


def test_past_the_bound_a_waiting_gateway_parks_the_caller_until_a_place_frees() -> None:
    async def main() -> None:
        gateway = one_at_a_time(1.0, max_queue=2)
        done: list[tuple[str, float]] = []
        bound = [gateway.for_session(tenant="t", session_id=f"s{n}") for n in range(4)]
        tasks = [asyncio.create_task(call(m, f"{n}", done)) for n, m in enumerate(bound)]
        await asyncio.sleep(0)
        figures = gateway.figures()
        assert (figures.queue_depth, figures.waiting_for_place) == (2, 1)
        status = bound[3].status()
        assert status is not None and status.kind == "queued" and "full" in status.reason
        await asyncio.gather(*tasks)
        assert [text for text, _ in done] == ["0", "1", "2", "3"]

    run_virtual(main())


def test_a_call_that_waits_past_the_queue_timeout_fails_with_gateway_busy() -> None:
    async def main() -> None:
        gateway = one_at_a_time(100.0, queue_timeout=30.0)
        first = asyncio.create_task(gateway.complete(request()))
        await asyncio.sleep(0)
        with pytest.raises(errors.GatewayBusy, match=r"waited 30\.0 s"):
            await gateway.complete(request())
        assert now() == pytest.approx(30.0)
        assert gateway.figures().queue_depth == 0
        await first

    run_virtual(main())


def test_status_names_what_a_session_waits_for() -> None:
    async def main() -> None:
        refusal = errors.RateLimited("HTTP 429: slow down", status=429, retry_after=20.0)
        model = ScriptedModel([in_order(Delay(5.0, "a"), Fail(refusal), then="ok")])
        gateway = Gateway(model, GatewayConfig(max_concurrency=1))
        first = gateway.for_session(tenant="t", session_id="first")
        second = gateway.for_session(tenant="t", session_id="second")
        assert first.status() is None
        tasks = [asyncio.create_task(m.complete(request())) for m in (first, second)]
        await asyncio.sleep(1)
        sending, queued = first.status(), second.status()
        assert sending is not None and sending.kind == "sending" and not sending.waiting
        assert queued is not None and queued.kind == "queued" and queued.waiting
        await asyncio.sleep(5)  # first answered at 5; second sent at 5 and refused
        retrying = second.status()
        assert retrying is not None and retrying.kind == "retrying"
        assert retrying.until == pytest.approx(25.0)
        assert retrying.error is not None and retrying.error.startswith("rate_limited: HTTP 429")
        assert "retrying after error rate_limited" in retrying.reason
        await asyncio.gather(*tasks)
        assert first.status() is None and second.status() is None

    run_virtual(main())


def test_status_says_rate_limited_until_the_budget_refills() -> None:
    async def main() -> None:
        model = ScriptedModel(["ok"])
        gateway = Gateway(model, GatewayConfig(requests_per_minute=1))
        await gateway.complete(request())
        waiting = asyncio.create_task(gateway.complete(request()))
        await asyncio.sleep(1)
        status = gateway.status("default")
        assert status is not None and status.kind == "rate_limited"
        assert status.until == pytest.approx(60.0)
        assert status.to_json()["seconds_left"] == pytest.approx(59.0)
        await waiting
        assert now() == pytest.approx(60.0)

    run_virtual(main())


def test_a_cancel_while_queued_ends_at_once_and_frees_the_place() -> None:
    async def main() -> None:
        gateway = one_at_a_time(10.0, max_queue=1, when_full="fail")
        first = asyncio.create_task(gateway.complete(request()))
        queued = asyncio.create_task(gateway.complete(request()))
        await asyncio.sleep(1)
        assert gateway.figures().queue_depth == 1
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert now() == 1.0
        figures = gateway.figures()
        assert (figures.queue_depth, figures.cancelled) == (0, 1)
        await gateway.complete(request())  # the place is free: no GatewayBusy
        await first

    run_virtual(main())


def test_a_cancel_while_backing_off_ends_at_once() -> None:
    async def main() -> None:
        refusal = errors.RateLimited("HTTP 429", status=429, retry_after=300.0)
        model = ScriptedModel([in_order(Fail(refusal), then="ok")])
        gateway = Gateway(model)
        task = asyncio.create_task(gateway.complete(request()))
        await asyncio.sleep(2)
        status = gateway.status("default")
        assert status is not None and status.kind == "retrying"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert now() == 2.0
        assert gateway.status("default") is None
        assert gateway.figures().in_flight == 0

    run_virtual(main())


def test_a_cancel_in_flight_gives_the_slot_to_the_next_call_at_once() -> None:
    async def main() -> None:
        model = ScriptedModel([in_order(Delay(1000.0, "slow"), then="fast")])
        gateway = Gateway(model, GatewayConfig(max_concurrency=1))
        slow = asyncio.create_task(gateway.complete(request()))
        await asyncio.sleep(0)
        fast = asyncio.create_task(gateway.complete(request()))
        await asyncio.sleep(3)
        slow.cancel()
        assert (await fast).message.text == "fast"
        assert now() == 3.0

    run_virtual(main())


def test_cancelling_a_thousand_queued_calls_leaves_an_empty_gateway() -> None:
    async def main() -> None:
        gateway = one_at_a_time(5.0)
        tasks = [asyncio.create_task(gateway.complete(request())) for _ in range(1000)]
        await asyncio.sleep(1)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        figures = gateway.figures()
        assert (figures.queue_depth, figures.in_flight, figures.cancelled) == (0, 0, 1000)
        assert now() == 1.0
        assert (await gateway.complete(request("after"))).message.text == "after"

    run_virtual(main())
