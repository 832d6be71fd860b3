"""What a gateway measures: the running counters it updates, the frozen snapshot it hands out
(`GatewayFigures`, with `to_json`), and the Prometheus text rendering of snapshots.

It decides nothing: the gateway tells it what happened and when.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from tether.messages import JSONObject, JSONValue
from tether.scheduler.queue import PRIORITIES

WAIT_WINDOW = 50_000  # queue waits kept per priority for the quantiles: the latest ones


class WaitSamples:
    """The latest `WAIT_WINDOW` waits in a ring, for exact quantiles in bounded memory."""

    def __init__(self, window: int = WAIT_WINDOW) -> None:
        self._ring = array("d")
        self._window = window
        self._next = 0
        self.count = 0
        self.total = 0.0

    def add(self, seconds: float) -> None:
        if len(self._ring) < self._window:
            self._ring.append(seconds)
        else:
            self._ring[self._next] = seconds
            self._next = (self._next + 1) % self._window
        self.count += 1
        self.total += seconds

    def quantile(self, q: float) -> float | None:
        if not self._ring:
            return None
        ordered = sorted(self._ring)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True, slots=True)
class WaitFigures:
    """Queue waits of one priority in seconds: count and sum over the gateway's life, the
    quantiles over the latest waits."""

    count: int
    total: float
    p50: float | None
    p99: float | None
    max: float | None

    def to_json(self) -> JSONObject:
        return {
            "count": self.count,
            "total": self.total,
            "p50": self.p50,
            "p99": self.p99,
            "max": self.max,
        }


@dataclass(slots=True)
class Counters:
    """The gateway's running tallies. `busy` integrates requests in flight over time."""

    started: float | None = None
    requests: int = 0
    attempts: int = 0
    succeeded: int = 0
    failed: int = 0
    rate_limited: int = 0
    overloaded: int = 0
    server_errors: int = 0
    retries: int = 0
    rejected_busy: int = 0
    cancelled: int = 0
    parked: int = 0
    circuit_opened: int = 0
    tokens_used: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    busy: float = 0.0
    busy_since: float = 0.0
    in_flight: int = 0
    tokens_by_tenant: Counter[str] = field(default_factory=Counter)
    requests_by_tenant: Counter[str] = field(default_factory=Counter)
    waits: dict[str, WaitSamples] = field(
        default_factory=lambda: {p: WaitSamples() for p in PRIORITIES}
    )

    def start(self, now: float) -> None:
        if self.started is None:
            self.started = self.busy_since = now

    def set_in_flight(self, count: int, now: float) -> None:
        self.busy += self.in_flight * max(0.0, now - self.busy_since)
        self.busy_since, self.in_flight = now, count

    def elapsed(self, now: float) -> float:
        return 0.0 if self.started is None else max(0.0, now - self.started)


@dataclass(frozen=True, slots=True)
class GatewayFigures:
    """A snapshot of one backend's gateway. `utilisation` holds, per limit, the share of its
    capacity used since the first request (None for a limit the gateway does not know):
    `concurrency` is time-averaged requests in flight over the ceiling, `requests` and
    `tokens` what was sent over what the per-minute budgets allowed. `cache_hit_ratio` is
    the share of input tokens read from the provider's prompt cache (None before any).
    `input_estimate_factor` is what the input estimate is multiplied by when reserving."""

    backend: str
    elapsed: float
    queue_depth: int
    queue_depth_by_priority: dict[str, int]
    waiting_for_place: int
    in_flight: int
    concurrency_limit: float
    max_concurrency: int
    requests: int
    attempts: int
    succeeded: int
    failed: int
    rate_limited: int
    overloaded: int
    server_errors: int
    retries: int
    rejected_busy: int
    cancelled: int
    parked: int
    circuit: str
    circuit_opened: int
    tokens_used: int
    input_tokens: int
    cache_read_tokens: int
    cache_hit_ratio: float | None
    input_estimate_factor: float
    tokens_by_tenant: dict[str, int]
    requests_by_tenant: dict[str, int]
    wait: dict[str, WaitFigures]
    utilisation: dict[str, float | None]

    def to_json(self) -> JSONObject:
        out: JSONObject = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if name == "wait":
                value = {k: w.to_json() for k, w in self.wait.items()}
            out[name] = _json(value)
        return out


