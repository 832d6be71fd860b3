"""A model HTTP client whose every connection goes where the endpoint policy allows.

The policy checks a spec's URL when the session starts and when a worker builds its model;
a host name can still be repointed after that (DNS rebinding). A guarded client looks the
name up itself at each new connection, refuses any non-public address the operator did not
name, and connects to the very address it checked. Hosts the operator named (an address
prefix, a configured provider) are connected to as named. Proxies from the environment are
the operator's and are used as they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import httpcore
import httpx

from tether.errors import EndpointBlocked
from tether.providers.endpoints import EndpointPolicy, EndpointRefused
from tether.providers.http import DEFAULT_TIMEOUT


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, policy: EndpointPolicy, inner: httpcore.AsyncNetworkBackend) -> None:
        self.policy = policy
        self.inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await asyncio.to_thread(self.policy.addresses, host, port)
        except EndpointRefused as exc:
            raise EndpointBlocked(f"refused to connect: {exc}") from None
        failed: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return await self.inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                failed = exc
        raise failed or httpcore.ConnectError(f"{host} has no address to connect to")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise EndpointBlocked("a guarded model client never connects to a unix socket")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def guarded_client(policy: EndpointPolicy) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` for model calls under `policy` (redirects not followed)."""
    transport = httpx.AsyncHTTPTransport()
    # httpx offers no public seam for the connection pool's network backend; a test holds
    # this to its effect (a name repointed at loopback is refused at connect time).
    pool = transport._pool
    pool._network_backend = _GuardedBackend(policy, pool._network_backend)
    return httpx.AsyncClient(transport=transport, timeout=DEFAULT_TIMEOUT, follow_redirects=False)
