"""SSE and NDJSON framing, durations and the rate-limit headers of both header families."""

from __future__ import annotations

from datetime import UTC, datetime

from tether.providers.http import LineSplitter, NDJSONDecoder, SSEDecoder, SSEEvent
from tether.providers.rate_limits import parse_duration, parse_rate_limits, parse_retry_after

from .conftest import wire_bytes

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _sse_all(body: bytes, step: int) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for i in range(0, len(body), step):
        events.extend(decoder.feed(body[i : i + step]))
    return events + decoder.close()


def test_sse_events_are_the_same_whatever_the_chunking() -> None:
    body = wire_bytes("anthropic-stream-tool-use.sse")
    whole = _sse_all(body, len(body))
    assert [e.event for e in whole][:3] == ["message_start", "content_block_start", "ping"]
    assert len(whole) == 15
    for step in (1, 2, 7, 64):
        assert _sse_all(body, step) == whole


def test_sse_comments_are_skipped_and_multiline_data_joined() -> None:
    body = b": OPENROUTER PROCESSING\n\ndata: a\ndata: b\n\nevent: x\ndata:c\n\n"
    assert _sse_all(body, 3) == [SSEEvent(None, "a\nb"), SSEEvent("x", "c")]


def test_a_crlf_split_across_chunks_is_one_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: one\r") == []
    assert decoder.feed(b"\ndata: two\r\n\r\n") == [SSEEvent(None, "one\ntwo")]


def test_a_line_separator_inside_json_does_not_split_the_line() -> None:
    splitter = LineSplitter()
    text = '{"t":"a\u2028b"}\n'
    assert splitter.feed(text.encode()) == ['{"t":"a\u2028b"}']


def test_a_utf8_character_split_across_chunks_survives() -> None:
    data = "data: Bogotá\n\n".encode()
    cut = data.index("á".encode()) + 1
    decoder = SSEDecoder()
    assert decoder.feed(data[:cut]) == []
    assert decoder.feed(data[cut:]) == [SSEEvent(None, "Bogotá")]


def test_an_event_without_a_final_blank_line_is_delivered_on_close() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]") == []
    assert decoder.close() == [SSEEvent(None, "[DONE]")]


def test_ndjson_yields_objects_and_hands_back_a_bad_line_as_text() -> None:
    decoder = NDJSONDecoder()
    assert decoder.feed(b'{"a": 1}\n\n{"b"') == [{"a": 1}]
    assert decoder.feed(b": 2}\nnot json\n") == [{"b": 2}, "not json"]
    assert decoder.close() == []


def test_ollama_stream_splits_into_its_three_chunks() -> None:
    decoder = NDJSONDecoder()
    lines = decoder.feed(wire_bytes("ollama-chat-stream-tool-calls.ndjson")) + decoder.close()
    assert [line["done"] for line in lines] == [False, False, True]


def test_durations_in_openai_reset_format() -> None:
    assert parse_duration("6m0s") == 360.0
    assert parse_duration("1s") == 1.0
    assert parse_duration("84ms") == 0.084
    assert parse_duration("1h2m3.5s") == 3723.5
    assert parse_duration("0.5") == 0.5
    assert parse_duration("soon") is None
    assert parse_duration("5x") is None


def test_anthropic_rate_limit_headers_give_seconds_until_reset() -> None:
    limits = parse_rate_limits(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "49",
            "anthropic-ratelimit-requests-reset": "2026-01-01T12:00:01Z",
            "anthropic-ratelimit-input-tokens-limit": "20000",
            "anthropic-ratelimit-input-tokens-remaining": "0",
            "anthropic-ratelimit-input-tokens-reset": "2026-01-01T12:00:30+00:00",
            "anthropic-ratelimit-tokens-remaining": "0",
            "anthropic-ratelimit-tokens-reset": "2026-01-01T12:00:12Z",
        },
        NOW,
    )
    assert limits.requests.limit == 50 and limits.requests.remaining == 49
    assert limits.requests.reset == 1.0
    assert limits.input_tokens.remaining == 0 and limits.input_tokens.reset == 30.0
    assert limits.retry_after is None
    # Only spent budgets count; the latest of them is the honest wait.
    assert limits.wait_hint() == 30.0


def test_openai_rate_limit_headers_give_duration_resets() -> None:
    limits = parse_rate_limits(
        {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "1s",
            "x-ratelimit-limit-tokens": "150000",
            "x-ratelimit-remaining-tokens": "149984",
            "x-ratelimit-reset-tokens": "6m0s",
        },
        NOW,
    )
    assert limits.requests == limits.requests.__class__(60, 0, 1.0)
    assert limits.tokens.limit == 150000 and limits.tokens.reset == 360.0
    assert limits.wait_hint() == 1.0


def test_retry_after_wins_and_accepts_seconds_ms_and_http_dates() -> None:
    assert parse_retry_after({"Retry-After": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "7"}) == 0.25
    assert parse_retry_after({"retry-after": "Thu, 01 Jan 2026 12:00:05 GMT"}, NOW) == 5.0
    assert parse_retry_after({"retry-after": "whenever"}) is None
    limits = parse_rate_limits(
        {
            "retry-after": "3",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "9s",
        },
        NOW,
    )
    assert limits.wait_hint() == 3.0
