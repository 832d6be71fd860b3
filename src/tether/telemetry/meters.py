"""The metrics registry through OpenTelemetry's metrics API, once a global meter provider
is set: no flag, as OpenTelemetry instrumentations do (the provider enables counting).

Owns every import of OpenTelemetry's metrics API and the names the series take there:
counters and gauges are observable instruments that read the registry when collected;
histograms (the API has no observable one) are fed alongside, from the moment of binding,
with the GenAI conventions' client metrics (`gen_ai.client.operation.duration`,
`gen_ai.client.token.usage`). Everything is named, tenants included: a provider is the
operator's, set in its process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, NoOpMeterProvider, Observation

# Private, but the only way to tell "nobody set one" (OpenTelemetry's own tests do the same).
from opentelemetry.metrics._internal import _ProxyMeterProvider

from tether.events import ModelResponded
from tether.telemetry import conventions as c
from tether.telemetry.census import census
from tether.telemetry.metrics import Histogram, Labels, Registry

SCOPE = "tether"


class Series(NamedTuple):
    """One series: its OpenTelemetry name and unit, how to read it off the registry, and its
    label names. A Prometheus exporter of OpenTelemetry renders the name as tether's own
    (`tether.tokens` as `tether_tokens_total`, `tether.model_call` in s as
    `tether_model_call_seconds`)."""

    name: str
    unit: str
    read: Callable[[Registry], Mapping[Labels, float]]
    labels: tuple[str, ...]
    description: str


COUNTERS = (
    Series("tether.tokens", "{token}", lambda r: r.tokens, ("tenant", "model", "kind"),
           "tokens by tenant, model and kind"),
    Series("tether.cost_usd", "", lambda r: r.cost_usd, ("tenant", "model"),
           "priced cost in USD by tenant and model"),
    Series("tether.model_failures", "{call}", lambda r: r.model_failures,
           ("model", "error_class"), "model calls that failed"),
    Series("tether.tool_calls", "{call}", lambda r: r.tool_calls, ("tool", "outcome"),
           "tool calls by tool and outcome"),
    Series("tether.turns", "{turn}", lambda r: r.turns, ("stop_reason",),
           "turns ended, by stop reason"),
    Series("tether.sessions_ended", "{session}", lambda r: r.sessions_ended, ("outcome",),
           "sessions ended, by outcome"),
    Series("tether.takeovers", "{session}", lambda r: r.takeovers, ("verdict",),
           "sessions claimed after their worker died, by verdict"),
    Series("tether.parks", "{session}", lambda r: r.parks, ("reason",),
           "sessions put aside, by reason (parked, backoff, poisoned)"),
)  # fmt: skip


def _slots(r: Registry) -> Mapping[Labels, float]:
    now = census(r.workers)
    return {("used",): now.used, ("free",): now.slots - now.used}


GAUGES = (
    Series("tether.worker_slots", "{slot}", _slots, ("slot",),
           "this process's worker slots, used and free"),
    Series("tether.worker_leases_held", "{lease}", lambda r: {(): census(r.workers).leases}, (),
           "session leases this process's workers hold"),
    Series("tether.worker_sessions", "{session}",
           lambda r: {(s,): n for s, n in census(r.workers).states.items()}, ("state",),
           "sessions this process's workers hold, by state"),
)  # fmt: skip


def follow(registry: Registry) -> None:
    """Bind `registry` to the global meter provider once one is set (again if another is
    set later), and count from then on. Cheap when nothing changed: one look."""
    provider = metrics.get_meter_provider()
    if provider is registry.meter_provider:
        return
    if isinstance(provider, NoOpMeterProvider | _ProxyMeterProvider):
        return
    registry.meter_provider = provider
    registry.enabled = True
    bind(registry, provider.get_meter(SCOPE))


def bind(registry: Registry, meter: Meter) -> None:
    for series in COUNTERS:
        meter.create_observable_counter(
            series.name, [_observe(registry, series)], series.unit, series.description
        )
    for series in GAUGES:
        meter.create_observable_gauge(
            series.name, [_observe(registry, series)], series.unit, series.description
        )
    for name, histogram, label, description in (
        ("tether.model_call", registry.model_seconds, "model", "model call latency"),
        ("tether.model_first_token", registry.first_token_seconds, "model",
         "time to a streamed answer's first token"),
        ("tether.tool_call", registry.tool_seconds, "tool", "tool call duration"),
    ):  # fmt: skip
        _mirror(meter, name, histogram, label, description)
    _genai(registry, meter)


def _observe(
    registry: Registry, series: Series
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        data = series.read(registry)
        return [
            Observation(value, dict(zip(series.labels, labels, strict=True)))
            for labels, value in list(data.items())  # a copy: counting goes on meanwhile
        ]

    return observe


def _mirror(meter: Meter, name: str, histogram: Histogram, label: str, description: str) -> None:
    instrument = meter.create_histogram(
        name, "s", description, explicit_bucket_boundaries_advisory=histogram.buckets
    )

    def record(labels: Labels, value: float) -> None:
        instrument.record(value, {label: labels[0]})

    histogram.mirror = record


# The GenAI semantic conventions' client metrics, beside tether's own: what GenAI-aware
# tools read. Buckets are the conventions' advisories.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                    20.48, 40.96, 81.92)  # fmt: skip
TOKEN_BUCKETS = tuple(float(4**n) for n in range(14))  # 1, 4, 16, … 67,108,864


def _genai(registry: Registry, meter: Meter) -> None:
    duration = meter.create_histogram(
        "gen_ai.client.operation.duration", "s", "GenAI operation duration",
        explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
    )  # fmt: skip
    usage = meter.create_histogram(
        "gen_ai.client.token.usage", "{token}", "tokens used per GenAI operation",
        explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
    )  # fmt: skip

    def answered(model: str, answer: ModelResponded) -> None:
        provider, name = c.provider_and_model(model)
        attributes = {c.OPERATION: "chat", c.PROVIDER: provider, c.SYSTEM: provider,
                      c.REQUEST_MODEL: name}  # fmt: skip
        duration.record(answer.latency_ms / 1000, attributes)
        for kind, count in (("input", answer.usage.input_tokens),
                            ("output", answer.usage.output_tokens)):  # fmt: skip
            usage.record(count, {**attributes, c.TOKEN_TYPE: kind})

    registry.on_answer = answered
