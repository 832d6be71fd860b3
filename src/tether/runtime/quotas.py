"""Per-tenant quotas of one runtime process: sessions running at once, starts per minute and
the output-token cap a spec may ask for.

`Quota` is what the operator sets for a tenant (the tokens file of `tether serve`);
`TenantLoad` counts against it; `Admission` admits a start or a turn, or refuses it with
`QuotaExceeded` before anything is created. It counts what this process started or was asked
to wake, plus, once per tenant, the open sessions among the store's most recent: several
server processes on one store each hold their own count. It appends nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from tether.errors import QuotaExceeded, UsageError
from tether.fold import Folder
from tether.limits import Limits
from tether.runtime.base import CapabilityRefused, SessionSpec
from tether.runtime.sessions import Views
from tether.store.base import Store

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


def capped(spec: SessionSpec, quota: Quota) -> SessionSpec:
    """The spec within the tenant's output-token cap: refused above it (`CapabilityRefused`),
    capped at it when it names none; its sub-agents' limits alike (each sends its own)."""
    cap = quota.max_output_tokens
    if cap is None:
        return spec
    agents = {
        name: dataclasses.replace(agent, limits=_capped(agent.limits, cap, f"agents.{name}."))
        for name, agent in spec.agents.items()
    }
    return dataclasses.replace(spec, limits=_capped(spec.limits, cap), agents=agents)


def _capped(limits: Limits, cap: int, where: str = "") -> Limits:
    asked = limits.max_output_tokens
    if asked is not None and asked > cap:
        raise CapabilityRefused(
            f"{where}limits.max_output_tokens {asked} is over this tenant's cap of {cap}"
        )
    return dataclasses.replace(limits, max_output_tokens=asked or cap)


def is_running(folder: Folder) -> bool:
    """A turn is open: the session takes a worker, a model call or a tool now or soon."""
    return not folder.terminal and folder.state != "idle"


class Admission:
    """Admits starts and turns of the tenants of one runtime against their quotas, with the
    runtime's store and folds to tell which counted sessions still run."""

    def __init__(self, store: Store, views: Views, load: TenantLoad | None = None) -> None:
        self.store = store
        self.views = views
        self.load = load or TenantLoad()

    @contextlib.asynccontextmanager
    async def start(self, tenant: str | None, quota: Quota) -> AsyncIterator[list[str]]:
        """Admit one more running session of `tenant`, or raise `QuotaExceeded` before
        anything is created. The block appends the session it made (an idempotent retry of
        one already counted changes nothing). No tenant, or no such quota: always admitted."""
        load = self.load
        if tenant is None or (quota.max_running is None and quota.starts_per_minute is None):
            yield []
            return
        if quota.max_running is not None:
            await self._prune(tenant, quota.max_running)
            load.refuse_running(tenant, quota.max_running)
        if quota.starts_per_minute is not None:
            load.take_start(tenant, quota.starts_per_minute)
        load.reserve(tenant)
        made: list[str] = []
        try:
            yield made
        except BaseException:
            if quota.starts_per_minute is not None:
                load.give_back_start(tenant, quota.starts_per_minute)
            raise
        finally:
            load.settle(tenant, made[0] if made else None)

    async def turn(self, tenant: str | None, quota: Quota, session_id: str, folder: Folder) -> None:
        """A message to an idle session opens a turn: it runs again, so it counts against
        the tenant's running sessions (or is refused with `QuotaExceeded`)."""
        limit = quota.max_running
        if limit is None or tenant is None or folder.terminal or is_running(folder):
            return
        await self._prune(tenant, limit)
        self.load.refuse_running(tenant, limit)
        self.load.running(tenant).add(session_id)

    async def _prune(self, tenant: str, limit: int) -> None:
        """Bring the tenant's count of running sessions up to date: once from the store's
        most recent sessions, then, at the limit, by dropping those whose turn has closed."""
        load = self.load
        running = load.running(tenant)
        if tenant not in load.seeded:
            load.seeded.add(tenant)
            for info in await self.store.sessions(limit=2_000):
                folder = await self.views.get(info.session_id)
                if folder.metadata.get("tenant") == tenant and is_running(folder):
                    running.add(info.session_id)
        if len(running) >= limit:
            for session_id in list(running):
                if not is_running(await self.views.get(session_id)):
                    running.discard(session_id)
