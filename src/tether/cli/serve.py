"""`tether serve` (the HTTP API) and `tether worker` (runs sessions from a store, apart from
the server). Thin adapters over `tether.server.app` and `tether.runtime.Worker`; both print
their model gateways' figures on SIGUSR1 and when they exit."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tether.cli.args import COUNT, PORT, SECONDS, WAIT, number
from tether.cli.common import store_from, store_url
from tether.errors import UsageError
from tether.store.base import redact_url

if TYPE_CHECKING:
    from tether.providers.endpoints import EndpointPolicy
    from tether.runtime.mcp_servers import McpServers
    from tether.scheduler import GatewayConfig, GatewayFigures


def add_runtime_commands(sub: Any, store_help: str) -> None:
    serve = sub.add_parser("serve", help="serve the HTTP API (sessions, events, health, metrics)")
    serve.add_argument("--store", default=None, help=store_help)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=PORT, default=8700, help="0: any free port (printed)")
    serve.add_argument(
        "--workers",
        type=number(int, at_least=0),
        default=8,
        metavar="N",
        help="sessions run at once in the server process (0: leave them to `tether worker`)",
    )
    serve.add_argument(
        "--tokens",
        default=None,
        metavar="FILE",
        help='bearer tokens per tenant: {"tenants": {"NAME": ["TOKEN", ...]}} (JSON or TOML); '
        "default: $TETHER_TOKENS (NAME=TOKEN,...)",
    )
    serve.add_argument(
        "--no-auth",
        action="store_true",
        help="no tokens: one unscoped tenant; loopback only (--host and the Host header), "
        "and changes only from the server's own pages (Origin)",
    )
    serve.add_argument(
        "--metrics-token",
        default=None,
        metavar="TOKEN",
        help="the operator's bearer token for /metrics with its series by backend, model, "
        "tool and tenant; 16 characters or more, no tenant's (default: "
        "$TETHER_METRICS_TOKEN; without one, /metrics names none of them)",
    )
    serve.add_argument(
        "--allow-check",
        action="append",
        default=None,
        metavar="PATTERN",
        help="MODULE:NAME (fnmatch) of experiment checks the server may run to report on an "
        "experiment (plain functions defined there, in a thread, time-limited); repeatable; "
        "default: none (their pass and score show as unknown)",
    )
    serve.add_argument(
        "--limit",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="what one request may hold (repeatable): body_bytes (1 MiB), text_bytes (256 KiB: "
        "a task, a system prompt, a message), metadata_keys (64), metadata_key_chars (128), "
        "metadata_value_bytes (4 KiB), metadata_bytes (16 KiB), metadata_depth (8), "
        "metadata_items (1024)",
    )
    worker = sub.add_parser("worker", help="run sessions from a store (apart from the server)")
    worker.add_argument("--store", default=None, help=store_help)
    worker.add_argument("--concurrency", type=COUNT, default=16, metavar="N")
    worker.add_argument(
        "--drain",
        type=WAIT,
        default=10.0,
        metavar="SECONDS",
        help="on SIGTERM, let running turns finish this long, then hand the rest over "
        "(left open for the next worker to go on with)",
    )
    worker.add_argument(
        "--poison-after",
        type=COUNT,
        default=3,
        metavar="N",
        help="end a session failed once N workers in a row died while one of its tool calls "
        "was running (a death while it waited on its model is not counted)",
    )
    worker.add_argument(
        "--metrics-port",
        type=PORT,
        default=None,
        metavar="PORT",
        help="serve GET /metrics (Prometheus text) on this port (0: any free one, printed)",
    )
    worker.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST")
    worker.add_argument(
        "--metrics-token",
        default=None,
        metavar="TOKEN",
        help="the operator's bearer token for /metrics with its series by backend, model, "
        "tool and tenant; 16 characters or more (default: $TETHER_METRICS_TOKEN)",
    )
    for p in (serve, worker):
        p.add_argument(
            "--allow-code",
            action="append",
            default=None,
            metavar="PATTERN",
            help="MODULE:NAME (fnmatch) that specs may name as tools (a Tool, or a list of "
            "them, made in that module) or python: models (a Model, or a function marked "
            "@tether.model_factory); repeatable; default: none (provider models and "
            "scripted:demo only)",
        )
        p.add_argument(
            "--lease-ttl",
            type=SECONDS,
            default=30.0,
            metavar="SECONDS",
            help="how soon another worker takes over a session whose worker died",
        )
        p.add_argument("--poll-interval", type=SECONDS, default=0.1, metavar="SECONDS")
        p.add_argument(
            "--allow-endpoint",
            action="append",
            default=None,
            metavar="URL_PREFIX",
            help="a model URL prefix that specs may make this process call (repeatable; also "
            "$TETHER_ALLOW_ENDPOINTS, comma-separated); the hosted providers and the base "
            "URLs set in the environment are allowed without it",
        )
        p.add_argument(
            "--mcp",
            default=None,
            metavar="FILE",
            help="MCP servers that specs may name in `mcp` (the mcpServers file of `tether run "
            "--mcp`); started by the workers, one set per tenant, their OAuth tokens kept per "
            "tenant in the store's database; give workers the same file",
        )
        p.add_argument("--log-level", default="warning")
        gateway = p.add_argument_group(
            "model gateway", "limits of the one gateway per backend (model) in this process"
        )
        gateway.add_argument(
            "--max-concurrency",
            type=COUNT,
            default=16,
            metavar="N",
            help="model requests in flight at once per backend (default 16)",
        )
        gateway.add_argument(
            "--rpm",
            type=COUNT,
            default=None,
            metavar="N",
            help="requests per minute per backend (default: learned from rate-limit headers)",
        )
        gateway.add_argument(
            "--tpm",
            type=COUNT,
            default=None,
            metavar="N",
            help="tokens per minute per backend (default: learned from rate-limit headers)",
        )
        gateway.add_argument(
            "--park-after",
            type=WAIT,
            default=10.0,
            metavar="SECONDS",
            help="a session whose model call must wait this long for a spent budget or an "
            "open circuit is parked, freeing its slot, until the wait is over; 0: never "
            "(default 10)",
        )


def endpoint_policy(args: argparse.Namespace) -> EndpointPolicy:
    """The model URLs this process may call for a spec: `--allow-endpoint`,
    `TETHER_ALLOW_ENDPOINTS`, and the providers configured here."""
    from tether.providers.endpoints import EndpointPolicy, configured_endpoints
    from tether.providers.registry import HOSTED_BASE_URLS

    listed = os.environ.get("TETHER_ALLOW_ENDPOINTS", "")
    allowed = [*(args.allow_endpoint or ()), *filter(None, (p.strip() for p in listed.split(",")))]
    return EndpointPolicy(tuple(allowed), configured_endpoints(os.environ, HOSTED_BASE_URLS))


def mcp_servers(args: argparse.Namespace) -> McpServers | None:
    """`--mcp FILE`: the servers a spec may name, their tokens kept beside the store; read
    before anything starts, so a bad file stops the command."""
    if args.mcp is None:
        return None
    from tether.runtime.mcp_servers import McpServers
    from tether.store.credentials import open_credentials

    return McpServers.load(args.mcp, open_credentials(store_url(args.store)))


def gateway_config(args: argparse.Namespace) -> GatewayConfig:
    from tether.scheduler import GatewayConfig

    return GatewayConfig(
        max_concurrency=args.max_concurrency,
        requests_per_minute=args.rpm,
        tokens_per_minute=args.tpm,
    )


STREAM_GRACE = 3  # seconds (uvicorn takes whole seconds)


def park_after(args: argparse.Namespace) -> float | None:
    return args.park_after or None


def print_figures(command: str, figures: list[GatewayFigures]) -> None:
    from tether.runtime.gateways import describe

    if not figures:
        print(f"{command}: no model calls yet", file=sys.stderr, flush=True)
    for f in figures:
        print(f"{command}: {describe(f)}", file=sys.stderr, flush=True)


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from tether.server.app import create_app
        from tether.server.auth import Tokens
        from tether.server.bounds import InputLimits
        from tether.server.metrics import check_token
    except ImportError as exc:
        raise UsageError(
            f"tether serve needs the server extra (pip install 'tether[server]'): {exc}"
        ) from exc
    from tether.runtime.local import LocalRuntime

    gateway = gateway_config(args)
    endpoints = endpoint_policy(args)
    try:
        limits = InputLimits.parse(args.limit or [])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.no_auth and not _loopback(args.host):
        raise UsageError(
            f"--no-auth serves on loopback only (127.0.0.1, ::1, localhost), not on {args.host}: "
            "give tenants tokens (--tokens) to serve elsewhere"
        )
    metrics_token = args.metrics_token or os.environ.get("TETHER_METRICS_TOKEN") or None
    tokens = None if args.no_auth else Tokens.load(args.tokens)
    if tokens is not None and len(tokens) == 0:
        raise UsageError("no tokens: pass --tokens FILE, set TETHER_TOKENS, or --no-auth")
    check_token(metrics_token, tokens)  # it names every tenant: the operator's alone
    mcp = mcp_servers(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    # IPPROTO_TCP named explicitly: asyncio turns Nagle off only for sockets that say so,
    # and with Nagle on each response body waited ~40 ms for the client's delayed ACK.
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
        # Listening now, before "listening on" is printed: a client that connects while the
        # app still starts up waits in the backlog, rather than being refused (the line is
        # printed before uvicorn's own start-up, which listens only after the lifespan).
        sock.listen(2048)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from exc
    store = store_from(args.store)
    runtime = LocalRuntime(
        store,
        workers=args.workers,
        poll_interval=args.poll_interval,
        lease_ttl=args.lease_ttl,
        allow_code=args.allow_code or (),
        allow_check=args.allow_check or (),
        gateway=gateway,
        park_after=park_after(args),
        endpoints=endpoints,
        quotas=None if tokens is None else tokens.quota,
        mcp=mcp,
    )
    app = create_app(runtime, tokens, metrics_token=metrics_token, limits=limits)
    # On SIGTERM, requests in flight get STREAM_GRACE seconds; an event stream never ends on
    # its own, so without a bound one open stream would hold the server up for good. Cut
    # streams resume elsewhere from their last event id.
    config = uvicorn.Config(
        app,
        log_level=args.log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=STREAM_GRACE,
    )

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # Event streams end first, cleanly: otherwise uvicorn cancels them after the
            # grace and logs a traceback for each.
            app.state.api.close_streams()
            await super().shutdown(sockets)
            # Here, not only below: uvicorn ends a SIGTERM'd process by raising the signal
            # again once it has shut down, and a store left open keeps its WAL beside the file.
            await store.close()

    server = Server(config)
    host, port = sock.getsockname()[:2]
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(
        signal.SIGUSR1, lambda: print_figures("tether serve", runtime.figures())
    )
    print(
        f"tether serve: listening on http://{host}:{port} (store {redact_url(store.url)})",
        flush=True,
    )
    try:
        await server.serve(sockets=[sock])
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
        await store.close()
    if args.workers > 0:
        print_figures("tether serve", runtime.figures())
    return 0


async def cmd_worker(args: argparse.Namespace) -> int:
    from tether.published import Published
    from tether.runtime.worker import Worker

    gateway = gateway_config(args)
    endpoints = endpoint_policy(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    mcp = mcp_servers(args)
    store = store_from(args.store)
    worker = Worker(
        store,
        concurrency=args.concurrency,
        poll_interval=args.poll_interval,
        lease_ttl=args.lease_ttl,
        watch_interval=min(0.5, args.lease_ttl / 4),
        gateway=gateway,
        park_after=park_after(args),
        endpoints=endpoints,
        code=Published(tuple(args.allow_code or ())),
        max_claims=args.poison_after,
        mcp=mcp,
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    loop.add_signal_handler(
        signal.SIGUSR1, lambda: print_figures("tether worker", worker.gateways.figures())
    )
    print(
        f"tether worker {worker.owner}: running sessions from {redact_url(store.url)}", flush=True
    )
    scrapes = await _metrics_listener(args, worker)
    task = loop.create_task(_until_stopped(worker, stopping, args.drain))
    try:
        await task
    finally:
        if scrapes is not None:
            scrapes.close()
        loop.remove_signal_handler(signal.SIGUSR1)
        await worker.gateways.aclose()
        await store.close()
    print(f"tether worker {worker.owner}: stopped after {worker.turns_run} turns", file=sys.stderr)
    print_figures("tether worker", worker.gateways.figures())
    return 0


async def _metrics_listener(args: argparse.Namespace, worker: Any) -> asyncio.Server | None:
    """With `--metrics-port`, count this process's metrics and serve them."""
    if args.metrics_port is None:
        return None
    from tether.server.metrics import check_token
    from tether.server.scrape import listen, worker_text
    from tether.telemetry import metrics

    token = args.metrics_token or os.environ.get("TETHER_METRICS_TOKEN") or None
    check_token(token, None)
    metrics.enable()
    try:
        server = await listen(
            args.metrics_host,
            args.metrics_port,
            lambda names: worker_text(worker.gateways.figures(), names),
            token,
        )
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {args.metrics_host}:{args.metrics_port}: {exc.strerror}"
        ) from exc
    host, port = server.sockets[0].getsockname()[:2]
    print(f"tether worker {worker.owner}: metrics on http://{host}:{port}/metrics", flush=True)
    return server


async def _until_stopped(worker: Any, stopping: asyncio.Event, drain: float) -> None:
    """Take work until asked to stop; then take no more, and drain what runs."""
    run = asyncio.get_running_loop().create_task(worker.run())
    stop = asyncio.get_running_loop().create_task(stopping.wait())
    try:
        # A worker loop that fails ends the command with its error, not silently.
        await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        run.cancel()
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await run
        finally:
            await worker.stop(drain=drain)


RUNTIME_COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "serve": cmd_serve,
    "worker": cmd_worker,
}
