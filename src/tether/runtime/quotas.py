"""Per-tenant quotas of one runtime process: sessions running at once, threads running at
once (sessions and their sub-agents), starts per minute, spending per day, and the ceilings
a spec may ask for (output tokens per request, tokens and dollars per session).

`Quota` is what the operator sets for a tenant (the tokens file of `tether serve`);
`TenantLoad` counts against it (the one place counts live, so that a shared count can
replace it); `Admission` admits a start or a turn, or refuses it with `QuotaExceeded` before
anything is created, and admits the sub-agent threads this process's workers open. It
counts what this process started or was asked to wake and what its workers spent, plus,
once per tenant, the open sessions among the store's most recent and what those spent in
the window: several server processes on one store each hold their own count. It appends
nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime

from tether.errors import QuotaExceeded, UsageError
from tether.events import ContextCompacted, Event, ModelResponded, SamplingAnswered
from tether.fold import Folder
from tether.limits import Limits
from tether.runtime.base import CapabilityRefused, SessionSpec
from tether.runtime.sessions import Views
from tether.runtime.spend import DAY, SpendWindow
from tether.store.base import Store

# A running session's end cannot be foreseen: a refused start is told to try this much later.
RUNNING_RETRY_AFTER = 5.0


@dataclass(frozen=True, slots=True)
class Quota:
    """`max_running`: sessions with an open turn at once; `max_threads`: threads running at
    once, each such session's own and every sub-agent thread its workers here run;
    `starts_per_minute`: sessions started (a burst of up to that many, refilled evenly);
    `max_output_tokens`, `max_tokens`, `max_cost_usd`: the highest `limits` of that name a
    spec may ask for, and what a spec that names none gets; `max_tokens_per_day`,
    `max_cost_usd_per_day`: what the tenant's sessions may spend in any 24 hours before new
    starts and turns are refused. None: unlimited."""

    max_running: int | None = None
    starts_per_minute: float | None = None
    max_output_tokens: int | None = None
    max_threads: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_tokens_per_day: int | None = None
    max_cost_usd_per_day: float | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # annotations are strings here (__future__)
            name, kinds = f.name, int if f.type == "int | None" else int | float
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
    def counts_sessions(self) -> bool:
        """Whether admitting needs the tenant's running sessions counted."""
        return self.max_running is not None or self.max_threads is not None

    @property
    def counts_spend(self) -> bool:
        return self.max_tokens_per_day is not None or self.max_cost_usd_per_day is not None


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
    wall: Callable[[], float] = time.time  # spending is dated by the log's times
    open: dict[str, set[str]] = field(default_factory=dict)
    seeded: set[str] = field(default_factory=set)
    reserved: dict[str, int] = field(default_factory=dict)
    threads: dict[str, int] = field(default_factory=dict)  # sub-agent threads running here
    spend: SpendWindow = field(default_factory=SpendWindow)
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def in_use(self, tenant: str) -> tuple[int, int]:
        """(sessions, threads) the tenant runs now: sessions with an open turn (and starts
        under way), and those with every sub-agent thread running here."""
        sessions = len(self.running(tenant)) + self.reserved.get(tenant, 0)
        return sessions, sessions + self.threads.get(tenant, 0)

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

    def refusal(self, tenant: str, quota: Quota) -> QuotaExceeded | None:
        """Why one more running session (one more thread) of the tenant is refused now."""
        sessions, threads = self.in_use(tenant)
        if quota.max_running is not None and sessions >= quota.max_running:
            return QuotaExceeded(
                f"tenant {tenant} has {sessions} sessions running, its limit is "
                f"{quota.max_running} (max_running); start more when some have ended",
                RUNNING_RETRY_AFTER,
            )
        if quota.max_threads is not None and threads >= quota.max_threads:
            return QuotaExceeded(
                f"tenant {tenant} has {threads} threads running (sessions and their "
                f"sub-agents), its limit is {quota.max_threads} (max_threads); start more "
                "when some have ended",
                RUNNING_RETRY_AFTER,
            )
        now = self.wall()
        tokens, cost = self.spend.spent(tenant, now)
        for name, spent, limit, of in (
            ("max_tokens_per_day", tokens, quota.max_tokens_per_day, "tokens"),
            ("max_cost_usd_per_day", cost, quota.max_cost_usd_per_day, "cost_usd"),
        ):
            if limit is not None and spent >= limit:
                wait = self.spend.wait(tenant, now, limit, of)
                amount = f"{spent} tokens" if of == "tokens" else f"{spent:.2f} USD"
                return QuotaExceeded(
                    f"tenant {tenant} spent {amount} in the last 24 hours, its limit is "
                    f"{limit} ({name}); try again in {wait:.0f} s",
                    wait,
                )
        return None

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
    """The spec within the tenant's ceilings (`max_output_tokens`, `max_tokens`,
    `max_cost_usd`): refused above one (`CapabilityRefused`, naming it), given it when it
    names none. Each sub-agent is held to them too, and given the output cap (each sends its
    own requests); its tokens and dollars count against the session's, which hold."""
    limits = spec.limits
    for name in CEILINGS:
        limits = _capped(limits, name, getattr(quota, name))
    agents = {}
    for agent_name, agent in spec.agents.items():
        held = agent.limits
        for name in CEILINGS:
            given = name == "max_output_tokens"
            held = _capped(held, name, getattr(quota, name), f"agents.{agent_name}.", given)
        agents[agent_name] = dataclasses.replace(agent, limits=held)
    return dataclasses.replace(spec, limits=limits, agents=agents)


