"""What each tenant's sessions spent in a rolling window (tokens and dollars), for the spend
quotas of `quotas`: kept in one-minute buckets, so a day holds at most 1,440 per tenant.

It is told what was spent and when; it reads no clock and appends nothing."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

DAY = 86_400.0
BUCKET = 60.0  # seconds of spending summed into one bucket


@dataclass(slots=True)
class _Bucket:
    start: float
    tokens: int = 0
    cost_usd: float = 0.0


@dataclass(slots=True)
class SpendWindow:
    """Tokens and cost per tenant over the last `window` seconds."""

    window: float = DAY
    _buckets: dict[str, deque[_Bucket]] = field(default_factory=dict)

    def add(self, tenant: str, tokens: int, cost_usd: float, at: float) -> None:
        buckets = self._buckets.setdefault(tenant, deque())
        start = at - at % BUCKET
        if buckets and buckets[-1].start == start:
            bucket = buckets[-1]
        elif buckets and start < buckets[-1].start:  # late news (a seed): kept in order
            bucket = _Bucket(start)
            buckets.append(bucket)
            self._buckets[tenant] = deque(sorted(buckets, key=lambda b: b.start))
        else:
            bucket = _Bucket(start)
            buckets.append(bucket)
        bucket.tokens += tokens
        bucket.cost_usd += cost_usd
        self._drop_old(tenant, at)

    def spent(self, tenant: str, now: float) -> tuple[int, float]:
        """(tokens, cost) the tenant spent in the window up to `now`."""
        self._drop_old(tenant, now)
        buckets = self._buckets.get(tenant, ())
        return sum(b.tokens for b in buckets), sum(b.cost_usd for b in buckets)

    def wait(self, tenant: str, now: float, fits: float, of: str) -> float:
        """Seconds until what the window holds of `of` ("tokens" or "cost_usd") is below
        `fits`, as its oldest buckets leave it (the window itself when nothing leaves)."""
        held = self.spent(tenant, now)[0 if of == "tokens" else 1]
        for bucket in self._buckets.get(tenant, ()):
            held -= getattr(bucket, of)
            if held < fits:
                return max(1.0, bucket.start + BUCKET + self.window - now)
        return self.window

    def _drop_old(self, tenant: str, now: float) -> None:
        buckets = self._buckets.get(tenant)
        while buckets and buckets[0].start + BUCKET <= now - self.window:
            buckets.popleft()
