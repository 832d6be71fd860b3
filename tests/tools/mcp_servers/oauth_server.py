"""An OAuth-protected MCP server for the tests, run in-process on 127.0.0.1 by uvicorn in a
thread: the SDK's `MCPServer` as the resource server (its bearer check and protected
resource metadata), and a small authorization server of our own on the same port (the
SDK's has no client credentials grant): metadata, dynamic registration, an authorize
endpoint that approves at once (so a test can follow the redirect itself), and a token
endpoint for authorization codes with PKCE, refresh tokens (rotated: each works once, a
used one is `invalid_grant`) and client credentials.

`OAuthServer(sse=True)` serves the same over the legacy HTTP+SSE transport; `guard=False`
leaves the tools open.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

MACHINE_ID = "machine"
MACHINE_SECRET = "s3cret-machine-value"


@dataclass
class Grant:
    client_id: str
    challenge: str
    redirect_uri: str
    scope: str | None


@dataclass
class AuthState:
    """What the authorization server issued and was asked; tests read and change it."""

    lifetime: int = 3600  # seconds an access token lives
    clients: dict[str, dict[str, Any]] = field(default_factory=dict)
    codes: dict[str, Grant] = field(default_factory=dict)
    access: dict[str, tuple[str, float]] = field(default_factory=dict)  # token -> client, expiry
    refresh: dict[str, str] = field(default_factory=dict)  # token -> client
    counts: Counter[str] = field(default_factory=Counter)
    # Seconds a refresh is held before it is answered, unless another refresh arrives first
    # (then both go on at once): two clients that refresh together overlap for certain.
    hold_refresh: float = 0.0
    _next_refresh: asyncio.Event | None = None

    async def meet_refresh(self) -> None:
        if self._next_refresh is not None:
            self._next_refresh.set()
            self._next_refresh = None
            return
        if self.hold_refresh <= 0:
            return
        arrived = self._next_refresh = asyncio.Event()
        try:
            await asyncio.wait_for(arrived.wait(), self.hold_refresh)
        except TimeoutError:
            self._next_refresh = None

    def issue(self, client_id: str, *, refreshable: bool) -> dict[str, Any]:
        access = secrets.token_urlsafe(16)
        self.access[access] = (client_id, time.time() + self.lifetime)
        tokens: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.lifetime,
        }
        if refreshable:
            refresh = secrets.token_urlsafe(16)
            self.refresh[refresh] = client_id
            tokens["refresh_token"] = refresh
        return tokens


class Verifier:
    """The resource server's check: a token we issued that has not expired."""

    def __init__(self, state: AuthState) -> None:
        self.state = state

    async def verify_token(self, token: str) -> AccessToken | None:
        found = self.state.access.get(token)
        if found is None or found[1] < time.time():
            return None
        return AccessToken(token=token, client_id=found[0], scopes=[], expires_at=int(found[1]))


def _tools(server: MCPServer) -> None:
    @server.tool()
    def whoami() -> str:
        """The client the call's token was issued to."""
        token = get_access_token()
        return token.client_id if token is not None else "anonymous"

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return text


def _authorization_routes(server: MCPServer, state: AuthState, base: str) -> None:
    @server.custom_route("/.well-known/oauth-authorization-server", methods=["GET"])
    async def metadata(request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": base,
                "authorization_endpoint": f"{base}/authorize",
                "token_endpoint": f"{base}/token",
                "registration_endpoint": f"{base}/register",
                "response_types_supported": ["code"],
                "grant_types_supported": [
                    "authorization_code",
                    "refresh_token",
                    "client_credentials",
                ],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": [
                    "client_secret_basic",
                    "client_secret_post",
                    "none",
                ],
            }
        )

    @server.custom_route("/register", methods=["POST"])
    async def register(request: Request) -> Response:
        body = await request.json()
        client_id = f"dyn-{secrets.token_hex(4)}"
        state.clients[client_id] = {"secret": None, "redirect_uris": body["redirect_uris"]}
        state.counts["registrations"] += 1
        return JSONResponse(
            {**body, "client_id": client_id, "token_endpoint_auth_method": "none"}, status_code=201
        )

    @server.custom_route("/authorize", methods=["GET"])
    async def authorize(request: Request) -> Response:
        q = request.query_params
        client = state.clients.get(q.get("client_id", ""))
        if client is None or q.get("redirect_uri") not in client["redirect_uris"]:
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return JSONResponse({"error": "invalid_request", "error_description": "PKCE"}, 400)
        code = secrets.token_urlsafe(16)
        state.codes[code] = Grant(
            q["client_id"], q["code_challenge"], q["redirect_uri"], q.get("scope")
        )
        state.counts["authorizations"] += 1
        target = f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q.get('state', '')})}"
        return RedirectResponse(target, status_code=302)

    @server.custom_route("/token", methods=["POST"])
    async def token(request: Request) -> Response:
        form = dict(await request.form())
        client_id, secret = _client_auth(request, form)
        client = state.clients.get(client_id or "")
        if client is None or client["secret"] != secret:
            state.counts["refused"] += 1
            return JSONResponse(
                {"error": "invalid_client", "error_description": "unknown client or bad secret"},
                status_code=401,
            )
        grant = form.get("grant_type")
        state.counts[str(grant)] += 1
        if grant == "client_credentials":
            return JSONResponse(state.issue(client_id, refreshable=False))
        if grant == "refresh_token":
            await state.meet_refresh()
            if state.refresh.pop(str(form.get("refresh_token")), None) != client_id:
                state.counts["invalid_grant"] += 1
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            return JSONResponse(state.issue(client_id, refreshable=True))
        if grant == "authorization_code":
            code = state.codes.pop(str(form.get("code")), None)
            verifier = str(form.get("code_verifier", "")).encode()
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
            if (
                code is None
                or code.client_id != client_id
                or code.challenge != challenge.decode()
                or code.redirect_uri != form.get("redirect_uri")
            ):
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            return JSONResponse(state.issue(client_id, refreshable=True))
        return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)


def _client_auth(request: Request, form: dict[str, Any]) -> tuple[str | None, str | None]:
    header = request.headers.get("authorization", "")
    if header.startswith("Basic "):
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return user, password
    return form.get("client_id"), form.get("client_secret")


class OAuthServer:
    """`with OAuthServer() as server:` - `server.url` is the protected MCP endpoint."""

    def __init__(self, *, sse: bool = False, guard: bool = True) -> None:
        self.state = AuthState()
        self.state.clients[MACHINE_ID] = {"secret": MACHINE_SECRET, "redirect_uris": []}
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.sse = sse
        self.guard = guard
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{self.base}/sse" if self.sse else f"{self.base}/mcp"

    def app(self) -> Starlette:
        if not self.guard:
            open_server = MCPServer("open", log_level="WARNING")
            _tools(open_server)
            return open_server.sse_app() if self.sse else open_server.streamable_http_app()
        server = MCPServer(
            "guarded",
            log_level="WARNING",
            token_verifier=Verifier(self.state),
            auth=AuthSettings(
                issuer_url=self.base,  # type: ignore[arg-type]
                resource_server_url=self.url,  # type: ignore[arg-type]
                validate_token_resource=False,
            ),
        )
        _tools(server)
        _authorization_routes(server, self.state, self.base)
        return server.sse_app() if self.sse else server.streamable_http_app()

    def __enter__(self) -> OAuthServer:
        config = uvicorn.Config(self.app(), log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self._server.started, "the OAuth test server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
