"""Metrics derived from what a process does: from the events it appends (model latency and
time to first token, tokens and cost by tenant and model, tool latency and outcomes by tool,
turns by stop reason, sessions by outcome) and from its workers (takeovers, parks, and at a
scrape their slots, leases and sessions by state, `census`).

Owns the process's registry (`METRICS`), the per-log observer that feeds it and the one-line
hooks the runtime calls. Nothing is counted until a process asks for metrics (`enable()`:
`tether serve` does) or sets a global OpenTelemetry meter provider (`meters`), so a library
run pays nothing per event. Rendering is `prometheus.render`'s.
"""

from __future__ import annotations

import bisect
import sys
import weakref
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tether.events import (
    Event,
    ModelFailed,
    ModelRequested,
    ModelResponded,
    SessionCreated,
    SessionEnded,
    SessionForked,
    ToolFinished,
    ToolStarted,
    TurnEnded,
)
from tether.fold import Folder
from tether.telemetry.census import WorkerLike

# Seconds: from a fast tool to a slow model answer.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

Labels = tuple[str, ...]


@dataclass
class Histogram:
    """Cumulative buckets per label set, as Prometheus wants them. `mirror`: where each
    observation also goes (OpenTelemetry's histogram, when a meter provider is set)."""

    buckets: tuple[float, ...] = BUCKETS
    counts: dict[Labels, list[int]] = field(default_factory=dict)
    sums: defaultdict[Labels, float] = field(default_factory=lambda: defaultdict(float))
    mirror: Callable[[Labels, float], None] | None = None

    def observe(self, labels: Labels, value: float) -> None:
        counts = self.counts.get(labels)
        if counts is None:
            counts = self.counts[labels] = [0] * (len(self.buckets) + 1)
        counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sums[labels] += value
        if self.mirror is not None:
            self.mirror(labels, value)


@dataclass
class Registry:
    enabled: bool = False
    model_seconds: Histogram = field(default_factory=Histogram)  # (model,)
    first_token_seconds: Histogram = field(default_factory=Histogram)  # (model,)
    tool_seconds: Histogram = field(default_factory=Histogram)  # (tool,)
    tokens: Counter[Labels] = field(default_factory=Counter)  # (tenant, model, kind)
    cost_usd: defaultdict[Labels, float] = field(default_factory=lambda: defaultdict(float))
    model_failures: Counter[Labels] = field(default_factory=Counter)  # (model, error class)
    tool_calls: Counter[Labels] = field(default_factory=Counter)  # (tool, outcome)
    turns: Counter[Labels] = field(default_factory=Counter)  # (stop reason,)
    sessions_ended: Counter[Labels] = field(default_factory=Counter)  # (outcome,)
    takeovers: Counter[Labels] = field(default_factory=Counter)  # (verdict,)
    parks: Counter[Labels] = field(default_factory=Counter)  # (reason,)
    # The workers of this process, read at a scrape (`census`); weakly, so a dropped
    # runtime's worker goes away with it.
    workers: weakref.WeakSet[WorkerLike] = field(default_factory=weakref.WeakSet)
    meter_provider: object | None = None  # the OpenTelemetry provider the series go to
    # Each model answer with its model string, as it is counted (the GenAI conventions'
    # client metrics, when a meter provider is set: `meters`).
    on_answer: Callable[[str, ModelResponded], None] | None = None


METRICS = Registry()


def enable() -> None:
    """Count from now on, in every session log this process opens."""
    METRICS.enabled = True


def observers(history: Sequence[Event] = ()) -> tuple[Callable[[Event], None], ...]:
    """The observer a log opened on `history` gets: one when metrics are enabled, or an
    OpenTelemetry meter provider is set (which enables them)."""
    observer = _observer()
    if observer is None:
        return ()
    for event in history:  # learn the tenant, model and open calls; count nothing again
        observer.learn(event)
    return (observer,)


