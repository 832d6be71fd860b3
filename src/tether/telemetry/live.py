"""Spans emitted as a session's events are appended, through OpenTelemetry's global tracer
provider when one is set: no flag, as OpenTelemetry instrumentations do.

Owns the decision to trace a log and the observer that does it. With OpenTelemetry not
imported, or no provider set, a log gets no observer: nothing is imported, no event costs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from tether.events import Event
from tether.fold import Folder
from tether.telemetry import metrics

Observer = Callable[[Event], None]


def observers(history: Sequence[Event] = ()) -> tuple[Observer, ...]:
    """What a session log opened on `history` (its events so far) should be given: the live
    span emitter when a tracer provider is set, the metrics counter when this process
    counts (`metrics.enable`); else nothing."""
    return metrics.observers(history) + _spans(history)


def tracing() -> bool:
    """Whether a tracer provider is set: a log opened on a session's history then needs all
    of it (`observers`), so that a resumed session's spans close where they began."""
    return _provider() is not None


def resumed(folder: Folder) -> tuple[Observer, ...]:
    """What a session log opened on a fold (a snapshot's, not its events) should be given
    while not `tracing`."""
    return metrics.resumed(folder)


def _provider() -> Any:
    api = sys.modules.get("opentelemetry.trace")
    if api is None:  # nobody in this process imported OpenTelemetry: nothing can be set
        return None
    provider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        return None
    return provider


def _spans(history: Sequence[Event]) -> tuple[Observer, ...]:
    provider = _provider()
    if provider is None:
        return ()
    from tether.telemetry.otel import LiveSpans

    return (LiveSpans(provider, history),)
