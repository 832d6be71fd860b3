"""Record and replay: real exchanges (request body, status, headers, response bytes, streams
included) go to a JSON cassette, and come back offline byte for byte. It works at the httpx
transport seam, so every codec records as it runs and replays with no change. Secrets are
never written: auth headers are dropped and the key's own text is scrubbed wherever it shows.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import httpx

from tether.errors import UsageError
from tether.messages import JSONObject, JSONValue, canonical_json
from tether.providers.base import ModelRequest, ModelResponse
from tether.providers.common import is_obj, load_json
from tether.providers.registry import model_from_string

CASSETTE_VERSION = 1
_SECRET_HEADERS = {
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
    "set-cookie",
    "openai-organization",
    "openai-project",
    "anthropic-organization-id",
}
# Hop-by-hop framing of the recorded connection; the replayed response has its own.
_FRAMING_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive"}
REPLAY_KEY = "replay-no-key"


class CassetteMismatch(UsageError):
    """A replayed run asked for something the cassette does not hold."""


@dataclass(slots=True)
class Exchange:
    method: str
    path: str
    request: JSONValue
    status: int
    headers: dict[str, str]
    body: bytes

    def to_json(self) -> JSONObject:
        out: JSONObject = {
            "method": self.method,
            "path": self.path,
            "request": self.request,
            "status": self.status,
            "headers": dict(self.headers),
        }
        try:
            out["body"] = self.body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_b64"] = base64.b64encode(self.body).decode()
        return out

    @staticmethod
    def from_json(data: JSONObject) -> Exchange:
        body = data.get("body")
        raw = body.encode() if isinstance(body, str) else base64.b64decode(str(data["body_b64"]))
        headers = data.get("headers")
        return Exchange(
            str(data["method"]),
            str(data["path"]),
            data.get("request"),
            int(str(data["status"])),
            {str(k): str(v) for k, v in headers.items()} if is_obj(headers) else {},
            raw,
        )


@dataclass(slots=True)
class Cassette:
    path: Path
    exchanges: list[Exchange] = field(default_factory=list)

    @staticmethod
    def load(path: str | Path) -> Cassette:
        path = Path(path)
        data = json.loads(path.read_text("utf-8"))
        if not is_obj(data) or data.get("version") != CASSETTE_VERSION:
            raise CassetteMismatch(f"{path} is not a version {CASSETTE_VERSION} tether cassette")
        raw = data.get("exchanges")
        return Cassette(
            path, [Exchange.from_json(e) for e in raw if is_obj(e)] if isinstance(raw, list) else []
        )

    def save(self) -> None:
        data = {"version": CASSETTE_VERSION, "exchanges": [e.to_json() for e in self.exchanges]}
        self.path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", "utf-8")


def _request_json(content: bytes) -> JSONValue:
    parsed = load_json(content)
    return parsed if parsed is not None else content.decode("utf-8", "replace")


class _Tee(httpx.AsyncByteStream):
    """Passes a response's bytes through and hands them over once the response is closed."""

    def __init__(self, inner: httpx.AsyncByteStream, done: Callable[[bytes], None]) -> None:
        self._inner = inner
        self._done: Callable[[bytes], None] | None = done
        self._chunks: list[bytes] = []

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._chunks.append(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
        if self._done is not None:  # recorded once, however often the response is closed
            done, self._done = self._done, None
            done(b"".join(self._chunks))


class RecordingTransport(httpx.AsyncBaseTransport):
    """Forwards to a real transport and appends each finished exchange to the cassette."""

    def __init__(
        self,
        cassette: Cassette,
        inner: httpx.AsyncBaseTransport | None = None,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.cassette = cassette
        self._given = inner
        self._own: httpx.AsyncHTTPTransport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Keys seen in auth headers are added as they pass; these are known up front.
        self._secrets: set[str] = {s for s in secrets if len(s) >= 8}

    def _inner(self) -> httpx.AsyncBaseTransport:
        if self._given is not None:
            return self._given
        # The pool's connections belong to the loop that opened them: a model recorded across
        # `asyncio.run` calls (`Agent.run_sync` twice) needs a fresh pool per loop, as
        # `http.Endpoint` renews its own client. The old pool's loop is gone: it is dropped.
        loop = asyncio.get_running_loop()
        if self._own is None or self._loop is not loop:
            self._own, self._loop = httpx.AsyncHTTPTransport(), loop
        return self._own

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        content = await request.aread()
        self._secrets.update(_secret_values(request.headers))
        response = await self._inner().handle_async_request(request)
        headers = {
            k.lower(): self._scrub(v)
            for k, v in response.headers.items()
            if k.lower() not in _SECRET_HEADERS | _FRAMING_HEADERS
        }

        def done(body: bytes) -> None:
            url = urlsplit(str(request.url))
            exchange = Exchange(
                request.method,
                url.path,
                _request_json(content),
                response.status_code,
                headers,
                body,
            )
            for secret in self._secrets:
                exchange.body = exchange.body.replace(secret.encode(), b"[scrubbed]")
            self.cassette.exchanges.append(exchange)
            self.cassette.save()

        if not isinstance(response.stream, httpx.AsyncByteStream):
            raise UsageError("RecordingTransport needs an async inner transport")
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Tee(response.stream, done),
            extensions=response.extensions,
        )

    def _scrub(self, value: str) -> str:
        for secret in self._secrets:
            value = value.replace(secret, "[scrubbed]")
        return value

    async def aclose(self) -> None:
        if self._given is not None:
            await self._given.aclose()
        elif self._own is not None:
            own, self._own = self._own, None
            await own.aclose()


def _secret_values(headers: httpx.Headers) -> set[str]:
    out: set[str] = set()
    for name in ("authorization", "x-api-key", "api-key"):
        value = headers.get(name)
        if value:
            out.add(value.removeprefix("Bearer ").strip())
    return {s for s in out if len(s) >= 8}  # never scrub short common strings


class _Chunks(httpx.AsyncByteStream):
    """Replays a body line by line so a stream is parsed as it was received, in pieces."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for line in self._body.splitlines(keepends=True):
            yield line


class ReplayTransport(httpx.AsyncBaseTransport):
    """Serves the cassette's exchanges in order; each must match the request's method, endpoint
    and body (compared as canonical JSON). Nothing leaves the process."""

    def __init__(self, cassette: Cassette) -> None:
        self.cassette = cassette
        self.position = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        content = await request.aread()
        if self.position >= len(self.cassette.exchanges):
            raise CassetteMismatch(
                f"{self.cassette.path}: request {self.position + 1} is not recorded "
                f"({len(self.cassette.exchanges)} exchanges); record again"
            )
        exchange = self.cassette.exchanges[self.position]
        path = urlsplit(str(request.url)).path
        wanted = canonical_json(_comparable(exchange.request))
        sent = canonical_json(_comparable(_request_json(content)))
        # Hosts and base paths may differ between recording and replay (a proxy, a default
        # base URL); the endpoint's last segment and the exact body may not.
        recorded = (exchange.method, _endpoint_name(exchange.path), wanted)
        if recorded != (request.method, _endpoint_name(path), sent):
            raise CassetteMismatch(
                f"{self.cassette.path}: request {self.position + 1} differs from the recording "
                f"({request.method} {path}); the code or the transcript changed: record again"
            )
        self.position += 1
        return httpx.Response(
            exchange.status, headers=exchange.headers, stream=_Chunks(exchange.body)
        )


# Names the session, which a replay runs anew: not part of what must match.
_SESSION_FIELDS = ("prompt_cache_key",)


def _comparable(body: JSONValue) -> JSONValue:
    if not isinstance(body, dict) or not any(k in body for k in _SESSION_FIELDS):
        return body
    return {k: v for k, v in body.items() if k not in _SESSION_FIELDS}


def _endpoint_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


Mode = Literal["record", "replay", "auto"]


class ReplayModel:
    """A `Model` that records the exchanges of a real codec to `cassette`, or replays them.
    `mode="auto"` replays when the cassette exists and records otherwise. Replaying needs no
    key: a placeholder is passed so the codec can be built offline."""

    def __init__(
        self,
        spec: str,
        cassette: str | Path,
        *,
        mode: Mode = "auto",
        stream: bool = False,
        api_key: str | None = None,
        base_url: str | None = None,
        inner_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        path = Path(cassette)
        self.replaying = mode == "replay" or (mode == "auto" and path.exists())
        transport: httpx.AsyncBaseTransport
        if self.replaying:
            transport = ReplayTransport(Cassette.load(path))
            api_key = api_key or REPLAY_KEY
        else:
            secrets = (api_key,) if api_key else ()
            transport = RecordingTransport(Cassette(path), inner_transport, secrets)
        self._client = httpx.AsyncClient(transport=transport, timeout=600.0)
        self._model = model_from_string(
            spec, api_key=api_key, base_url=base_url, http_client=self._client, stream=stream
        )

    @property
    def name(self) -> str:
        return self._model.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self._model.complete(request)

    async def aclose(self) -> None:
        await self._client.aclose()
