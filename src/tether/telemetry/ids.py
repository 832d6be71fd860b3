"""Trace and span ids, and event times as span times.

A session's trace id is chosen once, when it is created (the caller's trace when a span is
current, else a random one), and recorded as `trace_id` in `session.created` metadata. Span
ids are derived from event ids, so building a session's spans twice gives the same spans.
"""

from __future__ import annotations

import calendar
import hashlib
import secrets
import sys
import time

from tether.events import Event, SessionCreated

_HEX = frozenset("0123456789abcdef")


def new_trace_id() -> str:
    """32 hex digits: the current span's trace when OpenTelemetry has one, else random.
    OpenTelemetry is looked at only if something in this process imported it already."""
    api = sys.modules.get("opentelemetry.trace")
    if api is not None:
        context = api.get_current_span().get_span_context()
        if context.is_valid:
            return f"{context.trace_id:032x}"
    return secrets.token_hex(16)


def valid_trace_id(value: object) -> bool:
    return isinstance(value, str) and len(value) == 32 and set(value) <= _HEX and value != "0" * 32


def trace_id_of(session_id: str, created: SessionCreated | None) -> int:
    """The recorded trace id; a session written before tether recorded one gets an id
    derived from its session id, the same every time."""
    recorded = None if created is None else created.metadata.get("trace_id")
    if valid_trace_id(recorded):
        return int(str(recorded), 16)
    return int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:16], "big") or 1


def span_id(trace_id: int, event: Event, kind: str) -> int:
    """The span that `event` opens, named by the event's id and what kind of span it is
    (one event may open two: a turn and its first model call)."""
    digest = hashlib.sha256(f"{trace_id:032x}/{event.id}/{kind}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


_second: tuple[str, int] = ("", 0)


def time_ns(event: Event) -> int:
    """The event's time (`2026-01-02T03:04:05.123456Z`) in nanoseconds since the epoch.
    The second is cached: events come in order, many in the same second."""
    global _second
    stamp = event.time
    head, _, rest = stamp.partition(".")
    if _second[0] != head:
        _second = (head, calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S")))
    micros = int(rest.rstrip("Z").ljust(6, "0")[:6]) if rest else 0
    return _second[1] * 1_000_000_000 + micros * 1000
