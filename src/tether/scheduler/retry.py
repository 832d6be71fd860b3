"""When a failed model call is tried again, and after how long: exponential backoff with full
jitter, a server's `retry-after` as a floor, a bounded number of attempts. Quota exhaustion,
bad requests, authentication errors and context overflow are never retried, whatever flag
an error carries, and neither is a call whose streamed output already reached its observer
(unless that observer follows the log too: `ModelRequest.live`).
Pure: the caller passes the random source, so a seed replays the waits.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from tether.errors import (
    AuthenticationError,
    BadRequest,
    ContextOverflow,
    GatewayBusy,
    ProviderError,
    QuotaExhausted,
)
from tether.providers.base import Delta, ModelRequest

NEVER_RETRIED: tuple[type[ProviderError], ...] = (
    QuotaExhausted,
    BadRequest,
    AuthenticationError,
    ContextOverflow,
    GatewayBusy,
)


def is_retryable(error: ProviderError) -> bool:
    return error.retryable and not isinstance(error, NEVER_RETRIED)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`max_attempts` counts the first try. The n-th retry waits a uniform draw from
    [0, min(max_delay, base_delay·2^(n-1))], raised to the server's `retry-after` if that is
    longer. A server asking for more than `max_retry_after` seconds ends the call at once:
    waiting that long inside one turn helps nobody."""

    max_attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0
    max_retry_after: float = 300.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(
                f"RetryPolicy.max_attempts must be at least 1, not {self.max_attempts}"
            )
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("RetryPolicy delays must not be negative")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """The jittered wait after failed attempt number `attempt` (1-based)."""
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        return rng.uniform(0.0, ceiling)

    def delay(self, error: ProviderError, attempt: int, rng: random.Random) -> float | None:
        """Seconds to wait before the next attempt, or None: give up and raise `error`."""
        if not is_retryable(error) or attempt >= self.max_attempts:
            return None
        if error.retry_after is not None and error.retry_after > self.max_retry_after:
            return None
        wait = self.backoff(attempt, rng)
        if error.retry_after is not None:
            wait = max(wait, error.retry_after)
        return wait


class OutputWatch:
    """Whether any streamed output of a request reached its observer. Once some has, a
    failed call is not tried again: the observer would be shown a second answer after the
    start of the first. Send `watch.request`, which tells the original observer too. A
    `live` request's observers follow the log, where the retry's `model.failed` says to
    start over: its output never stops a retry."""

    def __init__(self, request: ModelRequest) -> None:
        self.seen = False
        self._observer = request.on_delta
        self.request = (
            request
            if request.on_delta is None or request.live
            else dataclasses.replace(request, on_delta=self._observe)
        )

    def _observe(self, delta: Delta) -> None:
        self.seen = True
        if self._observer is not None:
            self._observer(delta)
