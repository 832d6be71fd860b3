"""Shared HTTP pieces of the provider codecs: one POST or streamed POST over httpx, SSE and
NDJSON framing, and the rate-limit headers of Anthropic and OpenAI.

It knows no dialect: a codec hands it a classifier that turns a failed response into a
`ProviderError`. httpx exceptions are translated here, nowhere else.
"""

from __future__ import annotations

import asyncio
import codecs
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from tether.errors import ConnectionFailed, ProviderError
from tether.messages import JSONObject

# Model answers can take minutes; only the connect phase deserves a short deadline.
DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=15.0)

Classifier = Callable[[int, bytes, Mapping[str, str]], ProviderError]


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A finished exchange: status, headers and the exact body bytes (all stream bytes)."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def encode_body(body: JSONObject) -> bytes:
    return _COMPACT.encode(body).encode()


class Endpoint:
    """One URL of one backend: its headers, its client and its error classifier."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        classify: Classifier,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = url
        self.headers = dict(headers)
        self.classify = classify
        self._client = client
        self._owns_client = client is None
        self._loop: asyncio.AbstractEventLoop | None = None

    def client(self) -> httpx.AsyncClient:
        # A client's connections belong to the event loop that opened them; a model reused
        # across `asyncio.run` calls (e.g. `Agent.run_sync` twice) needs a fresh one per loop.
        loop = asyncio.get_running_loop()
        if self._client is None or (self._owns_client and self._loop is not loop):
            self._client = httpx.AsyncClient(timeout=DEFAULT_TIMEOUT)
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def post(self, body: JSONObject) -> RawResponse:
        """POST the body; a non-2xx answer raises the classified `ProviderError`."""
        try:
            response = await self.client().post(
                self.url, content=encode_body(body), headers=self._request_headers()
            )
        except httpx.HTTPError as exc:
            raise _connection_failed(exc) from exc
        raw = RawResponse(response.status_code, dict(response.headers), response.content)
        if not 200 <= raw.status < 300:
            raise self.classify(raw.status, raw.body, raw.headers)
        return raw

    async def stream(self, body: JSONObject, feed: Callable[[bytes], None]) -> RawResponse:
        """POST the body and hand every received chunk to `feed` as it arrives. `feed` may raise
        (an error event inside a 200 stream); the connection is closed either way."""
        chunks: list[bytes] = []
        try:
            async with self.client().stream(
                "POST", self.url, content=encode_body(body), headers=self._request_headers()
            ) as response:
                headers = dict(response.headers)
                if not 200 <= response.status_code < 300:
                    error_body = await response.aread()
                    raise self.classify(response.status_code, error_body, headers)
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    feed(chunk)
        except httpx.HTTPError as exc:
            raise _connection_failed(exc) from exc
        return RawResponse(response.status_code, headers, b"".join(chunks))

    def _request_headers(self) -> dict[str, str]:
        return {"content-type": "application/json", **self.headers}


def _connection_failed(exc: httpx.HTTPError) -> ConnectionFailed:
    return ConnectionFailed(f"no usable answer from the model host: {type(exc).__name__}: {exc}")


_NEWLINE = re.compile(r"\r\n|\r|\n")


class LineSplitter:
    """Bytes in, complete text lines out; a UTF-8 character or a line may span chunks. Only
    CR, LF and CRLF end a line: JSON may carry U+2028 raw, so `str.splitlines` is wrong here."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, chunk: bytes) -> list[str]:
        text = self._pending + self._decoder.decode(chunk)
        # A trailing CR may be the first half of a CRLF split across chunks: keep it back.
        held = ""
        if text.endswith("\r"):
            text, held = text[:-1], "\r"
        lines = _NEWLINE.split(text)
        self._pending = lines.pop() + held
        return lines

    def close(self) -> list[str]:
        rest = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        return [line for line in _NEWLINE.split(rest) if line] if rest else []


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str | None
    data: str


