"""The gateway's limits on a virtual clock: concurrency, requests and tokens per minute,
learning from rate-limit headers, and slowing down on 429s."""

from __future__ import annotations

import asyncio

import pytest

from tether.errors import Parked, RateLimited
from tether.providers.base import Model
from tether.scheduler.clock import run_virtual
from tether.scheduler.gateway import Gateway, GatewayConfig, Ticket
from tether.testing import Delay, Fail, ScriptedModel
from tether.testing.simulate import Capacity, Latency, SimulatedBackend

from .support import in_order, logged, request


def now() -> float:
    return asyncio.get_running_loop().time()


def test_the_gateway_is_a_model_with_the_wrapped_models_name() -> None:
    model = ScriptedModel(["ok"], name="openai:gpt-x")
    gateway = Gateway(model)
    assert isinstance(gateway, Model) and gateway.name == "openai:gpt-x"
    bound = gateway.for_session(tenant="t", session_id="s")
    assert isinstance(bound, Model) and bound.name == "openai:gpt-x"


def test_calls_never_exceed_the_concurrency_limit() -> None:
    async def main() -> None:
        backend = SimulatedBackend(Capacity(4, 100_000, 10**9), latency=Latency(1.0, 0.0))
        gateway = Gateway(backend, GatewayConfig(max_concurrency=4))
        answers = await asyncio.gather(*(gateway.complete(request()) for _ in range(50)))
        totals = backend.meter().snapshot(now())
        assert len(answers) == 50
        assert totals.peak_in_flight == 4
        assert totals.refused["concurrency"] == 0
        assert now() == pytest.approx(13.0)  # 50 calls, 4 at a time, 1 s each

    run_virtual(main())


def test_requests_per_minute_spread_calls_out_instead_of_sending_a_burst() -> None:
    async def main() -> None:
        sent: list[float] = []
        model = ScriptedModel([logged(sent, lambda _: "ok")])
        gateway = Gateway(model, GatewayConfig(requests_per_minute=6))
        await asyncio.gather(*(gateway.complete(request()) for _ in range(10)))
        # A full minute's budget of 6 at once, then one every 10 s.
        assert sent == pytest.approx([0.0] * 6 + [10.0, 20.0, 30.0, 40.0])

    run_virtual(main())


def test_tokens_are_reserved_before_sending_and_given_back_after_the_answer() -> None:
    async def main() -> None:
        sent: list[float] = []
        model = ScriptedModel([logged(sent, lambda _: Delay(5.0, "ok"))])
        # 1,500 a minute is 25 a second. Each call reserves its input (1) plus its cap (1,000).
        gateway = Gateway(model, GatewayConfig(tokens_per_minute=1500))
        await asyncio.gather(*(gateway.complete(request(max_output_tokens=1000)) for _ in range(2)))
        # The second does not fit beside the first. Refill alone would take it to t=20; the
        # first answer used ~35 tokens and gave the rest back at t=5.
        assert sent == pytest.approx([0.0, 5.0])

    run_virtual(main())


def test_headers_teach_the_gateway_a_limit_it_was_not_told() -> None:
    async def main() -> None:
        # 3 requests a minute: one every 20 s after the first three.
        backend = SimulatedBackend(Capacity(10, 3, 10**9), latency=Latency(0.0, 0.0))
        gateway = Gateway(backend, GatewayConfig())
        for _ in range(4):
            await gateway.complete(request())
        assert gateway.figures().rate_limited == 0
        assert now() == pytest.approx(20.0, abs=0.01)

    run_virtual(main())


def test_without_headers_the_same_backend_answers_429_and_the_call_is_retried() -> None:
    async def main() -> None:
        backend = SimulatedBackend(Capacity(10, 3, 10**9), headers=False, latency=Latency(0.0, 0.0))
        gateway = Gateway(backend, GatewayConfig())
        for _ in range(4):
            await gateway.complete(request())
        figures = gateway.figures()
        assert (figures.rate_limited, figures.retries, figures.succeeded) == (1, 1, 4)
        assert now() >= 20.0  # the retry waited for the backend's retry-after

    run_virtual(main())


def test_the_input_estimate_learns_from_reported_usage() -> None:
    async def main() -> None:
        # The backend's tokenizer counts 1.5x the chars/4 estimate.
        backend = SimulatedBackend(
            Capacity(10, 1000, 10**9), token_ratio=(1.5, 1.5), latency=Latency(0.0, 0.0)
        )
        gateway = Gateway(backend, GatewayConfig())
        await gateway.complete(request("x" * 4000, max_output_tokens=0))
        assert gateway.figures().input_estimate_factor == pytest.approx(1.5, abs=0.01)

    run_virtual(main())


def test_a_429_cuts_the_concurrency_and_successes_grow_it_back() -> None:
    async def main() -> None:
        model = ScriptedModel(
            [in_order(Fail(RateLimited("429", status=429)), then=Delay(1.0, "ok"))]
        )
        gateway = Gateway(model, GatewayConfig(max_concurrency=8))
        await gateway.complete(request())
        assert gateway.figures().concurrency_limit == 4.25  # halved to 4, then +1/4 for the retry
        await asyncio.gather(*(gateway.complete(request()) for _ in range(100)))
        assert gateway.figures().concurrency_limit == 8.0

    run_virtual(main())


def test_a_retry_after_holds_every_call_not_only_the_one_refused() -> None:
    async def main() -> None:
        sent: list[float] = []
        model = ScriptedModel(
            [
                logged(
                    sent,
                    in_order(Fail(RateLimited("429", status=429, retry_after=30.0)), then="ok"),
                )
            ]
        )
        gateway = Gateway(model, GatewayConfig(max_concurrency=1))
        first = asyncio.create_task(gateway.complete(request()))
        await asyncio.sleep(1)
        await gateway.complete(request())  # arrives while the backend's budget is spent
        await first
        assert sent[0] == 0.0 and min(sent[1:]) >= 30.0

    run_virtual(main())


def test_a_call_that_would_wait_long_for_the_budget_is_parked_and_a_short_wait_is_not() -> None:
    async def main() -> None:
        sent: list[float] = []
        model = ScriptedModel([logged(sent, lambda _: "ok")])
        # 6 a minute: the budget is spent after 6 calls, then one more every 10 s.
        gateway = Gateway(model, GatewayConfig(requests_per_minute=6))
        for _ in range(6):
            await gateway.complete(request())
        patient = gateway.for_session(session_id="patient")  # no park_after: it waits
        eager = gateway.for_session(session_id="eager")
        parks = Ticket(session_id="parks", park_after=5.0)
        waits = Ticket(session_id="waits", park_after=30.0)

        calls = [
            asyncio.ensure_future(patient.complete(request())),
            asyncio.ensure_future(eager.complete(request())),
            asyncio.ensure_future(gateway.submit(request(), parks)),
            asyncio.ensure_future(gateway.submit(request(), waits)),
        ]
        await asyncio.sleep(0)
        with pytest.raises(Parked) as parked:
            await calls[2]
        # Handed back at once, with how long it would have waited, and out of the queue.
        assert now() == pytest.approx(0.0)
        assert parked.value.seconds == pytest.approx(10.0)
        assert "budget" in parked.value.reason
        assert gateway.status("parks") is None
        await asyncio.gather(calls[0], calls[1], calls[3])
        assert sent == pytest.approx([0.0] * 6 + [10.0, 20.0, 30.0])
        figures = gateway.figures()
        assert (figures.parked, figures.succeeded, figures.queue_depth) == (1, 9, 0)

    run_virtual(main())
