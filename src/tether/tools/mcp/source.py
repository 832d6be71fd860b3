"""MCP servers as a source of ordinary `Tool`s: names, effects, approvals, results, progress.

Owns what the model sees of an MCP tool and what a call returns to it. Talking to a server is
`connection`'s; running calls (timeouts, errors as data) is `tools.run`'s, unchanged.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TextIO, TypeVar

from mcp import types as mcp_types

from tether.errors import ConfigError, TetherError
from tether.events import Effect
from tether.messages import Image
from tether.store.credentials import Credentials, open_credentials
from tether.tools.base import Tool, Toolbox
from tether.tools.mcp import catalog
from tether.tools.mcp.catalog import (
    McpPrompt,
    McpPromptResult,
    McpResource,
    McpResourceContent,
    McpResourceTemplate,
)
from tether.tools.mcp.config import McpServerConfig, servers_by_name
from tether.tools.mcp.connection import McpConnection, ProgressFn
from tether.tools.mcp.content import render_result, result_parts
from tether.tools.mcp.errors import McpToolFailed, McpUnsupported
from tether.tools.mcp.links import read_links
from tether.tools.mcp.logs import LogObserver
from tether.tools.mcp.oauth import AuthorizeHandler, default_credentials
from tether.tools.mcp.tokens import StoredTokens
from tether.tools.schema import ToolContext

logger = logging.getLogger(__name__)

MAX_NAME = 64  # the tool-name limit of the strictest provider APIs
# The runner passes a ToolContext under this name; a model would have to guess it to collide.
_CONTEXT_PARAM = "_tether_call_context"
_NOT_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class McpProgress:
    """One progress notification of a running MCP call. Observers see it; it is never stored."""

    server: str
    tool: str
    session_id: str
    call_id: str
    progress: float
    total: float | None
    message: str | None


ProgressObserver = Callable[[McpProgress], None]
# Decides whether a server's tool is offered: (server name, the tool as the server lists it).
ToolFilter = Callable[[str, mcp_types.Tool], bool]


class McpToolSource:
    """Tools from MCP servers: `tools = await source.list_tools()`, then `Agent(model, tools=tools)`.

    Use it as `async with McpToolSource(configs) as source:` or call `aclose()`: closing
    stops every server it started. `on_progress` sees every progress notification, `on_log`
    every log message (which also goes to the `tether.mcp` logger). A tool is
    offered when its server's `enabled_tools`/`disabled_tools` allow it and `tool_filter`
    (if given) returns True for it. Servers with OAuth (`auth`) keep their tokens in
    `credentials` (a store URL or a `Credentials`, whose tenant they are kept for; none:
    `$TETHER_STORE`, else `sqlite:///tether.db`, as the CLI; sealed with the key the
    environment gives, `store.sealing.Keyring.from_env`), and `on_authorize(server, url)` shows a person the
    sign-in URL (none: it is printed to stderr)."""

    def __init__(
        self,
        servers: Iterable[McpServerConfig],
        *,
        on_progress: ProgressObserver | None = None,
        errlog: TextIO | None = None,
        tool_filter: ToolFilter | None = None,
        on_log: LogObserver | None = None,
        credentials: Credentials | str | None = None,
        on_authorize: AuthorizeHandler | None = None,
    ) -> None:
        self.configs = servers_by_name(servers)
        self.on_progress = on_progress
        self.tool_filter = tool_filter
        if isinstance(credentials, str):
            credentials = open_credentials(credentials)
        if any(c.auth is not None for c in self.configs.values()):
            credentials = credentials or default_credentials()
            credentials.check_can_store()  # refused before anyone signs in, not after
        self.credentials = credentials
        self.connections = {
            name: McpConnection(
                c, errlog=errlog, on_log=on_log, credentials=credentials, on_authorize=on_authorize
            )
            for name, c in self.configs.items()
        }
        self._made: set[str] = set()  # the names of the tools the last listing gave

    async def __aenter__(self) -> McpToolSource:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for connection in self.connections.values():
            await connection.aclose()

    async def forget_tokens(self) -> list[str]:
        """Drop the OAuth tokens and registrations kept for the servers with `auth` (the
        next connection signs in afresh); the names of those servers."""
        forgot = []
        for name, config in self.configs.items():
            if config.auth is not None and config.url is not None and self.credentials:
                kept = StoredTokens(self.credentials, config.url, client_id=config.auth.client_id)
                await kept.forget()
                forgot.append(name)
        return forgot

    def connection(self, server: str) -> McpConnection:
        """The server's connection; an unknown name is a `ConfigError` listing the known ones."""
        try:
            return self.connections[server]
        except KeyError:
            known = ", ".join(map(repr, self.connections)) or "none"
            raise ConfigError(f"no MCP server is named {server!r} (configured: {known})") from None

    def keep_current(self, toolbox: Toolbox) -> None:
        """Keep a running agent's tools from these servers current (`agent.toolbox`): before
        each of its model requests, if a server said its tools changed, the servers are
        listed again and the toolbox's tools from this source replaced; its other tools are
        kept. A listing that fails is logged and the tools stay as they were."""
        toolbox.follow(self._refresh)

    async def _refresh(self, toolbox: Toolbox) -> None:
        if not any(c.tools_changed for c in self.connections.values()):
            return
        others = [t for t in toolbox if t.name not in self._made]
        try:
            fresh = await self.list_tools(taken=[t.name for t in others])
        except TetherError as exc:
            logger.warning("MCP tools not refreshed, the last listing stays: %s", exc)
            return
        toolbox.replace([*others, *fresh])

    async def instructions(self) -> dict[str, str]:
        """Each server's `instructions` (from its handshake), for servers that give some."""
        found = {}
        for name, connection in self.connections.items():
            if text := await connection.instructions():
                found[name] = text
        return found

    async def system_prompt(self, system: str | None = None) -> str | None:
        """`system` with the instructions of every server whose config sets
        `use_instructions` added after it, each headed by its server's name; `system`
        unchanged when none has any. Use it as `Agent(system=await source.system_prompt(s))`."""
        parts = [system] if system else []
        for name, connection in self.connections.items():
            if connection.config.use_instructions and (text := await connection.instructions()):
                parts.append(f"Instructions from the MCP server {name!r}:\n{text.strip()}")
        return "\n\n".join(parts) if parts else system

    async def list_resources(self) -> list[McpResource]:
        """Every resource of every server that offers resources (others are skipped)."""
        return await self._gather(catalog.list_resources)

    async def list_resource_templates(self) -> list[McpResourceTemplate]:
        """Every resource template of every server that offers resources."""
        return await self._gather(catalog.list_resource_templates)

    async def read_resource(self, server: str, uri: str) -> McpResourceContent:
        """Read one resource; `McpUnsupported` if the server offers no resources."""
        return await catalog.read_resource(self.connection(server), uri)

    async def list_prompts(self) -> list[McpPrompt]:
        """Every prompt of every server that offers prompts (others are skipped)."""
        return await self._gather(catalog.list_prompts)

    async def get_prompt(
        self, server: str, name: str, arguments: Mapping[str, str] | None = None
    ) -> McpPromptResult:
        """Fill one prompt; `McpUnsupported` if the server offers no prompts."""
        return await catalog.get_prompt(self.connection(server), name, dict(arguments or {}))

    async def _gather(self, listing: Callable[[McpConnection], Awaitable[list[T]]]) -> list[T]:
        found: list[T] = []
        for connection in self.connections.values():
            try:
                found.extend(await listing(connection))
            except McpUnsupported:
                continue
        return found

    async def list_tools(
        self, *, taken: Iterable[str] = (), servers: Iterable[str] | None = None
    ) -> list[Tool]:
        """Every server's tools (or only those of `servers`, by name: the others are not
        started), starting the servers that are not running. A name used by
        two servers (or in `taken`, e.g. the Python tools beside them) is prefixed with the
        server's name. A server that cannot start raises `McpServerUnavailable` naming it; one
        whose `enabled_tools` or `disabled_tools` name a tool it does not have, `ConfigError`."""
        listings: list[tuple[McpConnection, list[mcp_types.Tool]]] = []
        chosen = self.connections.values() if servers is None else map(self.connection, servers)
        for connection in chosen:
            listings.append((connection, self._offered(connection, await connection.list_tools())))
        pairs = [(c.name, t.name) for c, tools in listings for t in tools]
        names = exposed_names(pairs, taken)
        self._made = set(names.values())
        return [
            self._make_tool(connection, tool, names[(connection.name, tool.name)])
            for connection, tools in listings
            for tool in tools
        ]

    def _offered(
        self, connection: McpConnection, tools: list[mcp_types.Tool]
    ) -> list[mcp_types.Tool]:
        config = connection.config
        have = {t.name for t in tools}
        for key, names in (
            ("enabled_tools", config.enabled_tools),
            ("disabled_tools", config.disabled_tools),
        ):
            # An error, not a warning: a misspelt disabled name would offer what was meant hidden.
            missing = sorted((names or frozenset()) - have)
            if missing:
                raise ConfigError(
                    f"MCP server {config.name!r}: {key} names {', '.join(map(repr, missing))}, "
                    f"which the server does not have (it has: {', '.join(sorted(have)) or 'none'})"
                )
        offered = [t for t in tools if config.offers(t.name)]
        if self.tool_filter is not None:
            offered = [t for t in offered if self.tool_filter(config.name, t)]
        return offered

    def _make_tool(self, connection: McpConnection, spec: mcp_types.Tool, name: str) -> Tool:
        config = connection.config
        server_tool = spec.name
        effect = effect_of(spec.annotations)

        async def call(**arguments: Any) -> str | list[str | Image]:
            ends = None if config.timeout is None else time.monotonic() + config.timeout
            context = arguments.pop(_CONTEXT_PARAM, None)
            progress = self._progress_fn(config.name, name, context)
            call_id = context.call_id if isinstance(context, ToolContext) else None
            result = await connection.call_tool(
                server_tool,
                arguments,
                progress,
                effect=effect,
                call_id=call_id,
                meta=call_meta(context) if isinstance(context, ToolContext) else None,
            )
            declared = spec.output_schema is not None
            if result.is_error:
                text = render_result(result, output_schema=declared)
                raise McpToolFailed(
                    config.name, text or f"tool {server_tool!r} reported an error with no message"
                )
            links = await read_links(connection, result, call_ends=ends)  # never another's
            text, images = result_parts(result, output_schema=declared, links=links)
            return [text, *images] if images else text

        return Tool(
            name=name,
            description=spec.description or spec.title or "",
            parameters=dict(spec.input_schema),
            fn=call,
            validator=None,  # the server validates its own arguments
            effect=effect,
            timeout=config.timeout,
            needs_approval=config.approval_for(server_tool),
            context_param=_CONTEXT_PARAM,
            is_async=True,
        )

    def _progress_fn(self, server: str, tool: str, context: object) -> ProgressFn | None:
        observer = self.on_progress
        if observer is None:
            return None
        session_id = context.session_id if isinstance(context, ToolContext) else ""
        call_id = context.call_id if isinstance(context, ToolContext) else ""

        async def report(progress: float, total: float | None, message: str | None) -> None:
            try:
                observer(McpProgress(server, tool, session_id, call_id, progress, total, message))
            except Exception:  # an observer's bug must not fail the call it watches
                logger.exception("MCP progress observer raised")

        return report


