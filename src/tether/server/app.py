"""`tether serve`: the Runtime protocol over HTTP (Starlette on uvicorn).

A thin adapter over `LocalRuntime` scoped to the caller's tenant: it authenticates, parses
and validates, calls exactly what a library user calls, and answers JSON, an error envelope
(`errors`) or a Server-Sent Events stream. Shapes and the OpenAPI document: `schemas`;
reading a request: `params`; an event stream's frames: `sse`; headers and the loopback
guard: `web`; experiments' reports and charts: `experiments`; a tenant's usage: `usage`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Match, Route

from tether.errors import CorruptLog, UsageError
from tether.events import Event
from tether.providers.base import Delta
from tether.runtime import wire
from tether.runtime.base import SessionRef
from tether.runtime.listing import MAX_LIMIT
from tether.runtime.local import LocalRuntime
from tether.server import experiments, listquery, offer, transcript, usage
from tether.server.auth import Tokens
from tether.server.bounds import InputLimits
from tether.server.errors import ApiError, envelope, error_response
from tether.server.metrics import Metrics
from tether.server.params import (
    bool_param,
    digits,
    float_param,
    idempotency_key,
    int_param,
    parse,
    session_ref,
)
from tether.server.schemas import (
    AnswerBody,
    DecisionBody,
    ForkBody,
    MessageBody,
    StartBody,
    StopBody,
    openapi,
)
from tether.server.sse import Frames, chunks
from tether.server.summary import summarise
from tether.server.web import ASSETS, WebGuard, asset

log = logging.getLogger("tether.server")
Handler = Callable[[Request, LocalRuntime], Awaitable[Response]]

FIRST = asyncio.FIRST_COMPLETED
KEEPALIVE = 15.0  # seconds between SSE comments on a quiet stream, so proxies keep it open
# The web view's page, script and style; `/` leads to the page (pages, not API operations).
WEB_VIEW = ("/", *ASSETS)
# `GET /v1/sessions`: paging, filters, sort, counts (`listquery`; documented in `schemas`).
LIST_QUERY = (
    "limit", "cursor", "state", "id_prefix", "q", "stop_reason", "model", "created_after",
    "created_before", "metadata", "sort", "counts", "parent",
)  # fmt: skip
READY_TIMEOUT = 5.0  # seconds the store has to take /readyz's write and read


class Api:
    def __init__(
        self,
        runtime: LocalRuntime,
        tokens: Tokens | None,
        gateways: Iterable[Any] = (),
        metrics_token: str | None = None,
        limits: InputLimits | None = None,
    ) -> None:
        self.runtime = runtime
        self.limits = limits or InputLimits()
        self.tokens = tokens  # None: no authentication, one unscoped tenant
        self.metrics = Metrics(runtime, gateways)
        self.metrics_token = metrics_token  # None: /metrics names no tenant and no backend
        # The store's integrity check, run in the background as serving begins (`lifespan`).
        self.checking: asyncio.Task[None] | None = None
        self.queries: dict[str, tuple[str, ...]] = {}  # route name -> its query parameters
        self._closing: asyncio.Future[None] | None = None

    def close_streams(self) -> None:
        """End every event stream now (the server is shutting down): each closes without an
        `end` frame, so its client reconnects, to another server, from its last event id."""
        closing = self.closing()
        if not closing.done():
            closing.set_result(None)

    def closing(self) -> asyncio.Future[None]:
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_future()
        return self._closing

    def scoped(self, request: Request) -> LocalRuntime:
        if self.tokens is None:
            return self.runtime
        tenant = self.tokens.tenant(request.headers.get("authorization"))
        if tenant is None:
            given = (
                "a token no tenant holds" if request.headers.get("authorization") else "no token"
            )
            raise ApiError("unauthorized", f"{given}: send Authorization: Bearer TOKEN")
        return self.runtime.for_tenant(tenant, self.tokens.quota(tenant))

    def route(
        self, name: str, handler: Handler, *, auth: bool = True, query: tuple[str, ...] = ()
    ) -> Callable[[Request], Awaitable[Response]]:
        self.queries[name] = query

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
                response = error_response(exc)
                if response.status_code == 500:  # not a known failure: a bug to look at
                    log.exception("%s %s failed", request.method, request.url.path)
            self.metrics.request(name, response.status_code)
            return response

        return endpoint

    # -- the operations --------------------------------------------------------------------
    async def start(self, request: Request, rt: LocalRuntime) -> Response:
        limits = self.limits
        body = await parse(
            request, StartBody, max_body=limits.body_bytes, check=limits.check_start_json
        )
        limits.check_start(body)
        key = idempotency_key(request)
        ref = await rt.start(body.to_spec(), idempotency_key=key)
        status = await rt.poll(ref)
        return JSONResponse(
            {"session_id": ref.session_id, "status": status.to_json()},
            201,
            headers={"Location": f"/v1/sessions/{ref.session_id}"},
        )

    async def list_sessions(self, request: Request, rt: LocalRuntime) -> Response:
        """A page of the tenant's sessions, from the store's catalog (`runtime.listing`)."""
        params = request.query_params
        options = listquery.list_options(
            params, params.getlist("metadata"), bool_param(request, "counts")
        )
        limit = int_param(request, "limit", 50, 1, MAX_LIMIT)
        try:
            page = await rt.sessions(limit, **options)
        except UsageError as exc:  # an option the runtime refused: a parameter of this request
            raise ApiError("invalid_request", str(exc)) from None
        return JSONResponse(page.to_json())

    async def ui(self, request: Request, rt: LocalRuntime) -> Response:
        """The web view: a static page, its script and its style (`web.ASSETS`); `/`
        redirects to the page."""
        if request.url.path == "/":
            return RedirectResponse("/ui", status_code=302)
        return asset(request.url.path)

    async def poll(self, request: Request, rt: LocalRuntime) -> Response:
        return JSONResponse((await rt.poll(session_ref(request))).to_json())

    async def fork(self, request: Request, rt: LocalRuntime) -> Response:
        """`Runtime.fork`: 201 with the child (`Forked`), as the tenant's own session."""
        ref = session_ref(request)
        limits = self.limits
        body = await parse(
            request,
            ForkBody,
            required=False,
            max_body=limits.body_bytes,
            check=limits.check_start_json,
        )
        for where, text in (("message", body.message), ("system", body.system)):
            if text is not None:
                limits.check_text(where, text)
        forked = await rt.fork(
            ref,
            at=body.point(),
            changes=body.to_changes(),
            message=body.message,
            kind=body.kind,
            open_calls=body.open_calls,
            idempotency_key=idempotency_key(request),
        )
        return JSONResponse(
            wire.to_json(forked), 201, headers={"Location": f"/v1/sessions/{forked.session_id}"}
        )

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
        body = await parse(request, MessageBody, max_body=self.limits.body_bytes)
        self.limits.check_text("the message", body.text)
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

    async def answer(self, request: Request, rt: LocalRuntime) -> Response:
        ref = session_ref(request)
        body = await parse(request, AnswerBody, max_body=self.limits.body_bytes)
        self.limits.check_answer(body)
        await rt.answer(ref, body.call_id, body.data, body.action)
        done = f"{body.call_id} answered ({body.action})"
        return JSONResponse({"session_id": ref.session_id, "done": done})

    async def events(self, request: Request, rt: LocalRuntime) -> Response:
        ref = session_ref(request)
        after = int_param(request, "after_seq", 0, 0, None)
        limit = int_param(request, "limit", 1000, 1, 10_000)
        brief = bool_param(request, "summary")
        status = await rt.poll(ref)  # the tenant's session, or not found
        # One event past the page says whether there is more, without reading the rest.
        events = await rt.store.read(ref.session_id, after, limit=limit + 1)
        return JSONResponse(
            {
                "events": [summarise(e) if brief else e.to_json() for e in events[:limit]],
                "last_seq": status.last_seq,
                "more": len(events) > limit,
            }
        )

    async def event(self, request: Request, rt: LocalRuntime) -> Response:
        """One whole event, by its seq: what a summary (`?summary=true`) left out."""
        ref = session_ref(request)
        raw = str(request.path_params["seq"])
        if not digits(raw) or int(raw) < 1:
            raise ApiError(
                "invalid_request", f"an event's seq is an integer from 1, not {raw[:40]!r}"
            )
        seq = int(raw)
        await rt.poll(ref)  # the tenant's session, or not found: as the other event routes
        found = await rt.store.read(ref.session_id, seq - 1, limit=1)
        if not found or found[0].seq != seq:
            raise ApiError("event_not_found", f"session {ref.session_id} has no event {seq}")
        return JSONResponse(found[0].to_json())

    async def transcript(self, request: Request, rt: LocalRuntime) -> Response:
        """A page of one thread's transcript, from the fold (`server.transcript`)."""
        ref = session_ref(request)
        thread = request.query_params.get("thread", "")
        if len(thread) > 1_000:
            raise ApiError("invalid_request", "thread: a thread id is at most 1,000 characters")
        after = int_param(request, "after", 0, 0, None)
        limit = int_param(request, "limit", transcript.LIMIT, 1, transcript.MAX_LIMIT)
        clip = int_param(request, "clip", transcript.CLIP, 0, None)
        folder = await rt.folded(ref, thread)
        if folder is None:
            raise ApiError(
                "thread_not_found", f"session {ref.session_id} has no thread {thread[:80]!r}"
            )
        return JSONResponse(transcript.page(folder, after, limit, clip))

    async def stream(self, request: Request, rt: LocalRuntime) -> Response:
        ref = session_ref(request)
        after = int_param(request, "after_seq", 0, 0, None)
        last_id = request.headers.get("last-event-id")
        if last_id is not None:
            if not digits(last_id.strip()):
                raise ApiError(
                    "invalid_request", f"Last-Event-ID must be a seq (digits), not {last_id[:40]!r}"
                )
            after = int(last_id.strip())  # a reconnecting client resumes where it was
        timeout = float_param(request, "timeout", None, 3600.0)
        deltas = bool_param(request, "deltas")
        brief = bool_param(request, "summary")
        await rt.poll(ref)  # refuse before the stream starts: a 404 is a status, not an event
        self.metrics.streams += 1
        return StreamingResponse(
            self._sse(rt, ref, after, timeout, deltas, brief),
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
        brief: bool = False,
    ) -> AsyncIterator[bytes]:
        self.metrics.subscribers += 1
        events = cast(
            AsyncGenerator[Event | Delta, None],
            rt.live(ref, after, timeout=timeout)
            if deltas
            else rt.events(ref, after, timeout=timeout),
        )

        def counted() -> None:
            self.metrics.events_streamed += 1

        frames = Frames(events, brief, counted)
        try:
            async for chunk in chunks(frames, self.closing(), KEEPALIVE):
                yield chunk
        finally:
            self.metrics.subscribers -= 1
            await frames.aclose()

    async def capabilities(self, request: Request, rt: LocalRuntime) -> Response:
        return JSONResponse((await rt.capabilities()).to_json())

    async def health(self, request: Request, rt: LocalRuntime) -> Response:
        """The process answers; nothing else is touched (readiness: `ready`)."""
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request, rt: LocalRuntime) -> Response:
        """The store takes a write and a read now, or a 503 that says why not."""
        try:
            async with asyncio.timeout(READY_TIMEOUT):
                if self.checking is not None:  # ready once the whole file was read
                    await asyncio.shield(self.checking)
                await rt.store.ready()
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            if self.checking is not None and not self.checking.done():
                raise ApiError(
                    "store_unavailable", "the store's integrity check is still reading the file"
                ) from None
            raise ApiError(
                "store_unavailable", f"the store did not answer within {READY_TIMEOUT:g} s"
            ) from None
        except Exception as exc:  # its message may name the database: for the log only
            log.warning("/readyz: the store is not ready: %s", exc)
            raise ApiError(
                "store_unavailable",
                f"the store is not ready ({type(exc).__name__}); the server's log says why",
            ) from None
        return JSONResponse({"status": "ready"})

    async def metrics_text(self, request: Request, rt: LocalRuntime) -> Response:
        """Name-free totals for anyone; per-backend series only with the operator's token."""
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        names = self.metrics_token is not None and hmac.compare_digest(
            given.encode(), self.metrics_token.encode()
        )
        text = await self.metrics.scrape(names=names)
        return Response(text, media_type="text/plain; version=0.0.4")

    async def openapi_json(self, request: Request, rt: LocalRuntime) -> Response:
        return JSONResponse(openapi())


