"""`tether sessions trace ID --otlp URL`: a stored session's spans sent to an OpenTelemetry
collector after the fact (a thin adapter over `tether.telemetry.export`); and the global
`--log-format` and `--log-level` options (over `tether.telemetry.logs.configure`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from typing import Any, cast

from tether.cli.common import CliError, existing_store
from tether.telemetry.logs import LOG_FORMATS, LogFormat, configure


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


def add_log_options(parser: argparse.ArgumentParser) -> None:
    """`tether --log-format json --log-level info COMMAND ...` or `tether COMMAND ...
    --log-format json`: for every command, before it or after it (or as $TETHER_LOG_FORMAT
    and $TETHER_LOG_LEVEL). After it, they are added to every subcommand's own parser."""
    _log_options(parser, None)
    for command in _commands(parser):
        _log_options(command, argparse.SUPPRESS)  # not given here: what was given before


def _log_options(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=default,
        help="process log records as text or JSON lines, on stderr (default: text)",
    )
    # `serve` and `worker` have a --log-level of their own (it sets uvicorn's too).
    with contextlib.suppress(argparse.ArgumentError):
        parser.add_argument(
            "--log-level",
            dest="global_log_level",
            default=default,
            metavar="LEVEL",
            help="the least severe log records shown: debug, info, warning (default), error",
        )


def _commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers of the commands that run (`tether sessions ls`, not `tether sessions`),
    found through argparse's subparser actions: it has no public way to list them."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # an alias is listed again
                found.extend(_commands(sub) or [sub])
    return found


def configure_logs(args: argparse.Namespace) -> None:
    """Set up the process log when asked to, by an option or the environment (or by a
    command's own `--log-level`, as `serve` and `worker` have); else leave Python's."""
    log_format = args.log_format or os.environ.get("TETHER_LOG_FORMAT")
    level = (
        args.global_log_level
        or getattr(args, "log_level", None)
        or os.environ.get("TETHER_LOG_LEVEL")
    )
    if log_format is None and level is None:
        return
    if log_format not in (None, *LOG_FORMATS):
        raise CliError(f"TETHER_LOG_FORMAT must be text or json, not {log_format}")
    if logging.getLevelName(str(level or "warning").upper()) not in range(0, 60):
        raise CliError(f"no log level {level!r} (debug, info, warning, error)")
    configure(str(level or "warning"), cast(LogFormat, log_format or "text"))
