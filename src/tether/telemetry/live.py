"""Spans emitted as a session's events are appended, through OpenTelemetry's global tracer
provider when one is set: no flag, as OpenTelemetry instrumentations do.

Owns the decision to trace a log and the observer that does it. With OpenTelemetry not
imported, or no provider set, a log gets no observer: nothing is imported, no event costs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from tether.events import Event
from tether.telemetry import metrics

Observer = Callable[[Event], None]


def observers(history: Sequence[Event] = ()) -> tuple[Observer, ...]:
    """What a session log opened on `history` (its events so far) should be given: the live
    span emitter when a tracer provider is set, the metrics counter when this process
    counts (`metrics.enable`); else nothing."""
    return metrics.observers(history) + _spans(history)


def _spans(history: Sequence[Event]) -> tuple[Observer, ...]:
    api = sys.modules.get("opentelemetry.trace")
    if api is None:  # nobody in this process imported OpenTelemetry: nothing can be set
        return ()
    provider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        return ()
    from tether.telemetry.otel import LiveSpans

    return (LiveSpans(provider, history),)
