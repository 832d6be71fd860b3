"""Per-tenant quotas of one runtime process: sessions running at once, starts per minute and
the output-token cap a spec may ask for.

`Quota` is what the operator sets for a tenant (the tokens file of `tether serve`);
`TenantLoad` counts against it. It counts what this process started or was asked to wake,
plus, once per tenant, the open sessions among the store's most recent: several server
processes on one store each hold their own count. It appends nothing and reads no log.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tether.errors import QuotaExceeded, UsageError

# A running session's end cannot be foreseen: a refused start is told to try this much later.
RUNNING_RETRY_AFTER = 5.0


@dataclass(frozen=True, slots=True)
class Quota:
    """`max_running`: sessions with an open turn at once; `starts_per_minute`: sessions
    started (a burst of up to that many, refilled evenly); `max_output_tokens`: the highest
    output cap a spec may ask for, and the cap of a spec that asks for none. None: unlimited."""

    max_running: int | None = None
    starts_per_minute: float | None = None
    max_output_tokens: int | None = None

    def __post_init__(self) -> None:
        for name, kinds in (
            ("max_running", int),
            ("starts_per_minute", int | float),
            ("max_output_tokens", int),
        ):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, kinds)
                or not math.isfinite(value)
                or value <= 0
            ):
                what = "whole number" if kinds is int else "number"
                raise UsageError(f"quota {name} must be a positive {what}, not {value!r}")

    @property
    def unlimited(self) -> bool:
        return self.max_running is self.starts_per_minute is self.max_output_tokens is None


@dataclass(slots=True)
class _Bucket:
    level: float
    at: float


@dataclass(slots=True)
class TenantLoad:
    """The counts of every tenant of one process. `open` holds the sessions known to have an
    open turn (pruned against their state when a tenant reaches its limit); `reserved` the
    starts between admission and creation, so concurrent starts cannot all pass one check."""

    clock: Callable[[], float] = time.monotonic
    open: dict[str, set[str]] = field(default_factory=dict)
    seeded: set[str] = field(default_factory=set)
    reserved: dict[str, int] = field(default_factory=dict)
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def take_start(self, tenant: str, per_minute: float) -> None:
        """Spend one start from the tenant's bucket, or raise `QuotaExceeded`."""
        now = self.clock()
        bucket = self._buckets.setdefault(tenant, _Bucket(per_minute, now))
        bucket.level = min(per_minute, bucket.level + (now - bucket.at) * per_minute / 60.0)
        bucket.at = now
        if bucket.level < 1.0:
            wait = (1.0 - bucket.level) * 60.0 / per_minute
            raise QuotaExceeded(
                f"tenant {tenant} may start {per_minute:g} sessions a minute; try again in "
                f"{wait:.1f} s",
                wait,
            )
        bucket.level -= 1.0

    def give_back_start(self, tenant: str, per_minute: float) -> None:
        """A start that created nothing (refused later) does not count."""
        bucket = self._buckets.get(tenant)
        if bucket is not None:
            bucket.level = min(per_minute, bucket.level + 1.0)

    def running(self, tenant: str) -> set[str]:
        return self.open.setdefault(tenant, set())

    def refuse_running(self, tenant: str, limit: int) -> None:
        count = len(self.running(tenant)) + self.reserved.get(tenant, 0)
        if count >= limit:
            raise QuotaExceeded(
                f"tenant {tenant} has {count} sessions running, its limit is {limit}; "
                "start more when some have ended",
                RUNNING_RETRY_AFTER,
            )

    def reserve(self, tenant: str) -> None:
        self.reserved[tenant] = self.reserved.get(tenant, 0) + 1

    def settle(self, tenant: str, session_id: str | None) -> None:
        """A reserved start has created `session_id` (None: it created nothing)."""
        self.reserved[tenant] -= 1
        if session_id is not None:
            self.running(tenant).add(session_id)