# The keys tether puts in a `tools/call` request's `_meta`. MCP's per-request channel, so a
# server (or what it writes to) can refuse a write from a worker that lost the session.
META_IDEMPOTENCY_KEY = "tether/idempotency_key"
META_FENCE = "tether/fence"


def call_meta(context: ToolContext) -> dict[str, Any]:
    """The call's idempotency key (its call id, the same when a recovered `idempotent` call
    is sent again) and, when it runs under a lease, the lease's generation: a fencing token
    that grows with every claim of the session."""
    meta: dict[str, Any] = {META_IDEMPOTENCY_KEY: context.idempotency_key}
    if context.fence is not None:
        meta[META_FENCE] = context.fence
    return meta


def effect_of(annotations: mcp_types.ToolAnnotations | None) -> Effect:
    """`readOnlyHint` → read, `idempotentHint` → idempotent, anything else (including no
    annotations, which MCP defines as the destructive case) → write."""
    if annotations is None:
        return "write"
    if annotations.read_only_hint is True:
        return "read"
    if annotations.idempotent_hint is True:
        return "idempotent"
    return "write"


def exposed_names(
    pairs: list[tuple[str, str]], taken: Iterable[str] = ()
) -> dict[tuple[str, str], str]:
    """The name the model sees for each (server, tool): the tool's own name made safe for
    model APIs, or `server__tool` where that name is not unique."""
    safe = {pair: _safe_name(pair[1]) for pair in pairs}
    counts = Counter(safe.values())
    counts.update(set(taken))
    names = {
        pair: name if counts[name] == 1 else _safe_name(f"{pair[0]}__{pair[1]}")
        for pair, name in safe.items()
    }
    return names


def _safe_name(name: str) -> str:
    cleaned = _NOT_NAME_CHARS.sub("_", name) or "tool"
    if len(cleaned) <= MAX_NAME:
        return cleaned
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{cleaned[: MAX_NAME - 9]}_{digest}"