def _json(value: object) -> JSONValue:
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"figure of type {type(value).__name__} has no JSON form")


def wait_figures(samples: WaitSamples) -> WaitFigures:
    return WaitFigures(
        samples.count,
        samples.total,
        samples.quantile(0.5),
        samples.quantile(0.99),
        samples.quantile(1.0),
    )


# --- Prometheus text exposition ------------------------------------------------------------

_COUNTERS = (
    ("requests", "model calls submitted to the gateway"),
    ("attempts", "requests sent to the backend, retries included"),
    ("succeeded", "calls answered"),
    ("failed", "calls that ended in an error after their retries"),
    ("rate_limited", "429 answers seen"),
    ("overloaded", "overloaded (529) answers seen"),
    ("server_errors", "5xx answers and connection failures seen"),
    ("retries", "attempts scheduled after a retryable error"),
    ("rejected_busy", "calls refused because the queue was full"),
    ("cancelled", "calls cancelled while waiting or in flight"),
    ("parked", "calls handed back to their worker to run again after a long wait"),
    ("circuit_opened", "times the circuit breaker opened"),
    ("tokens_used", "tokens reported by the backend, input plus output"),
    ("input_tokens", "input tokens reported by the backend, cached ones included"),
    ("cache_read_tokens", "input tokens the backend read from its prompt cache"),
)
_GAUGES = (
    ("queue_depth", "requests waiting for their turn"),
    ("waiting_for_place", "callers waiting for a place in a full queue"),
    ("in_flight", "requests being answered now"),
    ("concurrency_limit", "the concurrency allowed now (AIMD)"),
    ("max_concurrency", "the configured concurrency ceiling"),
    ("input_estimate_factor", "reported input tokens over the chars/4 estimate, as reserved"),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def render_prometheus(snapshots: Iterable[GatewayFigures]) -> str:
    """The text exposition format (version 0.0.4), one series per backend."""
    figures = list(snapshots)
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str) -> str:
        metric = f"tether_gateway_{name}"
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} {kind}")
        return metric

    for name, help_text in _COUNTERS:
        metric = family(f"{name}_total", "counter", help_text)
        lines.extend(f"{metric}{_labels(backend=f.backend)} {getattr(f, name)}" for f in figures)
    for name, help_text in _GAUGES:
        metric = family(name, "gauge", help_text)
        lines.extend(
            f"{metric}{_labels(backend=f.backend)} {_number(getattr(f, name))}" for f in figures
        )
    metric = family("queue_depth_by_priority", "gauge", "requests waiting, by priority")
    for f in figures:
        for priority, depth in f.queue_depth_by_priority.items():
            lines.append(f"{metric}{_labels(backend=f.backend, priority=priority)} {depth}")
    metric = family("utilisation", "gauge", "share of a limit's capacity used")
    for f in figures:
        for dimension, share in f.utilisation.items():
            if share is not None:
                labels = _labels(backend=f.backend, limit=dimension)
                lines.append(f"{metric}{labels} {_number(share)}")
    metric = family("queue_wait_seconds", "summary", "time a request waited for its turn")
    for f in figures:
        for priority, wait in f.wait.items():
            for q, value in (("0.5", wait.p50), ("0.99", wait.p99)):
                if value is not None:
                    labels = _labels(backend=f.backend, priority=priority, quantile=q)
                    lines.append(f"{metric}{labels} {_number(value)}")
            base = _labels(backend=f.backend, priority=priority)
            lines.append(f"{metric}_sum{base} {_number(wait.total)}")
            lines.append(f"{metric}_count{base} {wait.count}")
    return "\n".join(lines) + "\n"
