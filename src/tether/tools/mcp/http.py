"""The HTTP transports of MCP connections (streamable HTTP, and the legacy HTTP+SSE), watched:
which requests of a call reached a server, and whether the server still knows our session.

Owns the httpx transport under the SDK's client, with OAuth (`oauth`) as the client's `auth`. What to do about a lost session or a refused
connection (reconnect, retry, refuse to repeat a write) is `connection`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
_SESSION_HEADER = "mcp-session-id"
# A 400's error message that refuses the session id: "No valid session ID provided" (the
# TypeScript SDK's examples), "Invalid or expired session ID", "Session not found".
_NO_SESSION = re.compile(r"(no valid|invalid|unknown|expired).*session|session.*not found", re.I)
_ERROR_BODY_LIMIT = 64 * 1024


@dataclass(eq=False)
class Delivery:
    """What became of one call's HTTP requests. The SDK sends a call's requests in the
    caller's context, so the record set in `DELIVERY` by the caller is the one updated here."""

    refused: bool = False  # a request found nobody listening: nothing was delivered
    session_lost: bool = False  # a request was answered 404 for our session: not run
    reached: bool = False  # a request was answered otherwise: the server may have run it
    broken: bool = False  # an answer's stream broke off: the connection was lost mid-call
    status: str | None = None  # an HTTP error status a request was answered with

    @property
    def undelivered(self) -> bool:
        """The server certainly never ran the call, so any call may be sent again."""
        return (self.refused or self.session_lost) and not self.reached


DELIVERY: ContextVar[Delivery | None] = ContextVar("tether_mcp_delivery", default=None)


@dataclass(eq=False)
class ReplyCap:
    """A bound on the reply to a `resources/read` sent in its context (`REPLY_CAP`): the reply
    is read as it arrives, at most `limit` bytes of it (decoded), and past that not a byte
    more; the request is then answered with an error in its place, and `passed` says so.
    `read`: the bytes of the reply received, counting the chunk that passed the limit."""

    limit: int
    read: int = 0
    passed: bool = False


REPLY_CAP: ContextVar[ReplyCap | None] = ContextVar("tether_mcp_reply_cap", default=None)
_CAPPED_METHOD = "resources/read"


@dataclass(eq=False)
class HttpState:
    """What one connection's HTTP requests have learnt of the server."""

    session_lost: bool = False  # it answered 404 to our session id: it restarted or expired it
    status: str | None = None  # the last HTTP error status it answered, as "HTTP 401 Unauthorized"


class _WatchedTransport(httpx2.AsyncBaseTransport):
    """httpx's own transport, reporting refusals and unknown-session answers."""

    def __init__(self, state: HttpState) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._state = state

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        delivery = DELIVERY.get()
        cap = _cap_of(request)
        if cap is not None:  # counted as it arrives: a compressed reply would be counted packed
            request.headers["accept-encoding"] = "identity"
        try:
            response = await self._inner.handle_async_request(request)
        except httpx2.ConnectError:
            if delivery is not None:
                delivery.refused = True
            raise
        # A 404 to a request that carries a session id: the server restarted or expired the
        # session (the spec's signal to start a new one); it ran nothing. Servers built on the
        # TypeScript SDK's examples (server-everything among them) answer 400 "No valid
        # session ID provided" instead.
        unknown = False
        if response.status_code == 400 and _SESSION_HEADER in request.headers:
            response, unknown = await _session_refusal(response)
        if unknown or (response.status_code == 404 and _SESSION_HEADER in request.headers):
            self._state.session_lost = True
            self._state.status = f"HTTP {response.status_code}"
            if delivery is not None:
                delivery.session_lost = True
                delivery.status = self._state.status
            return response
        if response.status_code >= 400:
            # The SDK reports most of these as "Server returned an error response".
            status = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
            self._state.status = status
            if delivery is not None:
                delivery.status = status
        if delivery is not None:
            delivery.reached = True
        if cap is not None and response.status_code < 300:
            return await _capped(request, response, cap, delivery)
        if delivery is not None:
            assert isinstance(response.stream, httpx2.AsyncByteStream)  # an async transport's
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                stream=_WatchedStream(response.stream, delivery),
                extensions=response.extensions,
            )
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _session_refusal(response: httpx2.Response) -> tuple[httpx2.Response, bool]:
    """Is a 400 a refusal of our session id (its JSON-RPC error says the session is not
    valid; a body past `_ERROR_BODY_LIMIT` is not parsed)? The response is given back with
    its body read, for the SDK to read again."""
    assert isinstance(response.stream, httpx2.AsyncByteStream)  # an async transport's
    try:
        body = b"".join([chunk async for chunk in response.stream])
    finally:
        await response.stream.aclose()
    kept = httpx2.Response(
        response.status_code,
        headers=response.headers,
        stream=httpx2.ByteStream(body),
        extensions=response.extensions,
    )
    if len(body) > _ERROR_BODY_LIMIT:
        return kept, False
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return kept, False
    return kept, isinstance(message, str) and _NO_SESSION.search(message) is not None


