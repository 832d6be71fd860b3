"""Shared HTTP pieces of the provider codecs: one POST or streamed POST over httpx, and SSE
and NDJSON framing (the rate-limit headers are read in `rate_limits`).

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
    # True when the body was fed to a stream assembler as it came; False for a whole answer,
    # which a stream request also gets when the server sends one JSON document instead.
    streamed: bool = False

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

    async def post(self, body: JSONObject, headers: Mapping[str, str] | None = None) -> RawResponse:
        """POST the body (`headers`: this request's own, over the endpoint's); a non-2xx
        answer raises the classified `ProviderError`."""
        try:
            response = await self.client().post(
                self.url, content=encode_body(body), headers=self._request_headers(headers)
            )
        except httpx.HTTPError as exc:
            raise _connection_failed(exc) from exc
        raw = RawResponse(response.status_code, dict(response.headers), response.content)
        if not 200 <= raw.status < 300:
            raise self.classify(raw.status, raw.body, raw.headers)
        return raw

    async def stream(
        self,
        body: JSONObject,
        feed: Callable[[bytes], None],
        headers: Mapping[str, str] | None = None,
    ) -> RawResponse:
        """POST the body and hand every received chunk to `feed` as it arrives. `feed` may raise
        (an error event inside a 200 stream); the connection is closed either way. A 2xx
        answer typed as one JSON document (an error body some servers send with 200) is not a
        stream: it comes back whole and unfed (`streamed` False), for the codec to decode."""
        chunks: list[bytes] = []
        try:
            async with self.client().stream(
                "POST", self.url, content=encode_body(body), headers=self._request_headers(headers)
            ) as response:
                headers = dict(response.headers)
                if not 200 <= response.status_code < 300:
                    error_body = await response.aread()
                    raise self.classify(response.status_code, error_body, headers)
                if is_json(headers):
                    return RawResponse(response.status_code, headers, await response.aread())
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    feed(chunk)
        except httpx.HTTPError as exc:
            raise _connection_failed(exc) from exc
        return RawResponse(response.status_code, headers, b"".join(chunks), streamed=True)

    def _request_headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {"content-type": "application/json", **self.headers, **(extra or {})}


def is_json(headers: Mapping[str, str]) -> bool:
    """`application/json` or a `+json` type; NDJSON (`application/x-ndjson`) is a stream."""
    media = headers.get("content-type", "").partition(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


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
