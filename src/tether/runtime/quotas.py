"""Per-tenant quotas: sessions running at once, threads running at once (sessions and their
sub-agents), starts per minute, spending per day, and the ceilings a spec may ask for
(output tokens per request, tokens and dollars per session).

`Quota` is what the operator sets for a tenant (the tokens file of `tether serve`);
`Admission` admits a start or a turn, or refuses it with `QuotaExceeded` before anything is
created, and admits the sub-agent threads this process's workers open. What is counted
where:

- `max_running`, in the store: the append that creates a session, or that sends an idle
  one a message (a turn), carries a `catalog.Admit`, and the store counts the tenant's
  running sessions in its catalog in that append's transaction. It holds across every
  process on one store.
- `max_threads`: the tenant's running sessions from the catalog (every process's), plus,
  per process, the sub-agent threads this process's workers run and the starts under way
  here. Another process's sub-agent threads are not counted here, and two processes
  admitting at the same moment may each admit the last thread.
- spending per day, from the catalog: the tokens and cost of the tenant's sessions updated
  in the last 24 hours, each session's whole spending dated at its last update (so a
  session that spent over several days counts all of it until a day after its last
  event). Read at most every `SPEND_FRESH` seconds per tenant; in between, what this
  process's workers spend is added as it is spent.
- starts per minute, per process (`TenantLoad`): a token bucket of each tenant's starts
  here; N server processes admit up to N times the rate.

It appends nothing itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import get_args

from tether.errors import QuotaExceeded, UsageError
from tether.events import ContextCompacted, Event, ModelResponded, SamplingAnswered, format_time
from tether.fold import Folder
from tether.limits import Limits
from tether.runtime.base import CapabilityRefused, SessionSpec
from tether.runtime.spend import DAY, SpendWindow
from tether.state import State
from tether.store.base import Store
from tether.store.catalog import (
    RESTING,
    RUNNING_RETRY_AFTER,
    Admit,
    CatalogQuery,
    refusal,
    sort_key,
)

# The states of a session with an open turn: what `max_running` and `max_threads` count.
RUNNING_STATES = frozenset(get_args(State)) - RESTING
# Seconds a tenant's spending read from the catalog is used before it is read again.
SPEND_FRESH = 5.0
PAGE = 500  # catalog rows read at once while summing a tenant's spending


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
    """What this process alone counts for each tenant: its starts per minute (a bucket), the
    starts under way here (admitted, not yet in the catalog), the sub-agent threads its
    workers run, and the spending read from the catalog (`spend`, read at `spend_read`)."""

    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time  # spending is dated by the log's times
    reserved: dict[str, int] = field(default_factory=dict)
    threads: dict[str, int] = field(default_factory=dict)  # sub-agent threads running here
    spend: dict[str, SpendWindow] = field(default_factory=dict)
    spend_read: dict[str, float] = field(default_factory=dict)  # by `clock`
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

    def here(self, tenant: str) -> int:
        """Threads of the tenant this process counts that the catalog does not show: starts
        under way and its workers' sub-agent threads."""
        return self.reserved.get(tenant, 0) + self.threads.get(tenant, 0)

    def spent(self, tenant: str, quota: Quota) -> QuotaExceeded | None:
        """Why the tenant may not start or open a turn for what it spent, or None."""
        window = self.spend.get(tenant)
        if window is None:
            return None
        now = self.wall()
        tokens, cost = window.spent(tenant, now)
        for name, spent, limit, of in (
            ("max_tokens_per_day", tokens, quota.max_tokens_per_day, "tokens"),
            ("max_cost_usd_per_day", cost, quota.max_cost_usd_per_day, "cost_usd"),
        ):
            if limit is not None and spent >= limit:
                wait = window.wait(tenant, now, limit, of)
                amount = f"{spent} tokens" if of == "tokens" else f"{spent:.2f} USD"
                return QuotaExceeded(
                    f"tenant {tenant} spent {amount} in the last 24 hours, its limit is "
                    f"{limit} ({name}); try again in {wait:.0f} s",
                    wait,
                )
        return None


