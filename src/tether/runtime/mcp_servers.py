"""The operator's MCP servers for managed sessions (`tether serve --mcp FILE`, `tether worker
--mcp FILE`): which names a spec may pick, and their tools for a session's run.

Owns refusing a spec's unknown server names (listing what is offered, never a server's
command, URL or headers) and the servers' lifetime in a worker: one `McpToolSource` per
tenant, whose connections (a process each, for stdio) start when a run of that tenant first
names them, are shared by that tenant's runs in this process, and stop once no run has held
them for `idle` seconds, or when the worker stops. A tenant's connections keep and present
that tenant's OAuth tokens only (`Credentials.for_tenant`); no process or token serves two
tenants. Why shared per tenant rather than per session: docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tether.errors import TetherError, UsageError
from tether.store.credentials import DEFAULT_TENANT, Credentials, MemoryCredentials
from tether.tools.base import Tool

if TYPE_CHECKING:  # the MCP SDK is an extra: imported when a server is first used
    from tether.tools.mcp import McpServerConfig, McpToolSource

IDLE = 30.0  # seconds a tenant's servers outlive its last run in this process


class SignInNeeded(UsageError):
    """A server wants a person to sign in (OAuth), which a served session cannot show."""


@dataclass(eq=False)
class _Borrowed:
    source: McpToolSource
    users: int = 0
    closing: asyncio.Task[None] | None = None  # the idle timer, once nobody holds it


@dataclass(eq=False)
class McpServers:
    """`configs`: the servers, by the names a spec gives. `credentials`: where OAuth tokens
    are kept (each tenant's among its own; none: in this process's memory). `idle`: how long
    a tenant's servers stay up after its last run here ended."""

    configs: Sequence[McpServerConfig]
    credentials: Credentials | None = None
    idle: float = IDLE
    _sources: dict[str, _Borrowed] = field(default_factory=dict)
    _stopping: set[asyncio.Task[None]] = field(default_factory=set)  # idle sources closing
    _closed: bool = False

    @staticmethod
    def load(path: str, credentials: Credentials | None = None) -> McpServers:
        """The servers of an `mcpServers` file (the format of `tether run --mcp`); an error
        names the file."""
        try:
            from tether.tools.mcp import load_mcp_config
        except ImportError as exc:
            raise UsageError(f"--mcp {path}: {exc}") from exc
        try:
            configs = load_mcp_config(path)
        except UsageError as exc:  # it names the file
            raise UsageError(f"--mcp: {exc}") from exc
        if credentials is not None and any(c.auth is not None for c in configs):
            credentials.check_can_store()  # no key to seal tokens with: said now, not per run
        return McpServers(configs, credentials)

    def names(self, tenant: str | None) -> list[str]:
        """The servers `tenant`'s specs may name: those whose `tenants` list it, or that
        have no such list (the only ones a server without tenants offers)."""
        return [
            c.name for c in self.configs if c.tenants is None or (tenant and tenant in c.tenants)
        ]

    def check(self, names: Sequence[str], tenant: str | None) -> None:
        """Refuse a name not offered to `tenant`, saying which names are (and nothing else
        of the servers, nor that another tenant's exist)."""
        offered = self.names(tenant)
        unknown = [n for n in names if n not in offered]
        if unknown:
            raise UsageError(
                f"spec.mcp names {', '.join(map(repr, unknown))}, which this server does not "
                f"offer (it offers: {', '.join(offered) or 'no MCP servers'})"
            )

    @contextlib.asynccontextmanager
    async def tools(
        self, tenant: str | None, names: Sequence[str], taken: Iterable[str] = ()
    ) -> AsyncIterator[list[Tool]]:
        """The tools of the named servers for a run of `tenant`'s session, named as
        `tether run --mcp` would name them beside the `taken` names; the servers stay up
        while the block runs."""
        self.check(names, tenant)
        key = tenant or DEFAULT_TENANT
        borrowed = self._borrow(key)
        try:
            yield await borrowed.source.list_tools(taken=taken, servers=names)
        finally:
            self._give_back(key, borrowed)

    def _borrow(self, key: str) -> _Borrowed:
        if self._closed:  # the worker is stopping: not the session's fault, another runs it
            raise TetherError("this worker's MCP servers are closed")
        borrowed = self._sources.get(key)
        if borrowed is None:
            borrowed = self._sources[key] = _Borrowed(self._source(key))
        if borrowed.closing is not None:
            borrowed.closing.cancel()
            borrowed.closing = None
        borrowed.users += 1
        return borrowed

    def _give_back(self, key: str, borrowed: _Borrowed) -> None:
        borrowed.users -= 1
        if borrowed.users == 0 and not self._closed:
            borrowed.closing = asyncio.get_running_loop().create_task(self._close_idle(key))

    async def _close_idle(self, key: str) -> None:
        await asyncio.sleep(self.idle)
        borrowed = self._sources.get(key)
        if borrowed is not None and borrowed.users == 0:
            del self._sources[key]
            # Its own task, which nobody cancels (`aclose` awaits it): a close cut short
            # could leave a process behind.
            stopping = asyncio.get_running_loop().create_task(borrowed.source.aclose())
            self._stopping.add(stopping)
            stopping.add_done_callback(self._stopping.discard)

    def _source(self, tenant: str) -> McpToolSource:
        from tether.tools.mcp import McpToolSource

        async def refuse_sign_in(server: str, url: str) -> None:
            who, flag = ("tenant " + repr(tenant), f" --tenant {tenant}") if tenant else ("", "")
            raise SignInNeeded(
                f"MCP server {server!r} needs {who or 'someone'} to sign in (OAuth), which a "
                f"served session cannot show: sign in once with `tether mcp tools FILE "
                f"--server {server}{flag} --store URL`"
            )

        credentials = (self.credentials or MemoryCredentials()).for_tenant(tenant)
        offered = [c for c in self.configs if c.name in self.names(tenant or None)]
        return McpToolSource(offered, credentials=credentials, on_authorize=refuse_sign_in)

    async def aclose(self) -> None:
        """Stop every server started here (a stdio server's process is gone afterwards)."""
        self._closed = True
        sources = list(self._sources.values())
        self._sources.clear()
        for borrowed in sources:
            if borrowed.closing is not None:
                borrowed.closing.cancel()
        for borrowed in sources:
            await borrowed.source.aclose()
        await asyncio.gather(*self._stopping, return_exceptions=True)
