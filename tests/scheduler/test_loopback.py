"""The gateway over a real socket: the loopback server enforces its capacity and answers 429
past it; the real OpenAI Chat codec carries its headers back; the gateway keeps under it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tether.errors import RateLimited
from tether.providers.registry import model_from_string
from tether.scheduler.gateway import Gateway, GatewayConfig
from tether.testing.sim_server import LoopbackServer
from tether.testing.simulate import Capacity, Latency

from .support import request

CAPACITY = Capacity(max_concurrency=3, requests_per_minute=60, tokens_per_minute=10**7)


@pytest.fixture
async def server() -> AsyncIterator[LoopbackServer]:
    async with LoopbackServer(CAPACITY, latency=Latency(0.2, 0.0)) as running:
        yield running


async def test_the_server_answers_429_with_a_wait_past_its_capacity(
    server: LoopbackServer,
) -> None:
    model = model_from_string(f"openai-compatible:sim@{server.base_url}")
    outcomes = await asyncio.gather(
        *(model.complete(request()) for _ in range(8)), return_exceptions=True
    )
    refused = [o for o in outcomes if isinstance(o, RateLimited)]
    assert len(refused) == 5  # three slots
    assert all(r.status == 429 and r.retry_after is not None for r in refused)
    assert server.meter is not None and server.meter.totals.refused["concurrency"] == 5


async def test_through_the_gateway_the_same_burst_meets_no_429(server: LoopbackServer) -> None:
    model = model_from_string(f"openai-compatible:sim@{server.base_url}")
    gateway = Gateway(model, GatewayConfig(max_concurrency=3))
    answers = await asyncio.gather(
        *(
            gateway.for_session(tenant=f"t{n % 2}", session_id=f"s{n}").complete(request())
            for n in range(12)
        )
    )
    await gateway.aclose()
    assert all(a.message.text == "done" for a in answers)
    assert server.meter is not None and server.meter.totals.refused == {
        "concurrency": 0,
        "requests": 0,
        "tokens": 0,
    }
    figures = gateway.figures()
    assert figures.rate_limited == 0 and figures.succeeded == 12
    # The requests-per-minute limit was never configured: it came from the headers.
    assert figures.utilisation["requests"] is not None
    assert figures.tokens_used > 0 and set(figures.tokens_by_tenant) == {"t0", "t1"}


async def test_a_gateway_that_learned_the_budget_waits_instead_of_drawing_429s() -> None:
    tight = Capacity(max_concurrency=4, requests_per_minute=4, tokens_per_minute=10**7)
    async with LoopbackServer(tight, latency=Latency(0.0, 0.0)) as server:
        model = model_from_string(f"openai-compatible:sim@{server.base_url}")
        gateway = Gateway(model, GatewayConfig(max_concurrency=4))
        for _ in range(4):
            await gateway.complete(request())
        # The budget is spent and the gateway knows it from the headers: the next call
        # would wait ~15 s. It is queued, not sent.
        waiting = asyncio.create_task(gateway.complete(request()))
        await asyncio.sleep(0.5)
        status = gateway.status("default")
        assert status is not None and status.kind == "rate_limited"
        assert status.until is not None and status.until - status.now > 10.0
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await gateway.aclose()
        assert server.meter is not None and server.meter.totals.refused["requests"] == 0
