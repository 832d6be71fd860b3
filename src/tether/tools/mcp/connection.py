"""One MCP server's connection: started lazily, listed, called, restarted after a crash, closed.

Owns the SDK `Client` and the translation of SDK and transport failures into `McpError`s that
name the server. The client lives in a supervisor task because the SDK's anyio scopes must be
entered and left by one task. Turning MCP tools into tether tools is `source`'s job.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO, TypeVar, cast

import httpx2
from mcp import Client, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.session import IncomingMessage
from mcp.client.stdio import stdio_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from tether.events import Effect
from tether.store.credentials import Credentials
from tether.tools.mcp.asking import ServerRequests
from tether.tools.mcp.config import McpServerConfig
from tether.tools.mcp.errors import (
    McpEffectUnknown,
    McpError,
    McpProtocolError,
    McpServerUnavailable,
    McpUnsupported,
)
from tether.tools.mcp.http import (
    DELIVERY,
    Delivery,
    HttpState,
    http_transport,
    refused,
    status_error,
)
from tether.tools.mcp.logs import LogObserver, log_to_python, wanted_level
from tether.tools.mcp.oauth import (
    AUTHORIZE_TIMEOUT,
    AuthorizeHandler,
    default_credentials,
    explain,
    oauth_provider,
    print_authorize,
    redact,
)
from tether.tools.mcp.stderr import StderrTail

logger = logging.getLogger(__name__)

ProgressFn = ProgressFnT  # async (progress, total, message) -> None
Capability = Literal["resources", "prompts", "tools", "logging"]
T = TypeVar("T")
MAX_LIST_PAGES = 100  # a paginator that never ends must not hang the listing
# stdio shutdown is close stdin, 2 s, SIGTERM, 2 s, SIGKILL: this bounds it with room to spare.
CLOSE_WAIT = 10.0
_CLIENT_INFO = mcp_types.Implementation(name="tether", version="0.1")
# Waits between attempts to reach an HTTP server that refuses connections (it is restarting).
CONNECT_BACKOFF = (0.1, 0.25, 0.5, 1.0, 2.0)
STDERR_WAIT = 2.0  # for the last words of a stdio server that would not start
_MODERN = ("2026-07-28",)
# What the SDK says for an HTTP error status with no JSON-RPC error in the body.
_SDK_STAND_IN = "Server returned an error response"
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")  # "ReadTimeout" -> "Read Timeout"
_UNKNOWN_EFFECT = (
    "The call was running when the connection was lost, so its effects are unknown: it may or "
    "may not have happened. It was not repeated. Inspect the current state before repeating it"
)


@dataclass(eq=False)
class _Live:
    """One started server: its client, the event that ends it, and the task that holds it."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    client: Client | None = None
    task: asyncio.Task[None] | None = None
    failure: str | None = None
    http: HttpState = field(default_factory=HttpState)  # what its HTTP requests learnt
    stderr: StderrTail | None = None  # a stdio server's stderr

    def usable(self) -> bool:
        return (
            not self.http.session_lost
            and self.client is not None
            and self.task is not None
            and not self.task.done()
            and not _connection_closed(self.client)
        )


