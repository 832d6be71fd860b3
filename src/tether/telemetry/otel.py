"""Span records into OpenTelemetry: emitted live through a tracer (with tether's own span
ids, when the tracer is the SDK's), or made into the SDK's finished spans for an exporter.

Owns every import of OpenTelemetry's tracing API (its metrics API's are `meters.py`'s);
nothing else in tether imports either.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TracerProvider,
)

from tether.events import Event
from tether.telemetry.conventions import content_opted_in
from tether.telemetry.spans import SpanBuilder, SpanRecord

SCOPE = "tether"
_KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_log = logging.getLogger("tether.telemetry")


class PlannedIds:
    """The SDK tracer's id generator, made to hand out the ids tether derived from the log
    for the next span it starts (then the SDK's own again)."""

    def __init__(self, fallback: Any) -> None:
        self.fallback = fallback
        self.trace_id = 0
        self.span_id = 0

    def plan(self, trace_id: int, span_id: int) -> None:
        self.trace_id, self.span_id = trace_id, span_id

    def generate_span_id(self) -> int:
        planned, self.span_id = self.span_id, 0
        return planned or int(self.fallback.generate_span_id())

    def generate_trace_id(self) -> int:
        planned, self.trace_id = self.trace_id, 0
        return planned or int(self.fallback.generate_trace_id())

    def is_trace_id_random(self) -> bool:
        return bool(getattr(self.fallback, "is_trace_id_random", lambda: False)())


def _planned(tracer: Any) -> PlannedIds | None:
    """The SDK's tracers have a public `id_generator`; another provider's spans get its
    own ids (and the tree then holds only through tether's parent ids)."""
    ids = getattr(tracer, "id_generator", None)
    if ids is None:
        return None
    if not isinstance(ids, PlannedIds):
        ids = PlannedIds(ids)
        tracer.id_generator = ids
    return ids


class LiveSpans:
    """A session log's observer: folds the events into spans and emits each as it ends.
    Opened on the log's history, so a resumed session's spans close where they began."""

    def __init__(self, provider: TracerProvider, history: Sequence[Event]) -> None:
        self.tracer = provider.get_tracer(SCOPE)
        self.ids = _planned(self.tracer)
        self.builder = SpanBuilder(content=content_opted_in())
        for event in history:
            self.builder.feed(event)  # spans that ended before this process: emitted then
        self.flags: TraceFlags | None = None
        self.failed = False

    def __call__(self, event: Event) -> None:
        for record in self.builder.feed(event):
            try:
                self.emit(record)
            except Exception:  # an exporter's bug must not stop the session
                if not self.failed:
                    _log.exception("session %s: a span could not be emitted", event.session_id)
                self.failed = True

    def emit(self, record: SpanRecord) -> None:
        if self.flags is None:
            self.flags = self._sampled(record.trace_id)
        if not self.flags.sampled:
            return
        context = Context()
        if record.parent_id is not None:
            parent = SpanContext(record.trace_id, record.parent_id, False, self.flags)
            context = trace.set_span_in_context(NonRecordingSpan(parent), context)
        if self.ids is not None:
            self.ids.plan(record.trace_id, record.span_id)
        span = self.tracer.start_span(
            record.name,
            context=context,
            kind=_KINDS[record.kind],
            attributes=record.attributes,
            start_time=record.start_ns,
        )
        if record.error is not None:
            span.set_status(Status(StatusCode.ERROR, record.message or record.error))
        span.end(end_time=record.end_ns)

    def _sampled(self, trace_id: int) -> TraceFlags:
        """One decision per trace, by the provider's sampler, as for a root span."""
        sampler = getattr(self.tracer, "sampler", None)
        if sampler is None:
            return _SAMPLED
        result = sampler.should_sample(Context(), trace_id, "invoke_agent")
        return _SAMPLED if result.decision.is_sampled() else TraceFlags(TraceFlags.DEFAULT)


def readable_spans(records: Sequence[SpanRecord], resource: Any = None) -> list[Any]:
    """The SDK's finished spans for `records`, for a span exporter."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    resource = resource or Resource.create({"service.name": "tether"})
    scope = InstrumentationScope(SCOPE)
    spans = []
    for r in records:
        parent = None if r.parent_id is None else SpanContext(r.trace_id, r.parent_id, False)
        status = Status(StatusCode.UNSET)
        if r.error is not None:
            status = Status(StatusCode.ERROR, r.message or r.error)
        spans.append(
            ReadableSpan(
                r.name,
                context=SpanContext(r.trace_id, r.span_id, False, _SAMPLED),
                parent=parent,
                resource=resource,
                attributes=r.attributes,
                kind=_KINDS[r.kind],
                status=status,
                start_time=r.start_ns,
                end_time=r.end_ns,
                instrumentation_scope=scope,
            )
        )
    return spans
