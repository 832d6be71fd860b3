"""OpenTelemetry traces derived from a session's event log (GenAI semantic conventions).

`spans` turns events into finished span records (pure); `live` emits them through the
global tracer provider as events are appended, when one is set; `export` sends a stored
session's spans over OTLP/HTTP. Metrics: `metrics` (the registry and its feeds), `census`,
`prometheus` and `meters` (the OpenTelemetry metrics API). Nothing here imports
OpenTelemetry until it is used.
"""

from tether.telemetry.ids import new_trace_id, trace_id_of
from tether.telemetry.spans import SpanBuilder, SpanRecord, build_spans

__all__ = ["SpanBuilder", "SpanRecord", "build_spans", "new_trace_id", "trace_id_of"]
