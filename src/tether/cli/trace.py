"""`tether sessions trace ID --otlp URL`: a stored session's spans sent to an OpenTelemetry
collector after the fact. A thin adapter over `tether.telemetry.export`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tether.cli.common import CliError, existing_store


def add_trace_command(ssub: Any) -> None:
    trace = ssub.add_parser(
        "trace", help="send a session's spans to an OpenTelemetry collector (OTLP/HTTP)"
    )
    trace.add_argument("id")
    trace.add_argument(
        "--otlp",
        required=True,
        metavar="URL",
        help="the collector, e.g. http://localhost:4318 (or its full /v1/traces URL)",
    )
    trace.add_argument(
        "--content",
        action="store_true",
        help="include messages, tool arguments and results (left out by default)",
    )


async def cmd_trace(args: argparse.Namespace) -> int:
    try:
        from tether.telemetry.export import export_session
    except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
        raise CliError(f"tracing needs the otel extra: pip install 'tether[otel]' ({exc})") from exc
    store = existing_store(args.store)
    try:
        sent = await export_session(store, args.id, args.otlp, content=args.content)
    finally:
        await store.close()
    if args.json:
        print(json.dumps({"session_id": args.id, "spans": sent, "otlp": args.otlp}))
    else:
        print(f"{sent} spans of {args.id} sent to {args.otlp}")
    return 0


TRACE_COMMANDS = {"trace": cmd_trace}
