"""Rate limits shared by every worker on every machine: token buckets kept in PostgreSQL.

Owns `SharedBucket` (refilled and taken atomically by the database's clock, in one
statement) and `SharedLimits`, a `Model` that takes from the buckets before each call. Wrap
a codec in it and the gateway around that — `Gateway(SharedLimits(codec, store, ...))` — and
the per-backend budget holds across all workers, while each gateway still orders, retries
and bounds concurrency locally. It does not queue or prioritise: the gateway does.
"""

from __future__ import annotations

import asyncio
import time

from tether.errors import GatewayBusy, UsageError
from tether.providers.base import Model, ModelRequest, ModelResponse
from tether.scheduler.estimate import estimate_request_tokens
from tether.store.postgres import PostgresStore

# Waiting for a shared budget is asked again at least this often: another worker may have
# given tokens back, or the limit may have been raised.
_MAX_POLL = 1.0


class SharedBucket:
    """`capacity` tokens, refilled at `per_minute / 60` a second (a provider's "N per minute"
    is a full minute's worth, like the gateway's own buckets). Every process naming the same
    bucket shares one budget."""

    def __init__(
        self, store: PostgresStore, name: str, per_minute: float, capacity: float | None = None
    ) -> None:
        if not per_minute > 0:
            raise UsageError(f"bucket {name}: per_minute must be positive, not {per_minute!r}")
        self.store = store
        self.name = name
        self.rate = per_minute / 60.0
        self.capacity = float(capacity if capacity is not None else per_minute)

    async def try_take(self, amount: float) -> float:
        """Take `amount` now if the budget allows: 0.0. Otherwise take nothing and return the
        seconds until it would."""
        row = await self.store.fetch_one(
            "SELECT tether_bucket_take(%s, %s, %s, %s)",
            (self.name, self.capacity, self.rate, float(amount)),
        )
        return 0.0 if row is None else float(row[0])

    async def take(self, amount: float, *, max_wait: float | None = None) -> float:
        """Wait until `amount` is taken; the seconds waited. Past `max_wait`, `GatewayBusy`."""
        started = time.monotonic()
        while True:
            wait = await self.try_take(amount)
            waited = time.monotonic() - started
            if wait <= 0:
                return waited
            if max_wait is not None and waited + wait > max_wait:
                raise GatewayBusy(
                    f"the shared budget {self.name} has no room for {amount:g} within "
                    f"{max_wait:g} s; not sent"
                )
            await asyncio.sleep(min(wait, _MAX_POLL))

    async def give(self, amount: float) -> None:
        """Return what a call reserved and did not use (never above the capacity)."""
        await self.store.execute(
            "UPDATE tether_buckets SET level = least(capacity, level + %s) WHERE name = %s",
            (float(amount), self.name),
        )

    async def level(self) -> float:
        """The budget left now (refilled to this moment, by the database's clock)."""
        row = await self.store.fetch_one(
            "SELECT least(capacity, level + greatest(0, tether_now() - updated) * rate) "
            "FROM tether_buckets WHERE name = %s",
            (self.name,),
        )
        return self.capacity if row is None else float(row[0])


def _bucket(
    store: PostgresStore, name: str, per_minute: float | None, headroom: float
) -> SharedBucket | None:
    if not per_minute:
        return None
    return SharedBucket(store, name, per_minute, capacity=per_minute * (1 - headroom / 60))


class SharedLimits:
    """A `Model` that spends from shared request and token budgets before each call of the
    model it wraps. A call reserves its input estimate plus its output cap of the token
    budget; what the answer did not use is given back.

    The backend counts a request when it arrives, a little after it was taken from the
    budget, and not always in the order taken: the buckets hold `headroom` seconds' worth
    less than a full minute, so that jitter never puts the workers past the backend's count."""

    def __init__(
        self,
        model: Model,
        store: PostgresStore,
        *,
        backend: str | None = None,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        default_output_tokens: int = 4096,
        max_wait: float | None = None,
        headroom: float = 1.0,
    ) -> None:
        # Keyed by what the model is (provider, URL, credentials), not its name alone: two
        # backends that share a model name never share a budget.
        identity = getattr(model, "identity", None)
        key = backend or (identity if isinstance(identity, str) else model.name)
        self.model = model
        self.requests = _bucket(store, f"{key}:requests", requests_per_minute, headroom)
        self.tokens = _bucket(store, f"{key}:tokens", tokens_per_minute, headroom)
        self.default_output_tokens = default_output_tokens
        self.max_wait = max_wait

    @property
    def name(self) -> str:
        return self.model.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        reserved = 0
        if self.tokens is not None:
            output_cap = request.max_output_tokens or self.default_output_tokens
            reserved = estimate_request_tokens(request) + output_cap
            await self.tokens.take(reserved, max_wait=self.max_wait)
        if self.requests is not None:
            await self.requests.take(1, max_wait=self.max_wait)
        response = await self.model.complete(request)
        used = response.usage.input_tokens + response.usage.output_tokens
        if self.tokens is not None and 0 < used < reserved:
            await self.tokens.give(reserved - used)
        return response

    async def aclose(self) -> None:
        close = getattr(self.model, "aclose", None)
        if close is not None:
            await close()
