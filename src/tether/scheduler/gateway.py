"""The model gateway: one per backend, the single owner of every call to it. It queues calls
(interactive first, fair between tenants, bounded), sends each when the concurrency, request
and token budgets allow, learns those budgets from the answers, and retries what is worth
retrying. It is itself a `Model`; `for_session` binds a tenant, a session and a priority.

It speaks no wire API (the codec it wraps does) and writes no events (the loop does).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import count
from typing import Literal

from tether.errors import (
    ConnectionFailed,
    GatewayBusy,
    Overloaded,
    Parked,
    ProviderError,
    RateLimited,
    ServerError,
)
from tether.providers.base import Model, ModelRequest, ModelResponse
from tether.providers.rate_limits import RateLimits
from tether.scheduler.budget import Budgets
from tether.scheduler.clock import Clock, LoopClock, Timer
from tether.scheduler.estimate import estimate_request_tokens
from tether.scheduler.figures import Counters, GatewayFigures, wait_figures
from tether.scheduler.limits import AIMDLimit, CircuitBreaker, TokenBucket
from tether.scheduler.queue import PRIORITIES, Entry, FairQueue, Priority
from tether.scheduler.retry import OutputWatch, RetryPolicy
from tether.scheduler.status import GatewayStatus, StatusKind


@dataclass(frozen=True, slots=True)
class Ticket:
    """Who a call is for. Fairness is between tenants; `session_id` names the status.
    `park_after`: a call that would wait this many seconds or more for a spent budget or an
    open circuit leaves the queue at once with `Parked`, so its worker can let the session
    go rather than hold it while it waits (None: it waits)."""

    tenant: str = "default"
    session_id: str = "default"
    priority: Priority = "interactive"
    park_after: float | None = None


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """`requests_per_minute` / `tokens_per_minute` left None are learned from the backend's
    rate-limit headers when it sends them. A call reserves its input estimate plus its output
    cap (`default_output_tokens` when the request sets none). Past `max_queue` waiting calls,
    a new call waits for a place (`when_full="wait"`) or fails with `GatewayBusy` at once
    (`"fail"`); `queue_timeout` bounds each wait for a place and a turn. `batch_aging`: a
    batch call that has waited this many seconds longer than the oldest interactive one goes
    before it, so batch work cannot starve under interactive load (None: strict priority)."""

    max_concurrency: int = 16
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    default_output_tokens: int = 4096
    max_queue: int = 10_000
    when_full: Literal["wait", "fail"] = "wait"
    queue_timeout: float | None = None
    weights: Mapping[str, float] = field(default_factory=dict)
    batch_aging: float | None = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    aimd_decrease: float = 0.5
    circuit_threshold: int = 5
    circuit_cooldown: float = 5.0
    learn_from_headers: bool = True
    seed: int | None = 0


@dataclass(frozen=True, slots=True)
class _Lease:
    sent_at: float
    reserved: int
    probe: bool


# How long after its wait a parked session may come back and still find its place, and how
# many places are kept (the oldest go first).
PLACE_GRACE = 60.0
MAX_PLACES = 10_000


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a parked call stood: its arrival order (None: it queued in another process),
    when it first queued and when its wait for a turn began (aging), kept until `until`."""

    seq: int | None
    arrived: float
    since: float
    until: float


@dataclass(eq=False, slots=True)
class _Waiter:
    ticket: Ticket
    future: asyncio.Future[_Lease]
    reservation: int
    since: float
    entry: Entry[_Waiter] | None = None
    timer: Timer | None = None


@dataclass(eq=False, slots=True)
class _Track:
    """What one call of a session is doing now, for `status`."""

    kind: Literal["waiting", "retrying", "sending"]
    since: float
    waiter: _Waiter | None = None
    until: float | None = None
    attempt: int = 1
    error: str | None = None


