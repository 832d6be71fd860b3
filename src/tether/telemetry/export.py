"""A stored session's spans sent after the fact over OTLP/HTTP (protobuf): the same spans,
with the same ids, as were emitted live, so sending a session twice sends nothing new.

Owns reading the log for it and the exporter; the CLI's `tether sessions trace` calls it.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

from tether.errors import SessionNotFound, TetherError
from tether.store.base import Store
from tether.telemetry.spans import SpanRecord, build_spans


def traces_url(url: str) -> str:
    """A collector's address (`http://host:4318`) or its full traces endpoint."""
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urlunsplit(parts)


async def session_spans(
    store: Store, session_id: str, *, content: bool = False
) -> list[SpanRecord]:
    events = await store.read(session_id)
    if not events:
        raise SessionNotFound(session_id)
    return build_spans(events, content=content)


def send(records: list[SpanRecord], url: str, *, timeout: float = 10.0) -> bool:
    """Blocking, as the exporter is: True when the collector took them."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    from tether.telemetry.otel import readable_spans

    exporter = OTLPSpanExporter(endpoint=traces_url(url), timeout=timeout)
    try:
        return exporter.export(readable_spans(records)) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]


async def export_session(
    store: Store, session_id: str, url: str, *, content: bool = False, seconds: float = 10.0
) -> int:
    """Send session `session_id`'s spans to `url`; the number sent. Raises `ExportFailed`."""
    records = await session_spans(store, session_id, content=content)
    if not await asyncio.to_thread(send, records, url, timeout=seconds):
        raise ExportFailed(f"the collector at {traces_url(url)} did not take the spans")
    return len(records)


class ExportFailed(TetherError):
    """The collector refused the spans, or could not be reached."""
