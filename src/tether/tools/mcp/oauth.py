"""OAuth 2.1 for remote MCP servers, through the SDK's client auth: the provider a server's
`auth` asks for, the loopback listener that receives an authorization code, and the words
an OAuth failure is reported in.

Owns building `httpx2.Auth` for a connection and the one local HTTP listener (127.0.0.1)
an authorization waits on. The flow itself (discovery, registration, PKCE, refresh) is the
SDK's; keeping tokens is `tokens`'; the config is `auth_config`'s.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.exceptions import OAuthFlowError, OAuthRegistrationError, OAuthTokenError
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.oauth2 import OAuthContext
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

from tether.store.credentials import Credentials, open_credentials
from tether.store.open import DEFAULT_STORE_URL
from tether.tools.mcp.auth_config import McpOAuth
from tether.tools.mcp.tokens import StoredTokens

logger = logging.getLogger(__name__)

# (server name, authorization URL): show the URL to the person who must sign in.
AuthorizeHandler = Callable[[str, str], Awaitable[None]]
AUTHORIZE_TIMEOUT = 300.0  # for a person to sign in and the browser to come back
CALLBACK_PATH = "/callback"
_REQUEST_LIMIT = 16_384  # bytes of the redirect's request line and headers read
_PAGE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nConnection: close\r\n\r\n"
    b"<!doctype html><title>tether</title><p>%s You can close this window.</p>"
)


async def print_authorize(server: str, url: str) -> None:
    """The default: print the URL (the CLI's way; a browser on another machine works too)."""
    print(
        f"MCP server {server!r} needs you to sign in; open:\n  {url}", file=sys.stderr, flush=True
    )


def _restore_expiry(context: OAuthContext) -> None:
    """Tokens read from the store count their expiry from when they were kept, so an expired
    access token is refreshed before it is presented (the SDK would send it and start over
    on the 401)."""
    tokens = context.current_tokens
    if tokens is not None and tokens.expires_in is not None:
        context.update_token_expiry(tokens)


class _CodeProvider(OAuthClientProvider):
    """The SDK's flow, taking turns to refresh with other processes that keep the same
    record: a rotating refresh token works once, and whoever sends a used one must sign in
    again. Before refreshing, this one takes the tokens another process stored meanwhile,
    or waits while another refreshes; refused a refresh, it takes any that one stored."""

    def __init__(self, *, storage: StoredTokens, **kwargs: Any) -> None:
        super().__init__(storage=storage, **kwargs)
        self.kept = storage
        self._one_flow = anyio.Lock()  # the SDK's flow is one at a time anyway (its lock)

    async def _initialize(self) -> None:
        await super()._initialize()
        _restore_expiry(self.context)

    async def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        async with self._one_flow:
            if not self._initialized:
                await self._initialize()
            while not self.context.is_token_valid() and self.context.can_refresh_token():
                newer = await self.kept.turn_to_refresh()
                if newer is None:
                    break  # this process's turn: the SDK's flow refreshes
                self._take(newer)
            flow = super()._auth_flow(request)
            try:
                outgoing = await flow.__anext__()
                while True:
                    outgoing = await flow.asend((yield outgoing))
            except StopAsyncIteration:
                return
            finally:
                await flow.aclose()
                await self.kept.release_turn()  # a flow that ended before its refresh

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        try:
            if response.status_code != 200:
                newer = await self.kept.rotated_elsewhere()
                if newer is not None:
                    self._take(newer)
                    return True
            return await super()._handle_refresh_response(response)
        finally:
            await self.kept.release_turn()

    def _take(self, tokens: OAuthToken) -> None:
        """Use the tokens another process stored (their expiry counted from when it did)."""
        self.context.current_tokens = tokens
        self.context.update_token_expiry(tokens)


class _MachineProvider(ClientCredentialsOAuthProvider):
    async def _initialize(self) -> None:
        await super()._initialize()
        _restore_expiry(self.context)


class _SignedMachineProvider(PrivateKeyJWTOAuthProvider):
    async def _initialize(self) -> None:
        await super()._initialize()
        _restore_expiry(self.context)


class LoopbackCallback:
    """The redirect URI `http://127.0.0.1:PORT/callback`: a listener started just before the
    authorization URL is shown, closed once the one redirect carrying `code` (or `error`)
    arrived."""

    def __init__(self, port: int, wait_for: float = AUTHORIZE_TIMEOUT) -> None:
        self.port = port
        self.wait_for = wait_for
        self._server: asyncio.Server | None = None
        self._result: asyncio.Future[AuthorizationCodeResult] | None = None

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{CALLBACK_PATH}"

    async def start(self) -> None:
        await self.close()
        self._result = asyncio.get_running_loop().create_future()
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", self.port)

    async def wait(self) -> AuthorizationCodeResult:
        assert self._result is not None, "start() first"
        try:
            async with asyncio.timeout(self.wait_for):
                return await self._result
        except TimeoutError:
            raise OAuthFlowError(
                f"nobody signed in within {self.wait_for:g} s (no redirect reached {self.redirect_uri})"
            ) from None
        finally:
            await self.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
            target = head[:_REQUEST_LIMIT].split(b"\r\n", 1)[0].split(b" ")
            url = urlsplit(target[1].decode("ascii", "replace")) if len(target) > 1 else None
            if url is None or url.path != CALLBACK_PATH:
                writer.write(b"HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n")
                return
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            error = query.get("error")
            done = self._result is not None and not self._result.done()
            if error is not None and done:
                assert self._result is not None
                reason = query.get("error_description") or error
                self._result.set_exception(OAuthFlowError(f"authorization refused: {reason}"))
            elif done:
                assert self._result is not None
                self._result.set_result(
                    AuthorizationCodeResult(
                        code=query.get("code", ""), state=query.get("state"), iss=query.get("iss")
                    )
                )
            said = b"Signed in." if error is None else b"Sign-in failed."
            writer.write(_PAGE % said)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass  # a stray or broken connection: the real redirect may still come
        finally:
            writer.close()


async def oauth_provider(
    auth: McpOAuth,
    server: str,
    url: str,
    credentials: Credentials,
    on_authorize: AuthorizeHandler = print_authorize,
) -> httpx2.Auth:
    """The SDK's provider for one server's `auth`, its tokens kept in `credentials`."""
    if auth.grant == "client_credentials":
        return _machine(auth, url, credentials)
    kept = StoredTokens(credentials, url, client_id=auth.client_id)
    port = auth.redirect_port or _port_of(await kept.get_client_info()) or _free_port()
    callback = LoopbackCallback(port)
    fixed = None
    if auth.client_id is not None:
        fixed = OAuthClientInformationFull(
            client_id=auth.client_id,
            client_secret=auth.client_secret,
            redirect_uris=[AnyUrl(callback.redirect_uri)],
            token_endpoint_auth_method=_method(auth),
            grant_types=["authorization_code", "refresh_token"],
        )
    storage = StoredTokens(credentials, url, client_id=auth.client_id, fixed_client=fixed)
    metadata = OAuthClientMetadata(
        client_name="tether",
        redirect_uris=[AnyUrl(callback.redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=auth.scope,
        token_endpoint_auth_method=auth.token_endpoint_auth_method,
    )

    async def redirect(authorization_url: str) -> None:
        await callback.start()
        logger.info("MCP server %s: waiting for sign-in on %s", server, callback.redirect_uri)
        try:
            await on_authorize(server, authorization_url)
        except BaseException:
            await callback.close()  # nobody will come back: the port is free for a retry
            raise

    return _CodeProvider(
        server_url=url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=redirect,
        callback_handler=callback.wait,
        client_metadata_url=auth.client_metadata_url,
    )


def _machine(auth: McpOAuth, url: str, credentials: Credentials) -> httpx2.Auth:
    """The client credentials grant: with a secret, or a JWT signed with `private_key`."""
    assert auth.client_id is not None  # McpOAuth checks
    storage = StoredTokens(credentials, url, client_id=auth.client_id)
    with warnings.catch_warnings():
        # Without `issuer` the SDK warns that discovery decides where the credentials go;
        # the config documents it, and a warning per connection says nothing new.
        warnings.simplefilter("ignore")
        if auth.private_key is not None:
            signed = SignedJWTParameters(
                issuer=auth.client_id,
                subject=auth.client_id,
                signing_key=auth.private_key,
                signing_algorithm=auth.signing_algorithm,
            )
            return _SignedMachineProvider(
                server_url=url,
                storage=storage,
                client_id=auth.client_id,
                assertion_provider=signed.create_assertion_provider(),
                scope=auth.scope,
                issuer=auth.issuer,
            )
        assert auth.client_secret is not None  # McpOAuth checks
        return _MachineProvider(
            server_url=url,
            storage=storage,
            client_id=auth.client_id,
            client_secret=auth.client_secret,
            token_endpoint_auth_method=auth.token_endpoint_auth_method or "client_secret_basic",
            scope=auth.scope,
            issuer=auth.issuer,
        )


def explain(exc: BaseException, auth: McpOAuth | None) -> str | None:
    """An OAuth failure in words (never the secret), or None for any other error."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if not isinstance(exc, OAuthFlowError | OAuthTokenError | OAuthRegistrationError):
        return None
    text = str(exc).strip()
    if isinstance(exc, OAuthTokenError) and text.startswith("Token exchange failed"):
        text = "the authorization server refused the token request" + text.removeprefix(
            "Token exchange failed"
        )
    elif isinstance(exc, OAuthRegistrationError):
        text = f"client registration failed: {text}"
    return redact(f"OAuth authorization failed: {text}", auth)


def redact(text: str, auth: McpOAuth | None) -> str:
    for secret in auth.secrets() if auth is not None else ():
        text = text.replace(secret, "***")
    return text


def _method(auth: McpOAuth) -> str:
    if auth.token_endpoint_auth_method is not None:
        return auth.token_endpoint_auth_method
    # RFC 8414's default, and the method OAuth 2.1 servers must take for a client's secret.
    return "client_secret_basic" if auth.client_secret else "none"


def _port_of(client: OAuthClientInformationFull | None) -> int | None:
    """The loopback port an earlier registration was made for (its redirect URI must match)."""
    for uri in (client.redirect_uris or []) if client is not None else []:
        parts = urlsplit(str(uri))
        if parts.hostname == "127.0.0.1" and parts.port:
            return parts.port
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def default_credentials() -> Credentials:
    """The store the CLI uses: `$TETHER_STORE`, else `sqlite:///tether.db`."""
    return open_credentials(os.environ.get("TETHER_STORE") or DEFAULT_STORE_URL)
