"""A backend's request and token budgets as the gateway keeps them: the per-minute buckets
(configured, or learned from rate-limit headers), the hold a `retry-after` puts on every
call, and the calibrated reservation of a call. Told the time; no asyncio, no I/O.
"""

from __future__ import annotations

from tether.providers.rate_limits import Bucket, RateLimits
from tether.scheduler.limits import InputCalibration, TokenBucket


class Budgets:
    """`requests` and `tokens` are None while their limit is unknown (not configured, not
    yet reported by the backend): an unknown limit holds nothing back."""

    def __init__(self, requests_per_minute: int | None, tokens_per_minute: int | None) -> None:
        self._configured = (requests_per_minute, tokens_per_minute)
        self._made = False
        self.requests: TokenBucket | None = None
        self.tokens: TokenBucket | None = None
        self.hold_until = 0.0
        self.calibration = InputCalibration()

    def start(self, now: float) -> None:
        """Fill the configured buckets at the first call (so a gateway built long before its
        first call does not start with credit it never had)."""
        if self._made:
            return
        self._made = True
        rpm, tpm = self._configured
        self.requests = TokenBucket.per_minute(rpm, now) if rpm else None
        self.tokens = TokenBucket.per_minute(tpm, now) if tpm else None

    def reservation(self, input_estimate: int, output_cap: int) -> int:
        return self.calibration.tokens(input_estimate) + output_cap

    def ready_at(self, reservation: int, now: float) -> float | None:
        """When a call reserving `reservation` tokens may go; None if it may go now."""
        if self.hold_until > now:
            return self.hold_until
        wait = 0.0
        if self.requests is not None:
            wait = self.requests.wait_for(1, now)
        if self.tokens is not None:
            wait = max(wait, self.tokens.wait_for(reservation, now))
        return now + wait if wait > 0 else None

    def take(self, reservation: int, now: float) -> None:
        if self.requests is not None:
            self.requests.take(1, now)
        if self.tokens is not None:
            self.tokens.take(reservation, now)

    def settle(
        self, reserved: int, estimate: int, input_tokens: int, used: int, now: float
    ) -> None:
        """The answer reported its usage: give back (or take) the difference, and learn how
        far off the input estimate was."""
        if self.tokens is not None:
            self.tokens.give(reserved - used, now)
        self.calibration.observe(estimate, input_tokens)

    def hold(self, seconds: float, now: float) -> None:
        """The backend said its budget is spent for `seconds`: for every call, not one."""
        self.hold_until = max(self.hold_until, now + seconds)

    def learn(self, limits: RateLimits, now: float) -> None:
        """Slow down before a 429, not after: believe the backend's own count of what is left.
        Anthropic's combined `tokens` budget wins; else its input-token budget."""
        tokens = limits.tokens
        if tokens.limit is None and tokens.remaining is None:
            tokens = limits.input_tokens
        self.requests = _learn(self.requests, limits.requests, now)
        self.tokens = _learn(self.tokens, tokens, now)


def _learn(bucket: TokenBucket | None, seen: Bucket, now: float) -> TokenBucket | None:
    if seen.limit is not None and seen.limit > 0:
        if bucket is None:
            bucket = TokenBucket.per_minute(seen.limit, now)
        elif seen.limit != bucket.capacity:
            bucket.resize(seen.limit, now)
    if bucket is not None and seen.remaining is not None:
        bucket.observe(seen.remaining, now)
    return bucket