def resumed(folder: Folder) -> tuple[Callable[[Event], None], ...]:
    """The observer a log opened on a fold (a snapshot's, not its events) gets: it learns
    the same from the fold. The model is session.created's until the next request names
    its own; a sub-agent's call that runs on is counted without its duration."""
    observer = _observer()
    if observer is None:
        return ()
    tenant = folder.metadata.get("tenant")
    observer.tenant = tenant if isinstance(tenant, str) and tenant else "default"
    observer.model = folder.model
    observer.calls = {c.id: c.name for c in folder.open_calls if c.id in folder.started}
    return (observer,)


def _observer() -> SessionMetrics | None:
    if "opentelemetry.metrics" in sys.modules:  # else nobody could have set a provider
        from tether.telemetry.meters import follow

        follow(METRICS)
    return SessionMetrics(METRICS) if METRICS.enabled else None


# --- hooks the runtime calls: one line each, nothing done while metrics are off -----------


def watch(worker: WorkerLike) -> None:
    """A worker of this process, counted at each scrape while it lives. Kept whether or not
    metrics are on (`tether serve` enables them after its runtime made its worker): a weak
    reference, once per worker, costs no event anything."""
    METRICS.workers.add(worker)


def took_over(verdict: str) -> None:
    """A claim that followed a dead worker, and what was made of the death: `forgiven`
    (nothing of the session's was running), `struck`, or `poisoned` (ended)."""
    if METRICS.enabled:
        METRICS.takeovers[(verdict,)] += 1


def parked(reason: str) -> None:
    """A session put aside: deferred by a worker, `parked` (its backend cannot take the call
    yet) or `backoff` (its run failed), or ended `poisoned` (it kept killing its workers)."""
    if METRICS.enabled:
        METRICS.parks[(reason,)] += 1


class SessionMetrics:
    """Feeds the registry from one session's events as they are appended."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.tenant = "default"
        self.model = ""
        self.calls: dict[str, str] = {}  # open call id -> tool name

    def learn(self, event: Event) -> None:
        p = event.payload
        if isinstance(p, SessionCreated | SessionForked):
            tenant = p.metadata.get("tenant")
            self.tenant = tenant if isinstance(tenant, str) and tenant else "default"
            self.model = p.model
        elif isinstance(p, ModelRequested):
            self.model = p.model
        elif isinstance(p, ToolStarted):
            self.calls[p.call_id] = p.name
        elif isinstance(p, ToolFinished):
            self.calls.pop(p.call_id, None)

    def __call__(self, event: Event) -> None:
        p, r = event.payload, self.registry
        if isinstance(p, ToolFinished):
            name = self.calls.pop(p.call_id, None)
            if name is not None:  # a call answered without running has no duration
                r.tool_seconds.observe((name,), p.duration_ms / 1000)
            r.tool_calls[(name or "(not run)", p.outcome)] += 1
            return
        self.learn(event)
        if isinstance(p, ModelResponded):
            self._responded(p)
        elif isinstance(p, ModelFailed):
            r.model_failures[(self.model, p.error_class)] += 1
        elif isinstance(p, TurnEnded):
            r.turns[(p.stop_reason,)] += 1
        elif isinstance(p, SessionEnded):
            r.sessions_ended[(p.outcome,)] += 1

    def _responded(self, p: ModelResponded) -> None:
        r, model = self.registry, (self.model,)
        r.model_seconds.observe(model, p.latency_ms / 1000)
        if p.first_token_ms:  # only a streamed answer has a first token (0: none)
            r.first_token_seconds.observe(model, p.first_token_ms / 1000)
        usage = p.usage
        for kind, count in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
        ):
            if count:
                r.tokens[(self.tenant, self.model, kind)] += count
        if p.cost_usd:
            r.cost_usd[(self.tenant, self.model)] += p.cost_usd
        if r.on_answer is not None:
            r.on_answer(self.model, p)
