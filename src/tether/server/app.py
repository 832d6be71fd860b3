"""`tether serve`: the Runtime protocol over HTTP (Starlette on uvicorn).

A thin adapter over `LocalRuntime` scoped to the caller's tenant: it authenticates, parses
and validates, calls exactly what a library user calls, and answers JSON, an error envelope
(`errors`) or a Server-Sent Events stream. Shapes and the OpenAPI document: `schemas`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tether.events import Event
from tether.providers.base import Delta
from tether.runtime.base import SessionRef
from tether.runtime.local import LocalRuntime
from tether.server.auth import Tokens
from tether.server.errors import ApiError, classify, envelope
from tether.server.metrics import Metrics
from tether.server.schemas import DecisionBody, MessageBody, StartBody, StopBody, openapi

log = logging.getLogger("tether.server")
B = TypeVar("B", bound=BaseModel)
Handler = Callable[[Request, LocalRuntime], Awaitable[Response]]

MAX_BODY = 1 << 20
# The web view: one static page that talks to this API with the token it is given.
UI_PAGE = (Path(__file__).parent / "ui.html").read_text(encoding="utf-8")
KEEPALIVE = 15.0  # seconds between SSE comments on a quiet stream, so proxies keep it open


class Api:
    def __init__(
        self, runtime: LocalRuntime, tokens: Tokens | None, gateways: Iterable[Any] = ()
    ) -> None:
        self.runtime = runtime
        self.tokens = tokens  # None: no authentication, one unscoped tenant
        self.metrics = Metrics(runtime, gateways)

    def scoped(self, request: Request) -> LocalRuntime:
        if self.tokens is None:
            return self.runtime
        tenant = self.tokens.tenant(request.headers.get("authorization"))
        if tenant is None:
            given = (
                "a token no tenant holds" if request.headers.get("authorization") else "no token"
            )
            raise ApiError("unauthorized", f"{given}: send Authorization: Bearer TOKEN")
        return self.runtime.for_tenant(tenant)

    def route(
        self, name: str, handler: Handler, *, auth: bool = True, query: tuple[str, ...] = ()
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                rt = self.scoped(request) if auth else self.runtime
                unknown = sorted(set(request.query_params) - set(query))
                if unknown:
                    known = ", ".join(query) or "none"
                    raise ApiError(
                        "invalid_request",
                        f"unknown query parameter {unknown[0][:40]!r} (known: {known})",
                    )
                response = await handler(request, rt)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                code, message = classify(exc)
                if code == "internal":
                    log.exception("%s %s failed", request.method, request.url.path)
                response = envelope(code, message)
            self.metrics.request(name, response.status_code)
            return response

        return endpoint

    # -- the operations --------------------------------------------------------------------
    async def start(self, request: Request, rt: LocalRuntime) -> Response:
        body = await parse(request, StartBody)
        key = idempotency_key(request)
        ref = await rt.start(body.to_spec(), idempotency_key=key)
        status = await rt.poll(ref)
        return JSONResponse(
            {"session_id": ref.session_id, "status": status.to_json()},
            201,
            headers={"Location": f"/v1/sessions/{ref.session_id}"},
        )

    async def list_sessions(self, request: Request, rt: LocalRuntime) -> Response:
        summaries = await rt.sessions(int_param(request, "limit", 50, 1, 500))
        return JSONResponse({"sessions": [s.to_json() for s in summaries]})

    async def ui(self, request: Request, rt: LocalRuntime) -> Response:
        return HTMLResponse(UI_PAGE, headers={"Cache-Control": "no-store"})

    async def poll(self, request: Request, rt: LocalRuntime) -> Response:
        return JSONResponse((await rt.poll(session_ref(request))).to_json())

    async def cancel(self, request: Request, rt: LocalRuntime) -> Response:
        return await self._stop(request, rt, "session")

    async def interrupt(self, request: Request, rt: LocalRuntime) -> Response:
        return await self._stop(request, rt, "turn")

    async def _stop(self, request: Request, rt: LocalRuntime, scope: str) -> Response:
        ref = session_ref(request)
        body = await parse(request, StopBody, required=False)
        done = await rt.stop(ref, scope, body.reason)
        return JSONResponse({"session_id": ref.session_id, "done": done})

    async def send(self, request: Request, rt: LocalRuntime) -> Response:
        ref = session_ref(request)
        body = await parse(request, MessageBody)
        # The key names the message's event in the log: any server process finds it there.
        sent = await rt.deliver(ref, body.text, idempotency_key=idempotency_key(request))
        done = "sent" if sent else "sent already"
        return JSONResponse({"session_id": ref.session_id, "done": done}, 202)

    async def decide(self, request: Request, rt: LocalRuntime) -> Response:
        ref = session_ref(request)
        body = await parse(request, DecisionBody)
        await rt.decide(ref, body.call_id, body.allow, body.reason)
        done = f"{body.call_id} {'allowed' if body.allow else 'denied'}"
        return JSONResponse({"session_id": ref.session_id, "done": done})

    async def events(self, request: Request, rt: LocalRuntime) -> Response:
        ref = session_ref(request)
        after = int_param(request, "after_seq", 0, 0, None)
        limit = int_param(request, "limit", 1000, 1, 10_000)
        status = await rt.poll(ref)  # the tenant's session, or not found
        # One event past the page says whether there is more, without reading the rest.
        events = await rt.store.read(ref.session_id, after, limit=limit + 1)
        return JSONResponse(
            {
                "events": [e.to_json() for e in events[:limit]],
                "last_seq": status.last_seq,
                "more": len(events) > limit,
            }
        )

    async def stream(self, request: Request, rt: LocalRuntime) -> Response:
        ref = session_ref(request)
        after = int_param(request, "after_seq", 0, 0, None)
        last_id = request.headers.get("last-event-id")
        if last_id is not None:
            if not last_id.strip().isdigit() or len(last_id.strip()) > 15:
                raise ApiError(
                    "invalid_request", f"Last-Event-ID must be a seq (digits), not {last_id[:40]!r}"
                )
            after = int(last_id.strip())  # a reconnecting client resumes where it was
        timeout = float_param(request, "timeout", None, 3600.0)
        deltas = bool_param(request, "deltas")
        await rt.poll(ref)  # refuse before the stream starts: a 404 is a status, not an event
        self.metrics.streams += 1
        return StreamingResponse(
            self._sse(rt, ref, after, timeout, deltas),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def _sse(
        self,
        rt: LocalRuntime,
        ref: SessionRef,
        after: int,
        timeout: float | None,
        deltas: bool = False,
    ) -> AsyncIterator[bytes]:
        self.metrics.subscribers += 1
        events = cast(
            AsyncGenerator[Event | Delta, None],
            rt.live(ref, after, timeout=timeout)
            if deltas
            else rt.events(ref, after, timeout=timeout),
        )
        pending: asyncio.Future[Event | Delta] | None = None
        try:
            yield b": tether event stream\n\n"
            while True:
                pending = asyncio.ensure_future(anext(events))
                while not (await asyncio.wait({pending}, timeout=KEEPALIVE))[0]:
                    yield b": keepalive\n\n"
                try:
                    event = pending.result()
                except StopAsyncIteration:
                    yield b'event: end\ndata: {"reason":"session_ended"}\n\n'
                    return
                except TimeoutError:  # the client's `timeout`: it may reconnect from its id
                    yield b'event: end\ndata: {"reason":"timeout"}\n\n'
                    return
                finally:
                    pending = None
                if isinstance(event, Delta):
                    yield delta_frame(event)
                    continue
                self.metrics.events_streamed += 1
                yield sse_frame(event)
        finally:
            self.metrics.subscribers -= 1
            if pending is not None:
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending
            await events.aclose()

    async def capabilities(self, request: Request, rt: LocalRuntime) -> Response:
        return JSONResponse((await rt.capabilities()).to_json())

    async def health(self, request: Request, rt: LocalRuntime) -> Response:
        await rt.store.last_seq("tether-health-check")  # the store answers
        return JSONResponse({"status": "ok"})

    async def metrics_text(self, request: Request, rt: LocalRuntime) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def openapi_json(self, request: Request, rt: LocalRuntime) -> Response:
        return JSONResponse(openapi())


def sse_frame(event: Event) -> bytes:
    return f"id: {event.seq}\nevent: {event.type}\ndata: {event.canonical()}\n\n".encode()


def delta_frame(delta: Delta) -> bytes:
    """No `id`: a delta is not in the log, so a reconnecting client resumes by event seq."""
    data = json.dumps({"kind": delta.kind, "text": delta.text, "call_id": delta.call_id})
    return f"event: delta\ndata: {data}\n\n".encode()


def session_ref(request: Request) -> SessionRef:
    return SessionRef(str(request.path_params["session_id"]))


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not key.strip() or len(key) > 200:
        raise ApiError("invalid_request", "Idempotency-Key must be 1-200 characters")
    return key


def int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.strip().isdigit() or len(raw) > 15 or not low <= int(raw) <= (high or int(raw)):
        bound = f"{low}..{high}" if high else f"{low} or more"
        raise ApiError(
            "invalid_request",
            f"query parameter {name} must be an integer {bound}, not {raw[:40]!r}",
        )
    return int(raw)


def float_param(request: Request, name: str, default: float | None, high: float) -> float | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= high:  # also refuses nan
        raise ApiError(
            "invalid_request",
            f"query parameter {name} must be a number in (0, {high:g}], not {raw[:40]!r}",
        )
    return value


def bool_param(request: Request, name: str) -> bool:
    raw = request.query_params.get(name)
    if raw is None or raw in ("false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise ApiError(
        "invalid_request", f"query parameter {name} must be true or false, not {raw[:40]!r}"
    )


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


async def parse(request: Request, model: type[B], *, required: bool = True) -> B:
    """The body as `model`, or a 4xx naming what is wrong."""
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > MAX_BODY:
        raise ApiError("payload_too_large", f"the body has {size} bytes; the limit is {MAX_BODY}")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise ApiError("payload_too_large", f"the body is over the limit of {MAX_BODY} bytes")
    if not raw.strip():
        if required:
            raise ApiError("invalid_request", f"a JSON body ({model.__name__}) is required")
        return model()
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError("unsupported_media_type", f"the body must be application/json, not {kind!r}")
    try:
        data = json.loads(raw, parse_constant=_no_constants)
        json.dumps(data, ensure_ascii=False).encode()  # refuses lone surrogates
    except (ValueError, RecursionError, UnicodeError) as exc:
        raise ApiError("invalid_json", f"the body is not valid JSON: {str(exc)[:200]}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        ]
        raise ApiError("invalid_request", "; ".join(problems)) from None


def create_app(
    runtime: LocalRuntime, tokens: Tokens | None, *, gateways: Iterable[Any] = ()
) -> Starlette:
    """The app for `runtime`. `tokens=None` turns authentication off (one unscoped tenant)."""
    api = Api(runtime, tokens, gateways)
    r = api.route
    routes = [
        Route("/healthz", r("health", api.health, auth=False)),
        Route("/metrics", r("metrics", api.metrics_text, auth=False)),
        Route("/openapi.json", r("openapi", api.openapi_json, auth=False)),
        Route("/v1/capabilities", r("capabilities", api.capabilities)),
        Route("/ui", r("ui", api.ui, auth=False)),
        Route("/v1/sessions", r("start", api.start), methods=["POST"]),
        Route("/v1/sessions", r("list", api.list_sessions, query=("limit",)), methods=["GET"]),
        Route("/v1/sessions/{session_id}", r("poll", api.poll)),
        Route("/v1/sessions/{session_id}/cancel", r("cancel", api.cancel), methods=["POST"]),
        Route(
            "/v1/sessions/{session_id}/interrupt", r("interrupt", api.interrupt), methods=["POST"]
        ),
        Route("/v1/sessions/{session_id}/messages", r("send", api.send), methods=["POST"]),
        Route("/v1/sessions/{session_id}/decisions", r("decide", api.decide), methods=["POST"]),
        Route(
            "/v1/sessions/{session_id}/events",
            r("events", api.events, query=("after_seq", "limit")),
        ),
        Route(
            "/v1/sessions/{session_id}/stream",
            r("stream", api.stream, query=("after_seq", "timeout", "deltas")),
        ),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        code = {404: "not_found", 405: "method_not_allowed"}.get(status, "invalid_request")
        message = f"{request.method} {request.url.path}: {code.replace('_', ' ')}"
        return envelope(code, message) if status < 500 else envelope("internal", message)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with runtime:
            yield

    app = Starlette(
        routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan
    )
    app.state.api = api
    return app