class McpConnection:
    """`await conn.list_tools()`, `await conn.call_tool(name, args)`, `await conn.aclose()`.

    Nothing starts before the first list or call. A connection lost while idle is restarted
    quietly; one lost during a call makes that call fail and the next one restart it."""

    def __init__(
        self,
        config: McpServerConfig,
        *,
        errlog: TextIO | None = None,
        on_log: LogObserver | None = None,
        credentials: Credentials | None = None,
        on_authorize: AuthorizeHandler | None = None,
    ) -> None:
        self.config = config
        self._on_log = on_log
        # OAuth (a server with `auth`): where its tokens are kept, who is shown the sign-in URL.
        self._credentials = credentials
        self._on_authorize = on_authorize or print_authorize
        # Elicitation, sampling and roots: each request to the session of its call.
        self.asking = ServerRequests(config.name, config.roots)
        self.starts = 0
        self._errlog = errlog
        self._lock = asyncio.Lock()
        self._live: _Live | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._tools: list[mcp_types.Tool] | None = None
        # The server said its tools changed since they were last listed (a restart does not
        # count: a source refreshing a running agent's tools must not restart servers).
        self.tools_changed = False
        self._closed = False

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def running(self) -> bool:
        return self._live is not None and self._live.usable()

    @property
    def tools_stale(self) -> bool:
        return self._tools is None

    async def list_tools(self) -> list[mcp_types.Tool]:
        """Every page of the server's tools, kept until the server says they changed."""
        if self._tools is not None and self.running:
            return self._tools
        live = await self._connect()
        client = _client(live)
        self._tools = None
        self.tools_changed = False
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            for _ in range(MAX_LIST_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except Exception as exc:
            raise await self._translate(live, "tools/list", exc) from exc
        if cursor is not None:
            raise McpProtocolError(
                self.name,
                f"MCP server {self.name!r} lists more than {MAX_LIST_PAGES} pages of tools",
            )
        if self._live is live:
            self._tools = tools
        return tools

    async def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        progress: ProgressFn | None = None,
        *,
        effect: Effect = "write",
        call_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> mcp_types.CallToolResult:
        """One `tools/call`. A cancel (a timeout) sends the SDK's cancel notification and
        does not wait for the server to agree.

        A call whose connection or session is lost is sent once more on a new one when that
        is safe: always if the server certainly never ran it (its HTTP request was refused or
        answered 404 for our session), and for a `read` or `idempotent` tool otherwise. A
        `write` that may have run raises `McpEffectUnknown` and is not repeated. `call_id`:
        the session's call this is, which the server's elicitation and sampling requests
        during it are put to. `meta`: the request's `_meta` (the call's fence, see
        `source.call_meta`)."""
        with self.asking.calling(call_id):
            return await self._call_tool(tool, arguments, progress, effect, meta)

    async def _call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        progress: ProgressFn | None,
        effect: Effect,
        meta: dict[str, Any] | None,
    ) -> mcp_types.CallToolResult:
        for attempt in (1, 2):
            live = await self._connect()
            delivery = Delivery()
            token = DELIVERY.set(delivery)
            try:
                return await _client(live).call_tool(
                    tool,
                    arguments,
                    progress_callback=progress,
                    meta=cast("mcp_types.RequestParamsMeta", meta) if meta else None,
                )
            except Exception as exc:
                error = await self._translate(live, f"tool {tool!r}", exc, delivery)
                if not isinstance(error, McpServerUnavailable):
                    raise error from exc
                if attempt == 1 and (delivery.undelivered or effect != "write"):
                    logger.info("MCP server %s: %s; sending the call again", self.name, error)
                    continue
                if effect == "write" and not delivery.undelivered:
                    raise McpEffectUnknown(self.name, f"{error}. {_UNKNOWN_EFFECT}") from exc
                raise error from exc
            finally:
                DELIVERY.reset(token)
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def request(
        self, what: str, send: Callable[[Client], Awaitable[T]], *, needs: Capability | None = None
    ) -> T:
        """One request other than a tool call (`send` makes it with the SDK client), e.g. a
        resource read. Such requests change nothing, so one whose connection is lost is sent
        once more on a new one. `needs`: the capability the server must have declared, else
        `McpUnsupported`."""
        for attempt in (1, 2):
            live = await self._connect()
            client = _client(live)
            if needs is not None and getattr(client.server_capabilities, needs) is None:
                raise McpUnsupported(
                    self.name,
                    f"MCP server {self.name!r} does not offer {needs} (it did not "
                    f"declare the {needs!r} capability)",
                )
            try:
                return await send(client)
            except McpError:
                raise
            except Exception as exc:
                error = await self._translate(live, what, exc)
                if attempt == 1 and isinstance(error, McpServerUnavailable):
                    logger.info("MCP server %s: %s; sending %s again", self.name, error, what)
                    continue
                raise error from exc
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def instructions(self) -> str | None:
        """The server's `instructions` (from its handshake), starting it if need be."""
        return _client(await self._connect()).instructions or None

    async def aclose(self) -> None:
        """Stop the server (stdio: the process is gone afterwards). Later calls are refused."""
        self._closed = True
        live, self._live = self._live, None
        tasks = set(self._retiring)
        if live is not None and live.task is not None:
            live.stop.set()
            tasks.add(live.task)
        await _finish(tasks)

    async def _connect(self) -> _Live:
        if self._closed:
            raise McpServerUnavailable(self.name, f"MCP server {self.name!r} is closed")
        live = self._live
        if live is not None and live.usable():
            return live
        async with self._lock:
            live = self._live
            if live is not None and not live.usable():
                await self._retire(live)  # it stopped between calls: restart it quietly
                live = None
            if live is None:
                live = await self._start_with_backoff()
                self._live = live
            return live

    async def _start_with_backoff(self) -> _Live:
        """Start; an HTTP server that refuses the connection is tried again after each wait
        of `CONNECT_BACKOFF` (nothing was sent, so nothing can be repeated)."""
        for wait in (*CONNECT_BACKOFF, None):
            try:
                return await self._start()
            except McpServerUnavailable as exc:
                if wait is None or self.config.url is None or not refused(exc):
                    raise
                logger.info("MCP server %s refused the connection; again in %g s", self.name, wait)
                await asyncio.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _start(self) -> _Live:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        live = _Live()
        live.task = asyncio.create_task(
            self._supervise(live, ready), name=f"mcp-server:{self.name}"
        )
        where = f"MCP server {self.name!r} ({self.config.describe()})"
        auth = self.config.auth
        deadline = self.config.startup_timeout
        if auth is not None and auth.grant == "authorization_code":
            deadline = max(deadline, AUTHORIZE_TIMEOUT)  # a person may have to sign in
        try:
            async with asyncio.timeout(deadline):
                live.client = await asyncio.shield(ready)
        except TimeoutError:
            self._abandon(live, ready)
            raise McpServerUnavailable(
                self.name,
                f"{where} did not finish starting within {deadline:g} s",
            ) from None
        except asyncio.CancelledError:
            self._abandon(live, ready)
            raise
        except Exception as exc:
            self._abandon(live, ready)
            oauth = explain(exc, auth)
            problem = oauth or redact(_describe(exc), auth)
            # An OAuth failure says why in its own words; the last HTTP status may be a
            # discovery request's 404, which would only mislead.
            if live.http.status is not None and oauth is None:
                status = live.http.status
                plain = problem == _SDK_STAND_IN or status_error(exc)
                problem = status if plain else f"{problem} ({status})"
                if status.startswith("HTTP 401") and auth is None:
                    problem += ' (it wants authorization: give it "auth": {"type": "oauth"})'

            if live.stderr is not None:
                problem += await _last_words(live.stderr)
            raise McpServerUnavailable(
                self.name, f"{where} could not be started: {problem}"
            ) from exc
        if live.stderr is not None:
            live.stderr.release()
        self.starts += 1
        self._tools = None
        return live

    async def _supervise(self, live: _Live, ready: asyncio.Future[Client]) -> None:
        try:
            async with self._new_client(live) as client:
                listener = None
                if _announces_tool_changes(client):
                    listening = asyncio.Event()
                    listener = asyncio.create_task(self._listen(client, listening))
                    # Handed out only once the server acknowledged the stream (or it failed):
                    # a change announced after the tools are first listed is never missed.
                    acked = asyncio.create_task(listening.wait())
                    await asyncio.wait({listener, acked}, return_when=asyncio.FIRST_COMPLETED)
                    acked.cancel()
                if not ready.done():
                    ready.set_result(client)
                try:
                    await live.stop.wait()
                finally:
                    if listener is not None:
                        listener.cancel()
                        await asyncio.gather(listener, return_exceptions=True)
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except Exception as exc:
            # Recorded, not raised: whoever is waiting for this server reports it by name.
            live.failure = _describe(exc)
            if not ready.done():
                ready.set_exception(exc)
            logger.debug("MCP server %s stopped: %s", self.name, live.failure)
        finally:
            if live.stderr is not None:  # the server is gone: let the pipe end with it
                live.stderr.release()

    def _new_client(self, live: _Live) -> Client:
        config = self.config
        transport: Any
        if config.command is not None:
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            live.stderr = StderrTail(self._errlog or _default_errlog())
            transport = live.stderr.watch(stdio_client(params, errlog=live.stderr.writer))
        else:
            transport = http_transport(
                str(config.url),
                dict(config.headers),
                live.http,
                sse=config.sse,
                auth=self._oauth if config.auth is not None else None,
            )
        return Client(
            transport,
            # The legacy SSE transport predates `server/discover`: handshake only.
            mode="legacy" if config.sse and config.protocol == "auto" else config.protocol,
            cache=None,  # the listing is cached here, and refreshed on list_changed
            message_handler=self._on_message,
            logging_callback=log_to_python(self.name, self._on_log),
            log_level=wanted_level(),  # servers on 2026-07-28 send logs only when asked
            client_info=_CLIENT_INFO,
            # Declared to the server only when given.
            elicitation_callback=self.asking.elicit if config.elicitation else None,
            sampling_callback=self.asking.sample if config.sampling else None,
            list_roots_callback=self.asking.roots if config.roots else None,
        )

    async def _oauth(self) -> httpx2.Auth:
        config = self.config
        assert config.auth is not None and config.url is not None  # only asked for then
        if self._credentials is None:
            self._credentials = default_credentials()
        return await oauth_provider(
            config.auth, self.name, config.url, self._credentials, self._on_authorize
        )

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._tools, self.tools_changed = None, True

    async def _listen(self, client: Client, listening: asyncio.Event) -> None:
        # 2026-07-28 servers announce list changes only to a `subscriptions/listen` stream.
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                listening.set()
                async for _event in subscription:
                    self._tools, self.tools_changed = None, True
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the listing then refreshes only after a restart
            logger.debug("MCP server %s: listening for tool changes failed: %s", self.name, exc)

    async def _translate(
        self, live: _Live, what: str, exc: Exception, delivery: Delivery | None = None
    ) -> McpError:
        """The error to raise for a failed request. `delivery`: what became of its HTTP
        requests (a stream that broke off means the connection was lost, whatever error the
        SDK made up for it; an HTTP error status is named)."""
        broken = delivery is not None and delivery.broken
        status = delivery.status if delivery is not None else live.http.status
        name = self.name
        if live.http.session_lost:
            await self._retire(live)
            return McpServerUnavailable(
                name,
                f"MCP server {name!r} no longer knows this session ({status or 'HTTP 404'} "
                f"during {what}: it restarted or expired the session); a new session is "
                "started at the next call",
            )
        if isinstance(exc, MCPError) and not (broken or _lost(live, exc)):
            answer = f"error {exc.code}: {exc.message}"
            if status is not None:
                answer = status if exc.message == _SDK_STAND_IN else f"{status}, {answer}"
            return McpProtocolError(name, f"MCP server {name!r} answered {what} with {answer}")
        if isinstance(exc, ValidationError):
            problem = exc.errors()[0]["msg"] if exc.errors() else str(exc)
            return McpProtocolError(
                name, f"MCP server {name!r} sent a malformed answer to {what}: {problem}"
            )
        await self._retire(live)
        cause = f" ({live.failure})" if live.failure else ""
        if isinstance(exc, MCPError):
            text = f"MCP server {name!r} closed the connection during {what}{cause}"
        else:
            auth = self.config.auth
            problem = explain(exc, auth) or redact(_describe(exc), auth)
            text = f"MCP server {name!r} failed during {what}: {problem}{cause}"
        return McpServerUnavailable(name, f"{text}; it will be restarted at the next call")

    async def _retire(self, live: _Live) -> None:
        """Stop a broken connection; the next call starts a new one."""
        if self._live is live:
            self._live = None
            self._tools = None
        live.stop.set()
        if live.task is not None and not live.task.done():
            self._retiring.add(live.task)
            live.task.add_done_callback(self._retiring.discard)
            await asyncio.wait({live.task}, timeout=CLOSE_WAIT)

    def _abandon(self, live: _Live, ready: asyncio.Future[Client]) -> None:
        if ready.done() and not ready.cancelled():
            ready.exception()  # retrieved: the failure is reported by the caller
        if live.task is not None and not live.task.done():
            live.task.cancel()
            self._retiring.add(live.task)
            live.task.add_done_callback(self._retiring.discard)