def create_app(
    runtime: LocalRuntime,
    tokens: Tokens | None,
    *,
    gateways: Iterable[Any] = (),
    metrics_token: str | None = None,
    limits: InputLimits | None = None,
) -> Starlette:
    """The app for `runtime`. `tokens=None` turns authentication off (one unscoped tenant),
    and then only loopback requests from the server's own pages are served (`web`).
    `limits`: what a request may hold (`bounds.InputLimits()` by default)."""
    api = Api(runtime, tokens, gateways, metrics_token, limits)
    r = api.route
    routes = [
        Route("/healthz", r("health", api.health, auth=False), name="health"),
        Route("/readyz", r("ready", api.ready, auth=False), name="ready"),
        Route("/metrics", r("metrics", api.metrics_text, auth=False), name="metrics"),
        Route("/openapi.json", r("openapi", api.openapi_json, auth=False), name="openapi"),
        Route("/v1/capabilities", r("capabilities", api.capabilities), name="capabilities"),
        Route("/v1/start-options", r("options", offer.start_options), name="options"),
        *(Route(path, r("ui", api.ui, auth=False), name="ui") for path in WEB_VIEW),
        Route("/v1/sessions", r("start", api.start), methods=["POST"], name="start"),
        Route(
            "/v1/sessions",
            r("list", api.list_sessions, query=LIST_QUERY),
            methods=["GET"],
            name="list",
        ),
        Route("/v1/sessions/{session_id}", r("poll", api.poll), name="poll"),
        *(
            Route(
                f"/v1/sessions/{{session_id}}/{verb}", r(name, handler), methods=["POST"], name=name
            )
            for verb, name, handler in (
                ("fork", "fork", api.fork),
                ("cancel", "cancel", api.cancel),
                ("interrupt", "interrupt", api.interrupt),
                ("messages", "send", api.send),
                ("decisions", "decide", api.decide),
                ("answers", "answer", api.answer),
            )
        ),
        Route(
            "/v1/sessions/{session_id}/events",
            r("events", api.events, query=("after_seq", "limit", "summary")),
            name="events",
        ),
        Route("/v1/sessions/{session_id}/events/{seq}", r("event", api.event), name="event"),
        Route(
            "/v1/sessions/{session_id}/transcript",
            r("transcript", api.transcript, query=("thread", "after", "limit", "clip")),
            name="transcript",
        ),
        Route(
            "/v1/sessions/{session_id}/stream",
            r("stream", api.stream, query=("after_seq", "timeout", "deltas", "summary")),
            name="stream",
        ),
        *(
            Route(f"/v1/experiments{tail}", r(name, handler, query=q), methods=["GET"], name=name)
            for tail, name, handler, q in (
                ("", "experiments", experiments.list_experiments, ()),
                ("/{experiment_id}", "experiment", experiments.get_experiment, ()),
                ("/{experiment_id}/chart.svg", "chart", experiments.get_chart, ("metric",)),
            )
        ),
        Route("/v1/usage", r("usage", usage.get_usage, query=usage.QUERY), name="usage"),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        code = {404: "not_found", 405: "method_not_allowed"}.get(status, "invalid_request")
        message = f"{request.method} {request.url.path}: {code.replace('_', ' ')}"
        if status >= 500:
            return envelope("internal", message)
        response = envelope(code, message)
        if status == 405:
            response.headers["Allow"] = ", ".join(allowed_methods(routes, request))
        return response

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with runtime:
            # In the background: the server answers at once, whatever the file's size, and
            # `/readyz` says ready once the check is done.
            api.checking = checking = asyncio.create_task(check_store(runtime))
            try:
                yield
            finally:
                checking.cancel()
                await asyncio.gather(checking, return_exceptions=True)

    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
        middleware=[Middleware(WebGuard, loopback_only=tokens is None)],
    )
    app.state.api = api
    return app


async def check_store(runtime: LocalRuntime) -> None:
    """Read the whole store once as serving begins (SQLite: `quick_check`, on a thread and
    connection of its own). A damaged file is still served, every sound session of it, but
    `/readyz` says 503 from when the damage is found."""
    try:
        await runtime.store.check_integrity()
    except CorruptLog as exc:
        log.error("%s; /readyz answers 503, sound sessions are still served", exc)


def allowed_methods(routes: Iterable[BaseRoute], request: Request) -> list[str]:
    """Every method some route at this path takes (one path may have a route per method)."""
    methods: set[str] = set()
    for route in routes:
        if isinstance(route, Route) and route.methods:
            match, _ = route.matches(request.scope)
            if match is not Match.NONE:
                methods |= route.methods
    return sorted(methods)