def _cap_of(request: httpx2.Request) -> ReplyCap | None:
    """The cap on this request's reply: one is set in its context and it is a POST of the
    method capped (not the notifications or other requests of a connection started there)."""
    cap = REPLY_CAP.get()
    if cap is None or request.method != "POST":
        return None
    try:
        method = json.loads(request.content).get("method")
    except (ValueError, AttributeError):
        return None
    return cap if method == _CAPPED_METHOD else None


async def _capped(
    request: httpx2.Request, response: httpx2.Response, cap: ReplyCap, delivery: Delivery | None
) -> httpx2.Response:
    """The reply read whole if it fits `cap`, given back read for the SDK to parse; else read
    no further than the chunk that passed it, closed, and replaced by a JSON-RPC error for
    the request (which the SDK answers its caller with). The SDK would read any reply whole
    (`aread`, or an SSE event's every line) before a size could be looked at."""
    reading = httpx2.Response(
        response.status_code, headers=response.headers, stream=response.stream, request=request
    )
    body = bytearray()
    try:
        async for chunk in reading.aiter_bytes():  # decoded, should the server compress anyway
            cap.read += len(chunk)
            if len(body) + len(chunk) > cap.limit:
                cap.passed = True
                break
            body += chunk
    except httpx2.TransportError:
        if delivery is not None:
            delivery.broken = True
        raise
    finally:
        await reading.aclose()
    if cap.passed:
        body = bytearray(_over_cap(request, cap))
        headers = httpx2.Headers({"content-type": "application/json"})
    else:
        headers = httpx2.Headers(response.headers)
        for spent in ("content-encoding", "content-length", "transfer-encoding"):
            headers.pop(spent, None)
    return httpx2.Response(
        response.status_code, headers=headers, content=bytes(body), extensions=response.extensions
    )


def _over_cap(request: httpx2.Request, cap: ReplyCap) -> bytes:
    request_id = json.loads(request.content).get("id")
    message = f"the reply ran over {cap.limit:,} bytes, and was not read further"
    error = {"code": -32603, "message": message}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()


class _WatchedStream(httpx2.AsyncByteStream):
    """A response body that notes when it breaks off (the server died while answering)."""

    def __init__(self, inner: httpx2.AsyncByteStream, delivery: Delivery) -> None:
        self._inner = inner
        self._delivery = delivery

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx2.TransportError:
            self._delivery.broken = True
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


AuthFactory = Callable[[], Awaitable[httpx2.Auth]]


@asynccontextmanager
async def http_transport(
    url: str,
    headers: dict[str, str],
    state: HttpState,
    *,
    sse: bool = False,
    auth: AuthFactory | None = None,
) -> AsyncIterator[Any]:
    """Streamable HTTP, or the legacy HTTP+SSE transport (`sse`: `url` is the SSE endpoint).
    `auth` makes the OAuth provider once the connection starts (it may read the store)."""
    provider = await auth() if auth is not None else None

    def client(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            headers=headers,
            timeout=timeout or _HTTP_TIMEOUT,
            auth=auth,
            transport=_WatchedTransport(state),
        )

    if sse:
        async with sse_client(
            url,
            headers=headers,
            timeout=_HTTP_TIMEOUT.connect or 30.0,
            sse_read_timeout=_HTTP_TIMEOUT.read or 300.0,
            httpx_client_factory=client,
            auth=provider,
        ) as streams:
            yield streams
        return
    async with (
        client(headers=headers, auth=provider) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def refused(exc: BaseException) -> bool:
    """Was nobody listening (connection refused), anywhere in an exception and its groups and
    causes? Then nothing was delivered, and trying again shortly may find the server back."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, httpx2.ConnectError):
            return True
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)
    return False


def status_error(exc: BaseException) -> bool:
    """Is the innermost error httpx's for an HTTP error status (the SSE transport raises it
    when its stream is refused)? Then the status, as `HttpState` noted it, says it all."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return isinstance(exc, httpx2.HTTPStatusError)