def threads_refusal(tenant: str, threads: int, limit: int) -> str:
    return (
        f"tenant {tenant} has {threads} threads running (sessions and their sub-agents), "
        f"its limit is {limit} (max_threads)"
    )


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
    """Admits starts and turns of the tenants of one runtime against their quotas, reading
    the store's catalog; and, as the `ThreadGate` of its workers' engines, their sub-agent
    threads, and what they spent. `quotas`: each tenant's quota, for threads and spending no
    request names (None: the quota its last request came with)."""

    def __init__(
        self,
        store: Store,
        load: TenantLoad | None = None,
        quotas: Callable[[str], Quota] | None = None,
    ) -> None:
        self.store = store
        self.load = load or TenantLoad()
        self.lookup = quotas
        self.quotas: dict[str, Quota] = {}  # as the tenant's last request came with it
        self._reading: dict[str, asyncio.Future[None]] = {}  # spending being read, by tenant

    def quota_of(self, tenant: str) -> Quota:
        if self.lookup is not None:
            return self.lookup(tenant)
        return self.quotas.get(tenant) or Quota()

    @contextlib.asynccontextmanager
    async def start(self, tenant: str | None, quota: Quota) -> AsyncIterator[Admit | None]:
        """Admit one more running session of `tenant`, or raise `QuotaExceeded` before
        anything is created. The block creates the session with the `Admit` it is given
        (None: no `max_running`), with which the store counts the tenant's running sessions
        in the creating append. No tenant, or no such quota: always admitted."""
        load = self.load
        if tenant is None or not (
            quota.counts_sessions or quota.counts_spend or quota.starts_per_minute
        ):
            yield None
            return
        await self._admit(tenant, quota)
        if quota.starts_per_minute is not None:
            load.take_start(tenant, quota.starts_per_minute)
        load.reserved[tenant] = load.reserved.get(tenant, 0) + 1
        try:
            yield _store_admit(tenant, quota)
        except BaseException:
            if quota.starts_per_minute is not None:
                load.give_back_start(tenant, quota.starts_per_minute)
            raise
        finally:
            load.reserved[tenant] -= 1

    async def fork(self, tenant: str | None, quota: Quota) -> None:
        """Admit a fork born with a turn to run, as a start is (`start`: threads, spending,
        starts per minute), or raise `QuotaExceeded`. `Store.fork` carries no `Admit`, so
        `max_running` is counted from the catalog here, just before the fork is stored: two
        forks of one tenant at the same moment may both take its last place."""
        async with self.start(tenant, quota) as admit:
            if admit is None:
                return
            counts = await self.store.catalog_counts(
                CatalogQuery(tenant=admit.tenant, states=RUNNING_STATES)
            )
            running = sum(counts.get(s, 0) for s in RUNNING_STATES)
            if running >= admit.max_running:
                raise QuotaExceeded(refusal(admit, running), RUNNING_RETRY_AFTER)

    async def turn(self, tenant: str | None, quota: Quota, folder: Folder) -> Admit | None:
        """A message to an idle session opens a turn: it runs again, so it counts against
        the tenant's running sessions and threads, and is refused once its spending is
        spent (`QuotaExceeded`). Returns the `Admit` its append carries (`control.
        send_message` applies it only if the session is idle when the message lands)."""
        if tenant is None or folder.terminal:
            return None
        if not is_running(folder) and (quota.max_threads is not None or quota.counts_spend):
            await self._admit(tenant, quota)
        return _store_admit(tenant, quota)

    async def _admit(self, tenant: str, quota: Quota) -> None:
        """Raise `QuotaExceeded` unless one more running session fits the tenant's threads
        and spending (its running sessions are the store's to count)."""
        if quota.max_threads is not None:
            threads = await self._threads(tenant)
            if threads >= quota.max_threads:
                raise QuotaExceeded(
                    f"{threads_refusal(tenant, threads, quota.max_threads)}; start more when "
                    "some have ended",
                    RUNNING_RETRY_AFTER,
                )
        if quota.counts_spend:
            await self._read_spend(tenant)
            refused = self.load.spent(tenant, quota)
            if refused is not None:
                raise refused

    async def _threads(self, tenant: str) -> int:
        """The tenant's threads: its running sessions in the catalog, and what this process
        counts besides (`TenantLoad.here`)."""
        counts = await self.store.catalog_counts(CatalogQuery(tenant=tenant, states=RUNNING_STATES))
        return sum(counts.get(s, 0) for s in RUNNING_STATES) + self.load.here(tenant)

    # -- the thread gate: sub-agent threads of this process's workers -----------------------
    async def enter_thread(self, tenant: str) -> str | None:
        """Count one more sub-agent thread of `tenant`, or say why it may not start."""
        load = self.load
        limit = self.quota_of(tenant).max_threads
        if limit is not None:
            threads = await self._threads(tenant)
            if threads >= limit:
                return threads_refusal(tenant, threads, limit)
        load.threads[tenant] = load.threads.get(tenant, 0) + 1
        return None

    def leave_thread(self, tenant: str) -> None:
        self.load.threads[tenant] -= 1

    def observe(self, tenant: str, event: Event) -> None:
        """Count what a run of this process's workers spent (a model answer, a summary, a
        sampling request) into the tenant's spending read from the catalog, until it is
        read again (which then holds it)."""
        p = event.payload
        if not isinstance(p, ModelResponded | ContextCompacted | SamplingAnswered):
            return
        window = self.load.spend.get(tenant)
        if window is not None:
            tokens = p.usage.input_tokens + p.usage.output_tokens
            window.add(tenant, tokens, p.cost_usd or 0.0, self.load.wall())

    async def _read_spend(self, tenant: str) -> None:
        """The tenant's spending in the last 24 hours from the catalog, unless read within
        `SPEND_FRESH` seconds; admissions that come while it is read wait for that read."""
        load = self.load
        if load.clock() - load.spend_read.get(tenant, -math.inf) < SPEND_FRESH:
            return
        reading = self._reading.get(tenant)
        if reading is None:
            reading = asyncio.ensure_future(self._spend_of(tenant))
            self._reading[tenant] = reading
            reading.add_done_callback(functools.partial(self._read, tenant))
        await asyncio.shield(reading)

    def _read(self, tenant: str, reading: asyncio.Future[None]) -> None:
        self._reading.pop(tenant, None)
        if not reading.cancelled():
            reading.exception()  # retrieved: its waiters, if any are left, raise it

    async def _spend_of(self, tenant: str) -> None:
        """Every catalog row of the tenant updated in the last 24 hours, most recently
        updated first, each session's tokens and cost dated at its last update."""
        load = self.load
        now = load.clock()
        since = format_time(load.wall() - DAY)
        window = SpendWindow()
        query = CatalogQuery(tenant=tenant, sort="updated", limit=PAGE)
        while True:
            page = await self.store.catalog(query)
            for row in page:
                if row.updated < since:
                    break
                if row.tokens or row.cost_usd:
                    window.add(tenant, row.tokens, row.cost_usd or 0.0, _epoch(row.updated))
            else:
                if len(page) == PAGE:
                    query = dataclasses.replace(query, after=sort_key(page[-1], "updated"))
                    continue
            break
        load.spend[tenant] = window
        load.spend_read[tenant] = now


def _store_admit(tenant: str, quota: Quota) -> Admit | None:
    return None if quota.max_running is None else Admit(tenant, quota.max_running)


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()
