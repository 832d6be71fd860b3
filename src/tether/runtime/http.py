"""`HttpRuntime`: the Runtime protocol as a client of `tether serve` (httpx).

Owns the wire side of the API: requests, the error envelope mapped back to tether's errors,
and reading the Server-Sent Events stream, reconnecting with `Last-Event-ID` when the
connection drops, so the events it yields have no gaps and no duplicates.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Mapping
from datetime import datetime
from typing import Any, Unpack
from urllib.parse import urlencode

import httpx

from tether.errors import (
    CorruptLog,
    IdempotencyConflict,
    QuotaExceeded,
    SessionNotFound,
    StoreError,
    TetherError,
    UsageError,
)
from tether.events import Event, ForkKind, SessionEnded
from tether.messages import JSONObject
from tether.providers.base import Delta
from tether.runtime.base import (
    Capabilities,
    CapabilityRefused,
    InvalidForkPoint,
    ListOptions,
    SessionPage,
    SessionRef,
    SessionSpec,
    SessionStatus,
    SpecChanges,
    StateConflict,
    events_only,
)
from tether.runtime.wire import from_json
from tether.session.fork import Forked, ForkPoint, OpenCalls

RECONNECTS = 5  # a stream that drops reconnects this many times in a row before giving up


class Unauthorized(UsageError):
    """The server refused the token (or there was none)."""


class ServerFailed(TetherError):
    """The server answered 5xx."""


_ERRORS: dict[str, type[Exception]] = {
    "capability_refused": CapabilityRefused,
    "invalid_fork_point": InvalidForkPoint,
    "idempotency_conflict": IdempotencyConflict,
    "state_conflict": StateConflict,
    "unauthorized": Unauthorized,
    "store_unavailable": StoreError,
    "session_unreadable": CorruptLog,
    "conflict": StoreError,
    "timeout": TimeoutError,
    "internal": ServerFailed,
}


def error_from(response: httpx.Response, session_id: str | None) -> Exception:
    try:
        body = response.json()["error"]
        code, message = str(body["code"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "", f"HTTP {response.status_code}: {response.text[:200]}"
    if code == "session_not_found" and session_id is not None:
        return SessionNotFound(session_id)
    if code == "quota_exceeded":
        wait = response.headers.get("retry-after", "")
        return QuotaExceeded(message, float(wait) if wait.isdigit() else 1.0)
    kind = _ERRORS.get(code) or (ServerFailed if response.status_code >= 500 else UsageError)
    return kind(message)


class HttpRuntime:
    """`HttpRuntime("http://127.0.0.1:8700", token="...")`. `client` may be given to share
    a connection pool; otherwise one is made and closed with the runtime."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._owns = client is None
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(60.0, connect=connect_timeout),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=100),
        )
        self._base = base_url.rstrip("/")
        self._headers = headers

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: dict[str, str] | None = None,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        async with asyncio.timeout(timeout):
            response = await self._client.request(
                method,
                self._base + path,
                json=body,
                headers={**self._headers, **(headers or {})},
            )
        if response.status_code >= 400:
            raise error_from(response, session_id)
        return response.json()

    async def capabilities(self, *, timeout: float | None = None) -> Capabilities:
        data = await self._call("GET", "/v1/capabilities", timeout=timeout)
        return Capabilities.from_json(data)

    async def sessions(
        self, limit: int = 50, *, timeout: float | None = None, **options: Unpack[ListOptions]
    ) -> SessionPage:
        query = urlencode(list_params(limit, options))
        data = await self._call("GET", f"/v1/sessions?{query}", timeout=timeout)
        return SessionPage.from_json(data)

    async def start(
        self,
        spec: SessionSpec,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> SessionRef:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        data = await self._call(
            "POST", "/v1/sessions", body=spec.to_json(), headers=headers, timeout=timeout
        )
        return SessionRef(str(data["session_id"]))

    async def poll(self, ref: SessionRef, *, timeout: float | None = None) -> SessionStatus:
        data = await self._call("GET", _path(ref), session_id=ref.session_id, timeout=timeout)
        return SessionStatus.from_json(data)

    async def fork(
        self,
        ref: SessionRef,
        *,
        at: ForkPoint | None = None,
        changes: SpecChanges | None = None,
        message: str | None = None,
        kind: ForkKind = "fork",
        open_calls: OpenCalls = "refuse",
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Forked:
        body: JSONObject = {"kind": kind, "open_calls": open_calls}
        if at is not None and at != ForkPoint():
            point = {"seq": at.seq, "turn": at.turn, "after_turn": at.after_turn}
            body["at"] = {k: v for k, v in point.items() if v is not None}
        if message is not None:
            body["message"] = message
        body.update((changes or SpecChanges()).to_json())
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        data = await self._call(
            "POST", _path(ref, "fork"), body=body, headers=headers,
            session_id=ref.session_id, timeout=timeout,
        )  # fmt: skip
        return from_json(Forked, data)

    async def cancel(self, ref: SessionRef, *, timeout: float | None = None) -> None:
        await self._call("POST", _path(ref, "cancel"), session_id=ref.session_id, timeout=timeout)

    async def interrupt(self, ref: SessionRef, *, timeout: float | None = None) -> None:
        await self._call(
            "POST", _path(ref, "interrupt"), session_id=ref.session_id, timeout=timeout
        )

    async def send(
        self,
        ref: SessionRef,
        message: str,
        *,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        await self._call(
            "POST", _path(ref, "messages"), body={"text": message}, headers=headers,
            session_id=ref.session_id, timeout=timeout,
        )  # fmt: skip

    async def decide(
        self,
        ref: SessionRef,
        call_id: str,
        allow: bool,
        reason: str | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        await self._call(
            "POST", _path(ref, "decisions"), body={"call_id": call_id, "allow": allow, "reason": reason},
            session_id=ref.session_id, timeout=timeout,
        )  # fmt: skip

    async def answer(
        self,
        ref: SessionRef,
        call_id: str,
        data: JSONObject | None = None,
        action: str = "accept",
        *,
        timeout: float | None = None,
    ) -> None:
        await self._call(
            "POST", _path(ref, "answers"), body={"call_id": call_id, "action": action, "data": data},
            session_id=ref.session_id, timeout=timeout,
        )  # fmt: skip

    def events(
        self, ref: SessionRef, after_seq: int = 0, *, timeout: float | None = None
    ) -> AsyncIterator[Event]:
        return events_only(self._stream(ref, after_seq, timeout, deltas=False))

    def live(
        self, ref: SessionRef, after_seq: int = 0, *, timeout: float | None = None
    ) -> AsyncIterator[Event | Delta]:
        return self._stream(ref, after_seq, timeout, deltas=True)

    async def _stream(
        self, ref: SessionRef, after_seq: int, timeout: float | None, *, deltas: bool
    ) -> AsyncGenerator[Event | Delta, None]:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        cursor, drops = after_seq, 0
        while True:
            left = None if deadline is None else max(0.001, deadline - loop.time())
            params = {} if left is None else {"timeout": f"{left:.3f}"}
            if deltas:
                params["deltas"] = "true"
            headers = {**self._headers, "Last-Event-ID": str(cursor), "Accept": "text/event-stream"}
            try:
                async with asyncio.timeout_at(deadline):
                    request = self._client.build_request(
                        "GET", self._base + _path(ref, "stream"), params=params, headers=headers
                    )
                    response = await self._client.send(request, stream=True)
                try:
                    if response.status_code >= 400:
                        await response.aread()
                        raise error_from(response, ref.session_id)
                    frames = _frames(response)
                    while True:
                        async with asyncio.timeout_at(deadline):
                            frame = await anext(frames, None)
                        if frame is None:
                            break  # the connection closed without saying why: reconnect
                        kind, ident, data = frame
                        if kind == "delta":
                            piece = json.loads(data)
                            yield Delta(piece["kind"], piece["text"], piece.get("call_id"))
                            continue
                        if kind == "end":
                            if json.loads(data).get("reason") == "timeout":
                                raise TimeoutError("the event stream passed its deadline")
                            return
                        event = Event.from_json(json.loads(data))
                        if ident != str(event.seq) or event.seq != cursor + 1:
                            continue  # the server resumed before our cursor: skip repeats
                        cursor, drops = event.seq, 0
                        yield event
                        if isinstance(event.payload, SessionEnded):
                            return
                finally:
                    await response.aclose()
            except (httpx.TransportError, httpx.StreamError):
                pass  # dropped: resume after the last event we yielded
            drops += 1
            if drops > RECONNECTS:
                raise StoreError(f"the event stream of {ref.session_id} kept dropping")
            await asyncio.sleep(min(1.0, 0.05 * 2**drops))

    async def close(self) -> None:
        if self._owns:
            await self._client.aclose()


def list_params(limit: int, options: ListOptions) -> list[tuple[str, str]]:
    """`sessions`' options as `GET /v1/sessions`'s query parameters: a collection of values
    comma-separated, a time in ISO 8601, each metadata pair a `metadata=KEY=VALUE`. The
    server checks them, as `LocalRuntime` does."""
    params = [("limit", str(limit))]
    for name, value in options.items():
        if value is None or (not value and not isinstance(value, bool)):
            continue
        if name == "metadata" and isinstance(value, Mapping):
            params += [("metadata", f"{k}={v}") for k, v in value.items()]
        elif isinstance(value, bool):
            params.append((name, "true" if value else "false"))
        elif isinstance(value, datetime):
            params.append((name, value.isoformat()))
        elif isinstance(value, str):
            params.append((name, value))
        elif isinstance(value, Collection):
            params.append((name, ",".join(str(v) for v in value)))
        else:
            params.append((name, str(value)))
    return params


def _path(ref: SessionRef, action: str | None = None) -> str:
    from urllib.parse import quote

    base = f"/v1/sessions/{quote(ref.session_id, safe='')}"
    return base if action is None else f"{base}/{action}"


async def _frames(response: httpx.Response) -> AsyncIterator[tuple[str, str, str]]:
    """Server-Sent Events frames as (event, id, data); comments are skipped."""
    kind, ident, data = "message", "", list[str]()
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield kind, ident, "\n".join(data)
            kind, ident, data = "message", "", list[str]()
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                kind = value
            elif field == "id":
                ident = value
            elif field == "data":
                data.append(value)