async def _finish(tasks: set[asyncio.Task[None]]) -> None:
    """Wait for tasks to end, bounded; cancel what will not."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=CLOSE_WAIT)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=CLOSE_WAIT)


_DEVNULL: TextIO | None = None


def _default_errlog() -> TextIO:
    """The server's stderr goes to ours, unless ours is not a real file (captured by a test
    runner or a notebook): a subprocess needs a file descriptor."""
    global _DEVNULL
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        if _DEVNULL is None:
            _DEVNULL = open(os.devnull, "w")  # noqa: SIM115 - kept for the process's life
        return _DEVNULL


async def _last_words(stderr: StderrTail) -> str:
    """ "; it exited with code N; its stderr ended: ...", as much of it as is known."""
    said = await stderr.tail(STDERR_WAIT)
    code = stderr.exit_code()
    return (f"; it exited with code {code}" if code is not None else "") + (
        f"; its stderr ended: {said}" if said else ""
    )


def _client(live: _Live) -> Client:
    assert live.client is not None  # set by _start before the live connection is handed out
    return live.client


def _connection_closed(client: Client) -> bool | None:
    # The SDK marks its dispatcher closed when the transport ends, before it answers pending
    # requests "Connection closed"; nothing public says so. None: this SDK version hides it.
    try:
        dispatcher = client.session._dispatcher
    except RuntimeError:
        return True  # the client has been exited
    except AttributeError:
        return None
    closed = getattr(dispatcher, "_closed", None)
    return closed if isinstance(closed, bool) else None


def _lost(live: _Live, exc: MCPError) -> bool:
    """Did the connection end, as opposed to the server answering an error? Servers may use
    the SDK's own "connection closed" code (-32000) for errors of their own."""
    if exc.code != mcp_types.CONNECTION_CLOSED or live.client is None:
        return False
    closed = _connection_closed(live.client)
    return closed if closed is not None else exc.message == "Connection closed"


def _announces_tool_changes(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return client.protocol_version in _MODERN and tools is not None and bool(tools.list_changed)


def _describe(exc: BaseException) -> str:
    """The innermost useful error, for one line of text the model may read: in words, never
    a Python class name (task groups wrap the real error)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc).strip() or _CAMEL.sub(" ", type(exc).__name__).lower()