CEILINGS = ("max_output_tokens", "max_tokens", "max_cost_usd")


def _capped(
    limits: Limits, name: str, cap: float | None, where: str = "", given: bool = True
) -> Limits:
    """`limits` with `name` at most `cap` (refused above it), and at `cap` when unset if
    `given`."""
    if cap is None:
        return limits
    asked = getattr(limits, name)
    if asked is not None and asked > cap:
        raise CapabilityRefused(
            f"{where}limits.{name} {asked} is over this tenant's cap of {cap} ({name})"
        )
    if asked is not None or not given:
        return limits
    return dataclasses.replace(limits, **{name: cap})  # type: ignore[arg-type]


def is_running(folder: Folder) -> bool:
    """A turn is open: the session takes a worker, a model call or a tool now or soon."""
    return not folder.terminal and folder.state != "idle"


class Admission:
    """Admits starts and turns of the tenants of one runtime against their quotas, with the
    runtime's store and folds to tell which counted sessions still run; and, as the
    `ThreadGate` of its workers' engines, their sub-agent threads, and what they spent.
    `quotas`: each tenant's quota, for threads and spending no request names (None: the
    quota its last request came with)."""

    def __init__(
        self,
        store: Store,
        views: Views,
        load: TenantLoad | None = None,
        quotas: Callable[[str], Quota] | None = None,
    ) -> None:
        self.store = store
        self.views = views
        self.load = load or TenantLoad()
        self.lookup = quotas
        self.quotas: dict[str, Quota] = {}  # as the tenant's last request came with it

    def quota_of(self, tenant: str) -> Quota:
        if self.lookup is not None:
            return self.lookup(tenant)
        return self.quotas.get(tenant) or Quota()

    @contextlib.asynccontextmanager
    async def start(self, tenant: str | None, quota: Quota) -> AsyncIterator[list[str]]:
        """Admit one more running session of `tenant`, or raise `QuotaExceeded` before
        anything is created. The block appends the session it made (an idempotent retry of
        one already counted changes nothing). No tenant, or no such quota: always admitted."""
        load = self.load
        if tenant is None or not (
            quota.counts_sessions or quota.counts_spend or quota.starts_per_minute
        ):
            yield []
            return
        await self._admit(tenant, quota)
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
        the tenant's running sessions and threads, and is refused once its spending is
        spent (`QuotaExceeded`)."""
        if tenant is None or folder.terminal or is_running(folder):
            return
        if not (quota.counts_sessions or quota.counts_spend):
            return
        await self._admit(tenant, quota)
        self.load.running(tenant).add(session_id)

    async def _admit(self, tenant: str, quota: Quota) -> None:
        """Raise `QuotaExceeded` unless one more running session fits, its counts brought up
        to date first when they say it does not."""
        if quota.counts_sessions or quota.counts_spend:
            await self._seed(tenant)
        if self.load.refusal(tenant, quota) is not None:
            await self._prune(tenant)
        refused = self.load.refusal(tenant, quota)
        if refused is not None:
            raise refused

    # -- the thread gate: sub-agent threads of this process's workers -----------------------
    async def enter_thread(self, tenant: str) -> str | None:
        """Count one more sub-agent thread of `tenant`, or say why it may not start."""
        load = self.load
        limit = self.quota_of(tenant).max_threads
        if limit is not None:
            await self._seed(tenant)
            if load.in_use(tenant)[1] >= limit:
                await self._prune(tenant)
            threads = load.in_use(tenant)[1]
            if threads >= limit:
                return (
                    f"tenant {tenant} has {threads} threads running (sessions and their "
                    f"sub-agents), its limit is {limit} (max_threads)"
                )
        load.threads[tenant] = load.threads.get(tenant, 0) + 1
        return None

    def leave_thread(self, tenant: str) -> None:
        self.load.threads[tenant] -= 1

    def observe(self, tenant: str, event: Event) -> None:
        """Count what a run of this process's workers spent (a model answer, a summary, a
        sampling request), for tenants whose spending is counted here. Until a tenant is
        seeded, the seed reads it from the store instead."""
        p = event.payload
        if not isinstance(p, ModelResponded | ContextCompacted | SamplingAnswered):
            return
        if tenant in self.load.seeded and self.quota_of(tenant).counts_spend:
            tokens = p.usage.input_tokens + p.usage.output_tokens
            self.load.spend.add(tenant, tokens, p.cost_usd or 0.0, self.load.wall())

    # -- bringing counts up to date ----------------------------------------------------------
    async def _seed(self, tenant: str) -> None:
        """Once per tenant: its open sessions among the store's most recent, and what those
        updated within the spending window spent (all of it, dated at their last update)."""
        load = self.load
        if tenant in load.seeded:
            return
        load.seeded.add(tenant)
        running = load.running(tenant)
        since = load.wall() - DAY
        for info in await self.store.sessions(limit=SEEDED):
            folder = await self.views.get(info.session_id)
            if folder.metadata.get("tenant") != tenant:
                continue
            if is_running(folder):
                running.add(info.session_id)
            updated = _epoch(info.updated)
            if updated >= since and (folder.total_tokens or folder.cost_usd):
                load.spend.add(tenant, folder.total_tokens, folder.cost_usd or 0.0, updated)

    async def _prune(self, tenant: str) -> None:
        """Drop the counted sessions whose turn has closed."""
        running = self.load.running(tenant)
        for session_id in list(running):
            if not is_running(await self.views.get(session_id)):
                running.discard(session_id)


SEEDED = 2_000  # the store's most recent sessions a tenant's counts are seeded from


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()