class Gateway:
    """`Gateway(model, GatewayConfig(...))`. A `Model` with the wrapped model's name."""

    def __init__(
        self,
        model: Model,
        config: GatewayConfig | None = None,
        *,
        clock: Clock | None = None,
        default: Ticket | None = None,
    ) -> None:
        self.model = model
        self.config = config = config or GatewayConfig()
        self._clock = clock or LoopClock()
        self._default = default or Ticket()
        self._rng = random.Random(config.seed)
        self._queue: FairQueue[_Waiter] = FairQueue(config.weights, batch_aging=config.batch_aging)
        self._overflow: dict[str, deque[_Waiter]] = {}
        self._aimd = AIMDLimit(config.max_concurrency, decrease=config.aimd_decrease)
        self._circuit = CircuitBreaker(config.circuit_threshold, config.circuit_cooldown)
        self._budgets = Budgets(config.requests_per_minute, config.tokens_per_minute)
        self._in_flight = 0
        self._blocked: tuple[StatusKind, float] | None = None
        self._timer: Timer | None = None
        self._timer_at = 0.0
        self._seq = count()
        self._tracks: dict[str, _Track] = {}
        # Waiters whose ticket may be parked: `_park` looks at these, never the whole queue.
        self._parkable: set[_Waiter] = set()
        # The places of parked calls, by session: its next call keeps them (`_Place`).
        self._places: OrderedDict[str, _Place] = OrderedDict()
        self._counters = Counters()

    @property
    def name(self) -> str:
        return self.model.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self.submit(request, self._default)

    def for_session(
        self, *, tenant: str = "default", session_id: str, priority: Priority = "interactive"
    ) -> SessionModel:
        return SessionModel(self, Ticket(tenant, session_id, priority))

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        close = getattr(self.model, "aclose", None)
        if close is not None:
            await close()

    # -- one call ---------------------------------------------------------------------------

    async def submit(self, request: ModelRequest, ticket: Ticket) -> ModelResponse:
        """Queue, send, retry: the answer, or the last error with `attempts` set on it. Each
        failed attempt that will be sent again is told to `request.on_retry` first."""
        now = self._clock.now()
        self._budgets.start(now)
        self._counters.start(now)
        self._counters.requests += 1
        self._counters.requests_by_tenant[ticket.tenant] += 1
        estimate = estimate_request_tokens(request)
        output_cap = request.max_output_tokens or self.config.default_output_tokens
        place = self._place_of(ticket.session_id, now)
        seq = next(self._seq) if place is None or place.seq is None else place.seq
        arrived = now if place is None else place.arrived
        track = _Track("waiting", now)
        self._tracks[ticket.session_id] = track
        watch = OutputWatch(request)
        attempt = 0
        try:
            while True:
                attempt += 1
                reservation = self._budgets.reservation(estimate, output_cap)
                since = place.since if place is not None and attempt == 1 else None
                lease = await self._acquire(
                    ticket, seq, arrived, reservation, track, first=attempt == 1, since=since
                )
                track.kind, track.since = "sending", self._clock.now()
                try:
                    response = await self.model.complete(watch.request)
                except ProviderError as exc:
                    delay = self._settle_failure(lease, exc, attempt, watch.seen)
                    if delay is None:
                        exc.attempts = attempt
                        self._counters.failed += 1
                        raise
                    now = self._clock.now()
                    track.kind, track.since, track.until = "retrying", now, now + delay
                    track.attempt, track.error = attempt, f"{exc.kind}: {exc}"
                    if request.on_retry is not None:
                        await request.on_retry(exc, attempt, delay)
                    await self._clock.sleep_until(now + delay)
                    continue
                except BaseException:
                    self._settle_abandoned(lease)
                    raise
                self._settle_success(lease, response, ticket, estimate)
                return response
        except asyncio.CancelledError:
            self._counters.cancelled += 1
            raise
        finally:
            if self._tracks.get(ticket.session_id) is track:
                del self._tracks[ticket.session_id]

    def _place_of(self, session_id: str, now: float) -> _Place | None:
        """The place a parked call of the session left, if its session is back in time."""
        place = self._places.pop(session_id, None)
        return place if place is not None and now <= place.until else None

    def resume(self, session_id: str, asked_at: float) -> None:
        """The session's next call is one it first asked at `asked_at` (epoch seconds, by
        the clock of whoever asked: the time its log records) and that is still unanswered:
        parked, or left by a runner that stopped, in this process or another. It keeps the
        place of a call that queued then: before every call here that queued later, and
        aged from then. A place this gateway kept when the call parked here stays (it knows
        the call's own arrival order); this one lasts `PLACE_GRACE` seconds."""
        now = self._clock.now()
        kept = self._places.get(session_id)
        if kept is None or now > kept.until:
            arrived = now - max(0.0, time.time() - asked_at)
            self._remember(session_id, _Place(None, arrived, arrived, now + PLACE_GRACE))

    async def _acquire(
        self,
        ticket: Ticket,
        seq: int,
        arrived: float,
        reservation: int,
        track: _Track,
        *,
        first: bool,
        since: float | None = None,
    ) -> _Lease:
        now = self._clock.now()
        waiter = _Waiter(ticket, asyncio.get_running_loop().create_future(), reservation, now)
        track.kind, track.since, track.until, track.waiter = "waiting", now, None, waiter
        # `since`: when the session's parked call first queued, for aging.
        waiter.entry = Entry(
            ticket.tenant,
            ticket.priority,
            reservation,
            seq,
            waiter,
            False,
            since=now if since is None else since,
            arrived=arrived,
        )
        full = len(self._queue) >= self.config.max_queue or any(self._overflow.values())
        if first and full:
            if self.config.when_full == "fail":
                self._counters.rejected_busy += 1
                raise GatewayBusy(
                    f"the gateway for {self.name} has {len(self._queue)} calls waiting "
                    f"(max_queue={self.config.max_queue}); not sent"
                )
            self._overflow.setdefault(ticket.tenant, deque()).append(waiter)
        else:
            # A retried call keeps its place: it was admitted once, and keeps its arrival seq.
            self._queue.push(waiter.entry)
        if self.config.queue_timeout is not None:
            waiter.timer = self._clock.call_at(
                now + self.config.queue_timeout, lambda: self._time_out(waiter)
            )
        if ticket.park_after is not None:
            self._parkable.add(waiter)
        self._pump()
        try:
            return await waiter.future
        except BaseException:
            self._abandon_waiter(waiter)
            raise
        finally:
            self._parkable.discard(waiter)
            track.waiter = None
            if waiter.timer is not None:
                waiter.timer.cancel()

    def _time_out(self, waiter: _Waiter) -> None:
        if waiter.future.done():
            return
        self._abandon_waiter(waiter)
        self._counters.rejected_busy += 1
        waited = self._clock.now() - waiter.since
        waiter.future.set_exception(
            GatewayBusy(
                f"waited {waited:.1f} s for a turn at the gateway for {self.name} "
                f"(queue_timeout={self.config.queue_timeout}); not sent"
            )
        )

    def _abandon_waiter(self, waiter: _Waiter) -> None:
        """The caller left (cancelled, timed out): free its place at once, or give back the
        lease it was granted in the same instant."""
        future = waiter.future
        if future.done() and not future.cancelled() and future.exception() is None:
            self._release(future.result(), self._clock.now())
            return
        if waiter.entry is not None and self._queue.remove(waiter.entry):
            self._pump()
            return
        parked = self._overflow.get(waiter.ticket.tenant)
        if parked is not None and waiter in parked:
            parked.remove(waiter)

    # -- dispatch ---------------------------------------------------------------------------

    def _pump(self) -> None:
        """Send every waiting call the limits allow now, in queue order; when the next one
        must wait for a budget or a circuit, set one timer for when it can go."""
        now = self._clock.now()
        self._admit_overflow()
        self._blocked = None
        while (entry := self._queue.peek()) is not None:
            waiter = entry.payload
            if waiter.future.done():  # cancelled, its handler not yet run
                self._queue.remove(entry)
                continue
            kind, until = self._gate(waiter.reservation, now)
            if kind == "full":
                return
            if until is not None:
                self._blocked = (kind, until)
                self._arm(until)
                self._park(kind, until - now)
                return
            self._queue.pop()
            self._dispatch(waiter, entry.priority, now)
        self._admit_overflow()

    def _park(self, kind: StatusKind, wait: float) -> None:
        """Hand back every queued call whose ticket would rather be parked than wait `wait`
        seconds: nothing can be sent before then, whatever its place in the queue."""
        reason = (
            "the backend's budget is spent"
            if kind == "rate_limited"
            else "the backend is failing (circuit open)"
        )
        for waiter in list(self._parkable):
            park_after, entry = waiter.ticket.park_after, waiter.entry
            if park_after is None or wait < park_after or waiter.future.done():
                continue
            if entry is None or not self._queue.remove(entry):
                continue  # waiting for a place in a full queue: it is not held up by this
            self._parkable.discard(waiter)
            self._keep_place(waiter, entry, wait)
            self._counters.parked += 1
            waiter.future.set_exception(Parked(wait, reason))

    def _keep_place(self, waiter: _Waiter, entry: Entry[_Waiter], wait: float) -> None:
        """Remember a parked call's place (its arrival seq and time, and queue time) for its
        session's next call, made when the session runs again after `wait` (and
        `PLACE_GRACE` more)."""
        until = self._clock.now() + wait + PLACE_GRACE
        place = _Place(entry.seq, entry.arrived, entry.since, until)
        self._remember(waiter.ticket.session_id, place)

    def _remember(self, session_id: str, place: _Place) -> None:
        self._places[session_id] = place
        self._places.move_to_end(session_id)
        while len(self._places) > MAX_PLACES:
            self._places.popitem(last=False)

    def _gate(
        self, reservation: int, now: float
    ) -> tuple[StatusKind | Literal["full"], float | None]:
        opened_until = self._circuit.blocked_until(now)
        if opened_until is not None:
            return "circuit_open", opened_until
        if not self._circuit.may_probe(now) or self._in_flight >= self._aimd.allowed:
            return "full", None
        ready_at = self._budgets.ready_at(reservation, now)
        return ("rate_limited", ready_at) if ready_at is not None else ("queued", None)

    def _dispatch(self, waiter: _Waiter, priority: Priority, now: float) -> None:
        self._budgets.take(waiter.reservation, now)
        probe = self._circuit.on_sent(now)
        self._in_flight += 1
        self._counters.set_in_flight(self._in_flight, now)
        self._counters.attempts += 1
        self._counters.waits[priority].add(now - waiter.since)
        waiter.future.set_result(_Lease(now, waiter.reservation, probe))

    def _admit_overflow(self) -> None:
        """Move callers waiting for a place into the queue, the least-queued tenant (for its
        weight) first, so a full queue cannot starve a small tenant either."""
        while len(self._queue) < self.config.max_queue:
            tenants = [t for t, parked in self._overflow.items() if parked]
            if not tenants:
                self._overflow.clear()
                return
            tenant = min(
                tenants,
                key=lambda t: (
                    self._queue.tenant_depth(t) / self._queue.weight(t),
                    self._overflow[t][0].since,
                ),
            )
            waiter = self._overflow[tenant].popleft()
            if waiter.entry is not None:
                self._queue.push(waiter.entry)

    def _arm(self, when: float) -> None:
        if self._timer is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._clock.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._pump()

    def _release(self, lease: _Lease, now: float) -> None:
        self._in_flight -= 1
        self._counters.set_in_flight(self._in_flight, now)
        self._pump()

    # -- outcomes ---------------------------------------------------------------------------

    def _settle_success(
        self, lease: _Lease, response: ModelResponse, ticket: Ticket, estimate: int
    ) -> None:
        now = self._clock.now()
        usage = response.usage
        used = usage.input_tokens + usage.output_tokens
        if used > 0:
            self._budgets.settle(lease.reserved, estimate, usage.input_tokens, used, now)
            self._queue.charge(ticket.tenant, ticket.priority, used - lease.reserved)
            self._counters.tokens_used += used
            self._counters.input_tokens += usage.input_tokens
            self._counters.cache_read_tokens += usage.cache_read_tokens
            self._counters.tokens_by_tenant[ticket.tenant] += used
        self._aimd.on_success()
        self._circuit.on_success(lease.probe)
        # Codecs that keep the last headers on themselves are read right after the answer,
        # before any other task can run.
        limits = response.rate_limits or getattr(self.model, "last_rate_limits", None)
        if self.config.learn_from_headers and isinstance(limits, RateLimits):
            self._budgets.learn(limits, now)
        self._counters.succeeded += 1
        self._release(lease, now)

    def _settle_failure(
        self, lease: _Lease, error: ProviderError, attempt: int, output_seen: bool = False
    ) -> float | None:
        """Book a failed attempt; the wait before the next one, or None to give up (always,
        once some of its streamed output was shown). A failed attempt keeps its
        reservation: the backend may have counted it."""
        now = self._clock.now()
        counters = self._counters
        congested = isinstance(error, RateLimited | Overloaded)
        if isinstance(error, RateLimited):
            counters.rate_limited += 1
        elif isinstance(error, Overloaded):
            counters.overloaded += 1
        if isinstance(error, ServerError | ConnectionFailed):
            counters.server_errors += 1
        if congested:
            self._aimd.on_congestion(lease.sent_at, now)
            if error.retry_after is not None:
                # The backend's budget is spent for everyone, not just for this call.
                self._budgets.hold(error.retry_after, now)
        if isinstance(error, Overloaded | ServerError | ConnectionFailed):
            was_open = self._circuit.opened_until
            self._circuit.on_failure(lease.probe, now)
            if self._circuit.opened_until != was_open:
                counters.circuit_opened += 1
        else:
            self._circuit.on_success(lease.probe)  # it answered: it is up
        delay = None if output_seen else self.config.retry.delay(error, attempt, self._rng)
        if delay is not None:
            counters.retries += 1
        self._release(lease, now)
        return delay

    def _settle_abandoned(self, lease: _Lease) -> None:
        self._circuit.on_abandoned(lease.probe)
        self._release(lease, self._clock.now())

    # -- reading ----------------------------------------------------------------------------

    def status(self, session_id: str) -> GatewayStatus | None:
        """What the session's call is waiting for; None when it has no call at the gateway."""
        track = self._tracks.get(session_id)
        if track is None:
            return None
        now = self._clock.now()
        if track.kind == "retrying":
            return GatewayStatus(
                "retrying", now, track.since, track.until, track.attempt, track.error
            )
        if track.kind == "sending":
            return GatewayStatus("sending", now, track.since, attempt=track.attempt)
        waiter = track.waiter
        if waiter is not None and (waiter.entry is None or not waiter.entry.live):
            return GatewayStatus(
                "queued", now, track.since, detail="the queue is full: waiting for a place"
            )
        if self._blocked is not None and self._blocked[1] > now:
            kind, until = self._blocked
            detail = "the backend's budget is spent" if kind == "rate_limited" else None
            return GatewayStatus(kind, now, track.since, until, detail=detail)
        return GatewayStatus("queued", now, track.since, detail=f"{len(self._queue)} waiting")

    def figures(self) -> GatewayFigures:
        now = self._clock.now()
        c = self._counters
        elapsed = c.elapsed(now)
        busy = c.busy + c.in_flight * max(0.0, now - c.busy_since)
        ceiling = self.config.max_concurrency

        def used(amount: float, bucket: TokenBucket | None) -> float | None:
            if bucket is None or elapsed <= 0:
                return None
            return amount / (bucket.capacity + bucket.rate * elapsed)

        return GatewayFigures(
            backend=self.name,
            elapsed=elapsed,
            queue_depth=len(self._queue),
            queue_depth_by_priority={p: self._queue.depth(p) for p in PRIORITIES},
            waiting_for_place=sum(len(q) for q in self._overflow.values()),
            in_flight=self._in_flight,
            concurrency_limit=self._aimd.limit,
            max_concurrency=ceiling,
            requests=c.requests,
            attempts=c.attempts,
            succeeded=c.succeeded,
            failed=c.failed,
            rate_limited=c.rate_limited,
            overloaded=c.overloaded,
            server_errors=c.server_errors,
            retries=c.retries,
            rejected_busy=c.rejected_busy,
            cancelled=c.cancelled,
            parked=c.parked,
            circuit=self._circuit.state(now),
            circuit_opened=c.circuit_opened,
            tokens_used=c.tokens_used,
            input_tokens=c.input_tokens,
            cache_read_tokens=c.cache_read_tokens,
            cache_hit_ratio=c.cache_read_tokens / c.input_tokens if c.input_tokens else None,
            input_estimate_factor=self._budgets.calibration.factor,
            tokens_by_tenant=dict(c.tokens_by_tenant),
            requests_by_tenant=dict(c.requests_by_tenant),
            wait={p: wait_figures(c.waits[p]) for p in PRIORITIES},
            utilisation={
                "concurrency": busy / (ceiling * elapsed) if elapsed > 0 else None,
                "requests": used(c.attempts, self._budgets.requests),
                "tokens": used(c.tokens_used, self._budgets.tokens),
            },
        )


class SessionModel:
    """The gateway bound to one tenant, session and priority: a `Model` for one agent."""

    def __init__(self, gateway: Gateway, ticket: Ticket) -> None:
        self.gateway = gateway
        self.ticket = ticket

    @property
    def name(self) -> str:
        return self.gateway.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self.gateway.submit(request, self.ticket)

    def status(self) -> GatewayStatus | None:
        return self.gateway.status(self.ticket.session_id)
