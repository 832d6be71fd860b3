"""Metrics derived from the events a process appends: model latency, tokens and cost by
model, tool latency and outcomes by tool, turns by stop reason, sessions by outcome.

Owns the process's registry (`METRICS`) and the per-log observer that feeds it. Nothing is
counted until a process asks for metrics (`enable()`: `tether serve` and `tether worker` do),
so a library run pays nothing per event. Rendered as Prometheus text (`render`) for
`GET /metrics`; a model or a tool (a tenant's choice) is named only to the operator, and a
tenant never, as the gateway series do (the counters are kept by tenant for a later, safe view).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tether.events import (
    Event,
    ModelFailed,
    ModelRequested,
    ModelResponded,
    SessionCreated,
    SessionEnded,
    ToolFinished,
    ToolStarted,
    TurnEnded,
)
from tether.scheduler.figures import _escape

# Seconds: from a fast tool to a slow model answer.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

Labels = tuple[str, ...]


@dataclass
class Histogram:
    """Cumulative buckets per label set, as Prometheus wants them."""

    buckets: tuple[float, ...] = BUCKETS
    counts: dict[Labels, list[int]] = field(default_factory=dict)
    sums: defaultdict[Labels, float] = field(default_factory=lambda: defaultdict(float))

    def observe(self, labels: Labels, value: float) -> None:
        counts = self.counts.get(labels)
        if counts is None:
            counts = self.counts[labels] = [0] * (len(self.buckets) + 1)
        counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sums[labels] += value


@dataclass
class Registry:
    enabled: bool = False
    model_seconds: Histogram = field(default_factory=Histogram)
    tool_seconds: Histogram = field(default_factory=Histogram)
    tokens: Counter[Labels] = field(default_factory=Counter)  # (tenant, model, kind)
    cost_usd: defaultdict[Labels, float] = field(default_factory=lambda: defaultdict(float))
    model_failures: Counter[Labels] = field(default_factory=Counter)  # (model, error class)
    tool_calls: Counter[Labels] = field(default_factory=Counter)  # (tool, outcome)
    turns: Counter[Labels] = field(default_factory=Counter)  # (stop reason,)
    sessions_ended: Counter[Labels] = field(default_factory=Counter)  # (outcome,)


METRICS = Registry()


def enable() -> None:
    """Count from now on, in every session log this process opens."""
    METRICS.enabled = True


def observers(history: Sequence[Event] = ()) -> tuple[Callable[[Event], None], ...]:
    """The observer a log opened on `history` gets: one when metrics are enabled."""
    if not METRICS.enabled:
        return ()
    observer = SessionMetrics(METRICS)
    for event in history:  # learn the tenant, model and open calls; count nothing again
        observer.learn(event)
    return (observer,)


class SessionMetrics:
    """Feeds the registry from one session's events as they are appended."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.tenant = "default"
        self.model = ""
        self.calls: dict[str, str] = {}  # open call id -> tool name

    def learn(self, event: Event) -> None:
        p = event.payload
        if isinstance(p, SessionCreated):
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
            r.model_seconds.observe((self.model,), p.latency_ms / 1000)
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
        elif isinstance(p, ModelFailed):
            r.model_failures[(self.model, p.error_class)] += 1
        elif isinstance(p, TurnEnded):
            r.turns[(p.stop_reason,)] += 1
        elif isinstance(p, SessionEnded):
            r.sessions_ended[(p.outcome,)] += 1


# --- Prometheus text -------------------------------------------------------------------------


def _labels(names: Sequence[str], values: Labels) -> str:
    return ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))


def _merge(counter: Mapping[Labels, float], keep: Sequence[int]) -> dict[Labels, float]:
    out: defaultdict[Labels, float] = defaultdict(float)
    for labels, value in counter.items():
        out[tuple(labels[i] for i in keep)] += value
    return dict(out)


def render(registry: Registry = METRICS, *, names: bool = False) -> list[str]:
    """The series as Prometheus text lines. Without `names`, models and tools (a tenant's
    choice) are summed away; tenants always are; outcomes and stop reasons stay."""
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str) -> str:
        lines.append(f"# HELP tether_{name} {help_text}")
        lines.append(f"# TYPE tether_{name} {kind}")
        return f"tether_{name}"

    def counter(
        name: str, help_text: str, data: Mapping[Labels, float], label_names: Sequence[str]
    ) -> None:
        metric = family(name, "counter", help_text)
        for labels, value in sorted(data.items()):
            inner = _labels(label_names, labels)
            lines.append(f"{metric}{{{inner}}} {value:g}" if inner else f"{metric} {value:g}")

    def histogram(name: str, help_text: str, h: Histogram, label_names: Sequence[str]) -> None:
        metric = family(name, "histogram", help_text)
        for labels in sorted(h.counts):
            counts = h.counts[labels]
            inner = _labels(label_names, labels)
            sep = "," if inner else ""
            total = 0
            for bound, count in zip((*h.buckets, float("inf")), counts, strict=True):
                total += count
                le = "+Inf" if bound == float("inf") else f"{bound:g}"
                lines.append(f'{metric}_bucket{{{inner}{sep}le="{le}"}} {total}')
            wrap = f"{{{inner}}}" if inner else ""
            lines.append(f"{metric}_sum{wrap} {h.sums[labels]:g}")
            lines.append(f"{metric}_count{wrap} {total}")

    model_seconds = registry.model_seconds if names else _summed(registry.model_seconds)
    histogram(
        "model_call_seconds",
        "model call latency, retries included",
        model_seconds,
        ("model",) if names else (),
    )
    tool_seconds = registry.tool_seconds if names else _summed(registry.tool_seconds)
    histogram("tool_call_seconds", "tool call duration", tool_seconds, ("tool",) if names else ())
    if names:
        counter("tokens_total", "tokens by model and kind", _merge(registry.tokens, (1, 2)),
                ("model", "kind"))  # fmt: skip
        counter("cost_usd_total", "priced cost by model", _merge(registry.cost_usd, (1,)),
                ("model",))  # fmt: skip
        counter("model_failures_total", "model calls that failed, by model and error class",
                registry.model_failures, ("model", "error_class"))  # fmt: skip
    else:
        counter("tokens_total", "tokens by kind", _merge(registry.tokens, (2,)), ("kind",))
        counter("cost_usd_total", "priced cost", _merge(registry.cost_usd, ()), ())
        counter("model_failures_total", "model calls that failed, by error class",
                _merge(registry.model_failures, (1,)), ("error_class",))  # fmt: skip
    if names:
        counter("tool_calls_total", "tool calls by tool and outcome", registry.tool_calls,
                ("tool", "outcome"))  # fmt: skip
    else:
        counter("tool_calls_total", "tool calls by outcome", _merge(registry.tool_calls, (1,)),
                ("outcome",))  # fmt: skip
    counter("turns_total", "turns ended, by stop reason", registry.turns, ("stop_reason",))
    counter("sessions_ended_total", "sessions ended, by outcome", registry.sessions_ended,
            ("outcome",))  # fmt: skip
    return lines


def _summed(h: Histogram) -> Histogram:
    out = Histogram(h.buckets)
    for labels, counts in h.counts.items():
        mine = out.counts.setdefault((), [0] * len(counts))
        for i, c in enumerate(counts):
            mine[i] += c
        out.sums[()] += h.sums[labels]
    return out
