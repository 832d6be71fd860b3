"""The gateway's limits as plain state machines, each told the time rather than reading it:
token buckets (requests and tokens per minute), the AIMD concurrency limit, the circuit
breaker and the calibration of the input-token estimate. No asyncio, no clock, no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

# Float rounding must not turn "enough at time t" into a chain of nanosecond timers.
_EPSILON = 1e-9


@dataclass(slots=True)
class TokenBucket:
    """A budget refilled continuously at `rate` per second up to `capacity`. The level may
    go below zero: reconciling a request that used more than it reserved leaves a debt."""

    capacity: float
    rate: float
    level: float
    updated: float

    @classmethod
    def per_minute(cls, limit: float, now: float) -> TokenBucket:
        """A provider's "N per minute": a full minute's worth, refilled at N/60 a second."""
        return cls(capacity=limit, rate=limit / 60.0, level=limit, updated=now)

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
            self.updated = now

    def available(self, now: float) -> float:
        self._refill(now)
        return self.level

    def wait_for(self, amount: float, now: float) -> float:
        """Seconds until `amount` can be taken. More than the capacity waits for a full bucket
        (else it could never go)."""
        self._refill(now)
        need = min(amount, self.capacity)
        if self.level >= need - _EPSILON:
            return 0.0
        return (need - self.level) / self.rate + _EPSILON

    def take(self, amount: float, now: float) -> None:
        self._refill(now)
        self.level -= amount

    def give(self, amount: float, now: float) -> None:
        self._refill(now)
        self.level = min(self.capacity, self.level + amount)

    def observe(self, remaining: float, now: float) -> None:
        """The backend reported `remaining`: never believe we have more than it has."""
        self._refill(now)
        self.level = min(self.level, remaining)

    def resize(self, limit: float, now: float) -> None:
        """The backend reported a different per-minute limit than we assumed."""
        self._refill(now)
        self.capacity, self.rate = limit, limit / 60.0
        self.level = min(self.level, limit)


@dataclass(slots=True)
class AIMDLimit:
    """Concurrency that backs off on congestion: +`increase` per window of successes (a
    window being `limit` of them), times `decrease` on a 429 or an overload. One cut per window:
    a failure of a request sent before the last cut was already answered by it."""

    ceiling: int
    floor: int = 1
    increase: float = 1.0
    decrease: float = 0.5
    limit: float = 0.0
    last_cut: float = -math.inf

    def __post_init__(self) -> None:
        if self.limit <= 0:
            self.limit = float(self.ceiling)

    @property
    def allowed(self) -> int:
        return max(self.floor, math.floor(self.limit + _EPSILON))

    def on_success(self) -> None:
        self.limit = min(float(self.ceiling), self.limit + self.increase / self.limit)

    def on_congestion(self, sent_at: float, now: float) -> bool:
        """Cut the limit unless this request left before the last cut. True if cut."""
        if sent_at < self.last_cut:
            return False
        self.limit = max(float(self.floor), self.limit * self.decrease)
        self.last_cut = now
        return True


CircuitState = Literal["closed", "open", "half_open"]


@dataclass(slots=True)
class CircuitBreaker:
    """Opens after `threshold` backend failures in a row (529s, 5xx, no answer). While open
    nothing is sent; after `cooldown` it is half open and lets `probes` requests through at a
    time: a success closes it, a failure opens it again for twice as long (up to
    `max_cooldown`)."""

    threshold: int = 5
    cooldown: float = 5.0
    max_cooldown: float = 120.0
    probes: int = 1
    failures: int = 0
    opened_until: float | None = None
    current_cooldown: float = 0.0
    probes_out: int = 0

    def state(self, now: float) -> CircuitState:
        if self.opened_until is None:
            return "closed"
        return "open" if now < self.opened_until else "half_open"

    def blocked_until(self, now: float) -> float | None:
        """When sending may resume, if the circuit is open now."""
        return self.opened_until if self.state(now) == "open" else None

    def may_probe(self, now: float) -> bool:
        return self.state(now) != "half_open" or self.probes_out < self.probes

    def on_sent(self, now: float) -> bool:
        """A request left; True if it is a probe (its end must be reported with probe=True)."""
        if self.state(now) == "half_open":
            self.probes_out += 1
            return True
        return False

    def on_success(self, probe: bool) -> None:
        self.failures = 0
        if probe:
            self.probes_out -= 1
            self.opened_until, self.current_cooldown = None, 0.0

    def on_failure(self, probe: bool, now: float) -> None:
        self.failures += 1
        if probe:
            self.probes_out -= 1
        if probe or (self.opened_until is None and self.failures >= self.threshold):
            self.current_cooldown = min(
                self.max_cooldown, self.current_cooldown * 2 or self.cooldown
            )
            self.opened_until = now + self.current_cooldown

    def on_abandoned(self, probe: bool) -> None:
        """A request ended with no verdict on the backend (cancelled, refused by the codec)."""
        if probe:
            self.probes_out -= 1


@dataclass(slots=True)
class InputCalibration:
    """How far off the chars/4 input estimate is, learned from reported usage. The factor is
    the largest ratio of the last `window` answers: reserving too little is what causes 429s,
    reserving a little too much only delays a request until the reservation is reconciled."""

    window: int = 32
    ratios: deque[float] = field(default_factory=deque)

    def observe(self, estimate: int, actual: int) -> None:
        if estimate <= 0 or actual <= 0:
            return
        self.ratios.append(actual / estimate)
        if len(self.ratios) > self.window:
            self.ratios.popleft()

    @property
    def factor(self) -> float:
        return max(self.ratios) if self.ratios else 1.0

    def tokens(self, estimate: int) -> int:
        return math.ceil(estimate * self.factor)
