"""The gateway's figures: a JSON-ready snapshot and the Prometheus text rendering."""

from __future__ import annotations

import asyncio
import json

from tether.errors import RateLimited
from tether.messages import Usage, assistant
from tether.providers.base import ModelRequest, ModelResponse
from tether.scheduler.clock import run_virtual
from tether.scheduler.figures import GatewayFigures, WaitSamples, render_prometheus
from tether.scheduler.gateway import Gateway, GatewayConfig
from tether.testing import Delay, Fail, ScriptedModel

from .support import in_order, request


def busy_gateway() -> GatewayFigures:
    async def main() -> GatewayFigures:
        refusal = RateLimited("429", status=429, retry_after=1.0)
        model = ScriptedModel([in_order(Fail(refusal), then=Delay(1.0, "ok"))], name='odd "name"')
        gateway = Gateway(
            model,
            GatewayConfig(max_concurrency=2, requests_per_minute=600, tokens_per_minute=60_000),
        )
        batch = gateway.for_session(tenant="b", session_id="x", priority="batch")
        await asyncio.gather(
            *(gateway.complete(request()) for _ in range(4)), batch.complete(request())
        )
        return gateway.figures()

    return run_virtual(main())


def test_figures_count_what_happened() -> None:
    figures = busy_gateway()
    assert (figures.requests, figures.attempts, figures.succeeded) == (5, 6, 5)
    assert (figures.rate_limited, figures.retries, figures.failed) == (1, 1, 0)
    assert figures.wait["interactive"].count == 5 and figures.wait["batch"].count == 1
    assert figures.requests_by_tenant == {"default": 4, "b": 1}
    concurrency = figures.utilisation["concurrency"]
    assert concurrency is not None and 0 < concurrency <= 1


def test_figures_serialise_to_json() -> None:
    data = busy_gateway().to_json()
    again = json.loads(json.dumps(data))
    assert again["backend"] == 'odd "name"'
    assert again["wait"]["interactive"]["count"] == 5
    assert set(again["utilisation"]) == {"concurrency", "requests", "tokens"}


def test_prometheus_text_has_typed_families_and_escaped_labels() -> None:
    text = render_prometheus([busy_gateway()])
    assert "# TYPE tether_gateway_rate_limited_total counter" in text
    assert 'tether_gateway_rate_limited_total{backend="odd \\"name\\""} 1\n' in text
    assert (
        'tether_gateway_queue_wait_seconds_count{backend="odd \\"name\\"",priority="batch"} 1'
        in text
    )
    assert 'quantile="0.99"' in text
    for line in text.splitlines():
        assert line.startswith("#") or line.startswith("tether_gateway_")
        if not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])  # every sample value is a number


def test_wait_quantiles_cover_the_latest_window_only() -> None:
    samples = WaitSamples(window=100)
    for _ in range(100):
        samples.add(50.0)
    for n in range(100):
        samples.add(float(n))
    assert samples.count == 200
    assert samples.quantile(0.5) == 49.0 and samples.quantile(1.0) == 99.0


class _Cached:
    """A backend whose answers read part of their input from its prompt cache."""

    name = "cached"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        read = 0 if self.calls == 1 else 900  # the first request writes, later ones read
        usage = Usage(input_tokens=1000, output_tokens=10, cache_read_tokens=read)
        return ModelResponse(assistant("ok"), usage=usage)


def test_the_cache_hit_ratio_is_the_share_of_input_read_from_the_cache() -> None:
    async def main() -> tuple[GatewayFigures, GatewayFigures]:
        gateway = Gateway(_Cached(), GatewayConfig(max_concurrency=1))
        before = gateway.figures()
        for _ in range(4):
            await gateway.complete(request())
        return before, gateway.figures()

    before, after = run_virtual(main())
    assert before.cache_hit_ratio is None
    assert (after.input_tokens, after.cache_read_tokens) == (4000, 2700)
    assert after.cache_hit_ratio == 2700 / 4000
    text = render_prometheus([after])
    assert 'tether_gateway_cache_read_tokens_total{backend="cached"} 2700\n' in text
