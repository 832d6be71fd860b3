"""Retries and the circuit breaker through the gateway, on a virtual clock."""

from __future__ import annotations

import asyncio

import pytest

from tether import errors
from tether.scheduler.clock import run_virtual
from tether.scheduler.gateway import Gateway, GatewayConfig
from tether.scheduler.retry import RetryPolicy
from tether.testing import Delay, Fail, ScriptedModel

from .support import in_order, logged, request


def now() -> float:
    return asyncio.get_running_loop().time()


def test_a_429_is_retried_no_sooner_than_its_retry_after() -> None:
    async def main() -> None:
        sent: list[float] = []
        refusal = errors.RateLimited("HTTP 429", status=429, retry_after=30.0)
        model = ScriptedModel([logged(sent, in_order(Fail(refusal), then="ok"))])
        gateway = Gateway(model)
        response = await gateway.complete(request())
        assert response.message.text == "ok"
        assert sent[0] == 0.0 and 30.0 <= sent[1] <= 31.0
        figures = gateway.figures()
        assert (figures.rate_limited, figures.retries, figures.attempts) == (1, 1, 2)

    run_virtual(main())


@pytest.mark.parametrize(
    "error",
    [
        errors.QuotaExhausted("insufficient_quota", status=429),
        errors.BadRequest("bad", status=400),
        errors.AuthenticationError("no key", status=401),
        errors.ContextOverflow("too long", status=400),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_that_retrying_cannot_fix_propagate_after_one_attempt(
    error: errors.ProviderError,
) -> None:
    async def main() -> None:
        sent: list[float] = []
        model = ScriptedModel([logged(sent, in_order(Fail(error), then="ok"))])
        gateway = Gateway(model)
        with pytest.raises(type(error)) as raised:
            await gateway.complete(request())
        assert raised.value.attempts == 1 and len(sent) == 1 and now() == 0.0

    run_virtual(main())


def test_after_the_last_attempt_the_last_error_propagates_with_its_count() -> None:
    async def main() -> None:
        sent: list[float] = []
        model = ScriptedModel([logged(sent, lambda _: Fail(errors.ServerError("503", status=503)))])
        gateway = Gateway(model, GatewayConfig(retry=RetryPolicy(max_attempts=3)))
        with pytest.raises(errors.ServerError) as raised:
            await gateway.complete(request())
        assert raised.value.attempts == 3 and len(sent) == 3
        assert sent == sorted(sent) and sent[-1] <= 1.0 + 2.0  # full jitter under 1 s, 2 s
        assert gateway.figures().failed == 1

    run_virtual(main())


def test_the_same_seed_gives_the_same_retry_times() -> None:
    def run_once() -> list[float]:
        async def main() -> list[float]:
            sent: list[float] = []
            model = ScriptedModel(
                [logged(sent, lambda _: Fail(errors.Overloaded("529", status=529)))]
            )
            gateway = Gateway(model, GatewayConfig(seed=42, circuit_threshold=100))
            with pytest.raises(errors.Overloaded):
                await gateway.complete(request())
            return sent

        return run_virtual(main())

    first = run_once()
    assert len(first) == 6 and first == run_once()


def test_a_storm_of_529s_opens_the_circuit_and_only_a_probe_passes_until_it_closes() -> None:
    async def main() -> None:
        sent: list[float] = []
        storm = [Fail(errors.Overloaded("HTTP 529", status=529))] * 5
        model = ScriptedModel([logged(sent, in_order(*storm, then=Delay(2.0, "ok")))])
        config = GatewayConfig(
            max_concurrency=10,
            circuit_threshold=5,
            circuit_cooldown=10.0,
            retry=RetryPolicy(max_attempts=10, base_delay=0.5),
        )
        gateway = Gateway(model, config)
        calls = [asyncio.create_task(gateway.complete(request())) for _ in range(5)]
        await asyncio.sleep(5.0)
        assert gateway.figures().circuit == "open"
        status = gateway.status("default")
        assert status is not None and status.kind in ("circuit_open", "retrying")
        await asyncio.gather(*calls)
        assert sent[:5] == [0.0] * 5
        # Nothing while open; at t=10 one probe; the rest only once it answered (t=12).
        assert sent[5] == pytest.approx(10.0)
        assert min(sent[6:]) == pytest.approx(12.0)
        figures = gateway.figures()
        assert figures.circuit == "closed" and figures.circuit_opened == 1
        assert figures.overloaded == 5

    run_virtual(main())


def test_a_failed_probe_keeps_the_circuit_open_longer() -> None:
    async def main() -> None:
        sent: list[float] = []
        storm = [Fail(errors.Overloaded("HTTP 529", status=529))] * 3
        model = ScriptedModel([logged(sent, in_order(*storm, then="ok"))])
        config = GatewayConfig(
            circuit_threshold=2,
            circuit_cooldown=10.0,
            retry=RetryPolicy(max_attempts=10, base_delay=0.1),
        )
        gateway = Gateway(model, config)
        await asyncio.gather(*(gateway.complete(request()) for _ in range(2)))
        # Two failures open it at t=0 for 10 s; the probe at 10 fails: open 20 s more.
        assert sent[:2] == [0.0, 0.0]
        assert sent[2] == pytest.approx(10.0)
        assert sent[3] == pytest.approx(30.0)
        assert gateway.figures().circuit_opened == 2

    run_virtual(main())


def test_a_backend_that_answers_400_closes_no_circuit_and_opens_none() -> None:
    async def main() -> None:
        model = ScriptedModel([lambda _: Fail(errors.BadRequest("bad", status=400))])
        gateway = Gateway(model, GatewayConfig(circuit_threshold=2))
        for _ in range(5):
            with pytest.raises(errors.BadRequest):
                await gateway.complete(request())
        assert gateway.figures().circuit == "closed"

    run_virtual(main())
