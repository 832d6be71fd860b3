"""`tether worker --metrics-port`: a bare `GET /metrics` listener for a worker process, which
has no HTTP API, so that a deployment whose runs happen in workers (`tether serve --workers
0`) still shows its model, tool, token, takeover and park series to Prometheus.

Owns the listener and what it serves (the worker's session series and its gateways'
figures); the rendering and who may see names are `server/metrics.py`'s and
`telemetry/prometheus.py`'s. Needs no `server` extra: asyncio streams only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Callable

from tether.scheduler.figures import GatewayFigures, render_prometheus
from tether.server.metrics import totals
from tether.telemetry.prometheus import render

HEAD_LIMIT = 8192  # bytes of a request's line and headers
HEAD_TIMEOUT = 5.0  # seconds a client has to send them


def is_operator(authorization: str | None, token: str | None) -> bool:
    """Whether `Authorization: Bearer …` carries the operator's metrics token."""
    if token is None or not authorization:
        return False
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )


def worker_text(figures: list[GatewayFigures], names: bool) -> str:
    """The process's session and worker series, and its gateways' figures: per backend for
    the operator, else summed (as `GET /metrics` of `tether serve`)."""
    lines = render(names=names)
    if not names:
        lines.extend(totals(figures))
    text = "\n".join(lines) + "\n"
    return text + render_prometheus(figures) if names and figures else text


async def listen(
    host: str, port: int, text: Callable[[bool], str], token: str | None
) -> asyncio.Server:
    """Serve `text(names)` at `GET /metrics` on `host:port`; `names` for the bearer of
    `token`. Anything else is a 404; a request head past 8 KiB or 5 s is dropped."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            request, *header_lines = head.decode("latin-1").split("\r\n")
            method, path = [*request.split(" "), "", ""][:2]
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in header_lines if line)
            }
            if method == "GET" and path.split("?", 1)[0] == "/metrics":
                names = is_operator(headers.get("authorization"), token)
                status, body = "200 OK", text(names).encode()
            else:
                status, body = "404 Not Found", b"not found: only GET /metrics\n"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):  # fmt: skip
            pass  # a slow, short or oversized request, or a gone client: closed unanswered
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(answer, host, port, limit=HEAD_LIMIT)
