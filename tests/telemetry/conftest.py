"""An OpenTelemetry SDK tracer provider set as the global one, its spans kept in memory;
taken away again after each test, so the rest of the suite runs with none set."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


def _unset() -> None:
    # What OpenTelemetry's own tests do (opentelemetry.test.globals_test): the API offers no
    # public way to take a provider away.
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    _unset()
    trace.set_tracer_provider(provider)
    yield memory
    provider.shutdown()
    _unset()
