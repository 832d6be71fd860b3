"""The simulated backend enforces its capacity as a provider does."""

from __future__ import annotations

import pytest

from tether.providers.rate_limits import parse_rate_limits
from tether.testing.simulate import BackendMeter, Capacity, format_duration


def test_the_meter_refuses_past_each_limit_with_the_time_to_wait() -> None:
    meter = BackendMeter(Capacity(2, 3, 1000), now=0.0)
    assert meter.admit(100, 100, 0.0) is None
    assert meter.admit(100, 100, 0.0) is None
    refusal = meter.admit(100, 100, 0.0)
    assert refusal is not None and refusal.limit == "concurrency"
    meter.finish(100, 100, 50, 0.0)
    refusal = meter.admit(800, 100, 0.0)  # 650 tokens left, 900 asked
    assert refusal is not None and refusal.limit == "tokens"
    assert refusal.retry_after == pytest.approx(250 / (1000 / 60), abs=0.002)
    assert meter.admit(100, 100, 0.0) is None  # the third request of the minute
    meter.finish(100, 100, 100, 0.0)
    refusal = meter.admit(1, 1, 0.0)
    assert refusal is not None and refusal.limit == "requests"
    assert refusal.retry_after == pytest.approx(20.0, abs=0.002)


def test_the_meters_headers_read_back_as_what_it_holds() -> None:
    meter = BackendMeter(Capacity(5, 60, 6000), now=0.0)
    meter.admit(1000, 1000, 0.0)
    limits = parse_rate_limits(meter.headers(0.0))
    assert (limits.requests.limit, limits.requests.remaining) == (60, 59)
    assert (limits.tokens.limit, limits.tokens.remaining) == (6000, 4000)
    assert limits.tokens.reset == pytest.approx(20.0)


def test_durations_use_the_providers_format() -> None:
    assert format_duration(0.084) == "84ms"
    assert format_duration(1.5) == "1.500s"
    assert format_duration(360.0) == "6m0.000s"
