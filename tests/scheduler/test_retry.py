"""The retry rules: what is retried, how long it waits, when it gives up."""

from __future__ import annotations

import random

import pytest

from tether import errors
from tether.scheduler.retry import RetryPolicy, is_retryable


@pytest.mark.parametrize(
    "error",
    [
        errors.QuotaExhausted("out of credit", status=429, retry_after=1.0),
        errors.BadRequest("bad", status=400),
        errors.AuthenticationError("who are you", status=401),
        errors.ContextOverflow("too long", status=400),
        errors.GatewayBusy("full"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_these_errors_are_never_retried_even_if_flagged_retryable(
    error: errors.ProviderError,
) -> None:
    error.retryable = True
    assert not is_retryable(error)
    assert RetryPolicy().delay(error, 1, random.Random(0)) is None


@pytest.mark.parametrize(
    "error",
    [
        errors.RateLimited("429", status=429),
        errors.Overloaded("529", status=529),
        errors.ServerError("503", status=503),
        errors.ConnectionFailed("reset"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_these_errors_are_retried(error: errors.ProviderError) -> None:
    assert RetryPolicy().delay(error, 1, random.Random(0)) is not None


def test_backoff_is_full_jitter_under_an_exponential_ceiling() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=20.0)
    rng = random.Random(7)
    for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (9, 20.0)):
        draws = [policy.backoff(attempt, rng) for _ in range(500)]
        assert all(0.0 <= d <= ceiling for d in draws)
        assert max(draws) > 0.9 * ceiling and min(draws) < 0.1 * ceiling  # the full range


def test_the_same_seed_replays_the_same_waits() -> None:
    policy = RetryPolicy()
    error = errors.ServerError("503", status=503)
    a = [policy.delay(error, n, random.Random(3)) for n in range(1, 5)]
    b = [policy.delay(error, n, random.Random(3)) for n in range(1, 5)]
    assert a == b


def test_retry_after_raises_a_short_wait() -> None:
    policy = RetryPolicy(base_delay=1.0)
    error = errors.RateLimited("429", status=429, retry_after=30.0)
    assert policy.delay(error, 1, random.Random(0)) == 30.0


def test_retry_after_never_lowers_a_longer_backoff() -> None:
    policy = RetryPolicy(base_delay=100.0, max_delay=100.0)
    rng = random.Random(1)
    expected = RetryPolicy(base_delay=100.0, max_delay=100.0).backoff(1, random.Random(1))
    assert expected > 0.5
    error = errors.RateLimited("429", status=429, retry_after=0.5)
    assert policy.delay(error, 1, rng) == expected


def test_attempts_are_bounded() -> None:
    policy = RetryPolicy(max_attempts=3)
    error = errors.Overloaded("529", status=529)
    rng = random.Random(0)
    assert policy.delay(error, 1, rng) is not None
    assert policy.delay(error, 2, rng) is not None
    assert policy.delay(error, 3, rng) is None


def test_a_server_asking_for_a_very_long_wait_ends_the_call() -> None:
    policy = RetryPolicy(max_retry_after=60.0)
    error = errors.RateLimited("429", status=429, retry_after=3600.0)
    assert policy.delay(error, 1, random.Random(0)) is None


def test_a_policy_with_no_attempts_is_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