class SSEDecoder:
    """Server-sent events framing: `event:` and `data:` fields, a blank line ends an event,
    lines starting with `:` are comments (OpenRouter's keep-alives)."""

    def __init__(self) -> None:
        self._lines = LineSplitter()
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        return self._take(self._lines.feed(chunk))

    def close(self) -> list[SSEEvent]:
        events = self._take(self._lines.close())
        if self._data:
            events.append(SSEEvent(self._event, "\n".join(self._data)))
        self._event, self._data = None, []
        return events

    def _take(self, lines: list[str]) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(SSEEvent(self._event, "\n".join(self._data)))
                self._event, self._data = None, []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
        return events


class NDJSONDecoder:
    """Newline-delimited JSON framing (Ollama): one value per non-blank line. A line that is
    not JSON comes back as its text, for the codec to report as an error."""

    def __init__(self) -> None:
        self._lines = LineSplitter()

    def feed(self, chunk: bytes) -> list[object]:
        return [_parse_line(line) for line in self._lines.feed(chunk) if line.strip()]

    def close(self) -> list[object]:
        return [_parse_line(line) for line in self._lines.close() if line.strip()]


def _parse_line(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return line


# --- rate limits -------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> float | None:
    """`6m0s`, `1.5s`, `84ms`, `1h2m` or a bare number of seconds -> seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and pos > 0 else None


def parse_reset_time(text: str, now: datetime) -> float | None:
    """An RFC 3339 time (Anthropic's `*-reset`) -> seconds from `now`, never negative."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """`retry-after-ms`, then `retry-after` as seconds or as an HTTP date."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True, slots=True)
class Bucket:
    """One rate-limit budget: `reset` is in seconds from when the headers were read."""

    limit: int | None = None
    remaining: int | None = None
    reset: float | None = None


@dataclass(frozen=True, slots=True)
class RateLimits:
    """What a response's headers say about the budgets left; names follow Anthropic's."""

    requests: Bucket = Bucket()
    tokens: Bucket = Bucket()
    input_tokens: Bucket = Bucket()
    output_tokens: Bucket = Bucket()
    retry_after: float | None = None

    def wait_hint(self) -> float | None:
        """How long to wait: `retry-after` if sent, else the latest reset of a spent budget."""
        if self.retry_after is not None:
            return self.retry_after
        resets = [
            b.reset
            for b in (self.requests, self.tokens, self.input_tokens, self.output_tokens)
            if b.remaining == 0 and b.reset is not None
        ]
        return max(resets) if resets else None


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def parse_rate_limits(headers: Mapping[str, str], now: datetime | None = None) -> RateLimits:
    """Both header families: Anthropic `anthropic-ratelimit-<kind>-<field>` (RFC 3339 reset)
    and OpenAI `x-ratelimit-<field>-<kind>` (duration reset like `6m0s`)."""
    now = now or datetime.now(UTC)
    h = {k.lower(): v for k, v in headers.items()}

    def bucket(kind: str) -> Bucket:
        a = f"anthropic-ratelimit-{kind}-"
        if a + "limit" in h or a + "remaining" in h or a + "reset" in h:
            reset = h.get(a + "reset")
            return Bucket(
                _int(h.get(a + "limit")),
                _int(h.get(a + "remaining")),
                None if reset is None else parse_reset_time(reset, now),
            )
        reset = h.get(f"x-ratelimit-reset-{kind}")
        return Bucket(
            _int(h.get(f"x-ratelimit-limit-{kind}")),
            _int(h.get(f"x-ratelimit-remaining-{kind}")),
            None if reset is None else parse_duration(reset),
        )

    return RateLimits(
        requests=bucket("requests"),
        tokens=bucket("tokens"),
        input_tokens=bucket("input-tokens"),
        output_tokens=bucket("output-tokens"),
        retry_after=parse_retry_after(h, now),
    )
