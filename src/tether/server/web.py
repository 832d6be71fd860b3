"""The web surface of `tether serve`: the security headers every response carries, the
loopback guard of an unauthenticated server (its `Host` and `Origin` checks), and the web
view's files. Pure ASGI, so an event stream passes through unbuffered. Routes: `app`."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.server.errors import envelope

# No inline script or style anywhere: the page loads its script and style from this server,
# and no other origin may frame it (a framing page could otherwise click Allow for a tenant).
# `blob:` images: the experiments' chart, fetched with the token and shown from a blob URL
# (an <img> cannot send the Authorization header); an SVG shown as an image runs no script.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
NAMES = frozenset(name for name, _ in SECURITY_HEADERS)
CSP_NAME = b"content-security-policy"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

_HERE = Path(__file__).parent
# The page's icon (a "T" on the header's colour), here rather than a file of its own so the
# package data stays the page, its script and its style.
FAVICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    b'<rect width="16" height="16" rx="3" fill="#1d2330"/>'
    b'<path d="M4 4h8v2H9v7H7V6H4z" fill="#fff"/></svg>'
)
# path -> (file next to this module, media type); read once, at import.
ASSETS: dict[str, tuple[bytes, str]] = {
    "/ui": ((_HERE / "ui.html").read_bytes(), "text/html; charset=utf-8"),
    "/ui/app.js": ((_HERE / "ui.js").read_bytes(), "text/javascript; charset=utf-8"),
    "/ui/timeline.js": ((_HERE / "timeline.js").read_bytes(), "text/javascript; charset=utf-8"),
    "/ui/transcript.js": (
        (_HERE / "transcript.js").read_bytes(),
        "text/javascript; charset=utf-8",
    ),
    "/ui/lineage.js": ((_HERE / "lineage.js").read_bytes(), "text/javascript; charset=utf-8"),
    "/ui/list.js": ((_HERE / "list.js").read_bytes(), "text/javascript; charset=utf-8"),
    "/ui/start.js": ((_HERE / "start.js").read_bytes(), "text/javascript; charset=utf-8"),
    "/ui/usage.js": ((_HERE / "usage.js").read_bytes(), "text/javascript; charset=utf-8"),
    "/ui/app.css": ((_HERE / "ui.css").read_bytes(), "text/css; charset=utf-8"),
    "/ui/favicon.svg": (FAVICON, "image/svg+xml"),
}


def asset(path: str) -> Response:
    body, media_type = ASSETS[path]
    return Response(body, media_type=media_type, headers={"Cache-Control": "no-cache"})


def is_loopback_host(host: str) -> bool:
    """Whether a `Host` header names this machine's loopback (with any port): `localhost`,
    127.0.0.0/8 or [::1]. Any other name could be a DNS rebinding to a loopback address."""
    host = host.strip().lower()
    if host.startswith("["):
        name, closed, rest = host[1:].partition("]")
        if not closed or (rest and (rest[0] != ":" or rest == ":")):
            return False
        port = rest[1:]
    else:
        name, colon, port = host.partition(":")
        if colon and not port:
            return False
    if port and not (port.isascii() and port.isdigit()):
        return False
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def loopback_refusal(scope: Scope) -> tuple[str, str] | None:
    """Why an unauthenticated server refuses this request, or None: a `Host` that is not a
    loopback name, or a state-changing request from a page of another origin."""
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    host = headers.get("host", "")
    if not is_loopback_host(host):
        return (
            "host_not_allowed",
            f"Host {host[:80]!r} is not localhost, 127.0.0.1 or [::1]: "
            "a server without authentication answers only on loopback",
        )
    origin = headers.get("origin")
    own = f"{scope.get('scheme', 'http')}://{host.strip().lower()}"
    if scope["method"] not in SAFE_METHODS and origin is not None and origin.lower() != own:
        return (
            "cross_origin",
            f"a {scope['method']} from Origin {origin[:80]!r} (not {own}): "
            "a server without authentication takes changes only from its own pages",
        )
    return None


class WebGuard:
    """Adds `SECURITY_HEADERS` to every response; with `loopback_only` (no authentication),
    refuses what `loopback_refusal` names before the app sees it."""

    def __init__(self, app: ASGIApp, *, loopback_only: bool) -> None:
        self.app = app
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                given = list(message.get("headers", ()))
                # A response may bring a policy of its own (the chart's, stricter); nothing
                # else of these names is kept from a route.
                kept = [(k, v) for k, v in given if k.lower() == CSP_NAME]
                own = [(k, v) for k, v in given if k.lower() not in NAMES]
                ours = [(k, v) for k, v in SECURITY_HEADERS if not (kept and k == CSP_NAME)]
                message = {**message, "headers": [*own, *kept, *ours]}
            await send(message)

        refusal = loopback_refusal(scope) if self.loopback_only else None
        if refusal is not None:
            await envelope(*refusal)(scope, receive, send_secured)
            return
        await self.app(scope, receive, send_secured)
