"""What the `tether` subcommands share: the one-line error, exit codes by stop reason,
opening the store a command names, loading `--tools` and `--mcp`, and common arguments.

It runs nothing; each subcommand's module does (`main`, `steer`, `chat`, `experiment`,
`serve`, `db`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.errors import LeaseHeld, TetherError, UsageError
from tether.retrying import DEFAULT_RETRY
from tether.scheduler.retry import RetryPolicy
from tether.store.base import Store
from tether.store.open import DEFAULT_STORE_URL, open_store, sqlite_path
from tether.tools import load
from tether.tools.base import Tool


class CliError(Exception):
    """A problem with what the user typed; printed as one line."""


# How `tether run` (and `sessions resume`) exits, by how its turn ended (README: exit codes).
EXIT_ANSWERED = 0  # end_turn, or a custom stop condition's own reason
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_LIMIT = 3
EXIT_AWAITING_APPROVAL = 4
EXIT_INTERRUPTED = 130  # as a shell reports a process ended by Ctrl-C
LIMIT_REASONS = frozenset({"budget", "turn_limit", "time_limit", "output_limit"})


def exit_code(stop_reason: str) -> int:
    if stop_reason == "error":
        return EXIT_ERROR
    if stop_reason in LIMIT_REASONS:
        return EXIT_LIMIT
    if stop_reason == "awaiting_approval":
        return EXIT_AWAITING_APPROVAL
    if stop_reason == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_ANSWERED


def load_tools(specs: Sequence[str]) -> list[Tool]:
    """`--tools` specs (see `tether.tools.load`), a bad one as a one-line `CliError`."""
    try:
        return load.load_tools(specs, label="--tools")
    except UsageError as exc:
        raise CliError(str(exc)) from exc


def retry_policy(retries: int | None) -> RetryPolicy | None:
    """`--retries N`: N retries after the first attempt (0: none); not given, the default."""
    if retries is None:
        return DEFAULT_RETRY
    return dataclasses.replace(DEFAULT_RETRY, max_attempts=retries + 1) if retries else None


def store_from(url: str | None) -> Store:
    """The store `--store` names, else `$TETHER_STORE`, else the default (made if new)."""
    return open_store(url or os.environ.get("TETHER_STORE") or DEFAULT_STORE_URL)


def existing_store(url: str | None) -> Store:
    """The store of a command that reads or steers sessions already stored: a SQLite file
    that does not exist is an error naming it, never a new empty database."""
    resolved = url or os.environ.get("TETHER_STORE") or DEFAULT_STORE_URL
    path = _sqlite_file(resolved)
    if path is not None and not Path(path).exists():
        raise CliError(
            f"no store at {path} (store {resolved}): the file does not exist; "
            "check --store or $TETHER_STORE"
        )
    return open_store(resolved)


def _sqlite_file(url: str) -> str | None:
    """The file a SQLite store URL names, as `open_store` reads it; None for other stores."""
    path = sqlite_path(url)
    return path if path not in ("", ":memory:") else None


def error_text(exc: Exception) -> str:
    """One line: a lease another worker holds also says how to wait for it."""
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, LeaseHeld):
        text += "; to wait for it, pass --lease-wait SECONDS"
    return text


def tool_specs(text: str) -> list[str]:
    """One `--tools` value: `MODULE:ATTR`, or several separated by commas."""
    return [spec.strip() for spec in text.split(",") if spec.strip()]


def import_from_cwd() -> None:
    """Modules named on the command line (`--tools`, `--model python:`) resolve from the
    current directory first, as with `python -m`, uvicorn and pytest: the `tether` script
    alone would not look there."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


async def load_mcp_tools(path: str, taken: Sequence[str]) -> tuple[Any, list[Tool]]:
    """The tools of the MCP servers in the file, with the source that must be closed."""
    try:
        from tether.tools.mcp import McpToolSource, load_mcp_config
    except ImportError as exc:
        raise CliError(f"--mcp {path}: {exc}") from exc
    try:
        source = McpToolSource(load_mcp_config(path))
    except TetherError as exc:
        raise CliError(f"--mcp {path}: {exc}") from exc
    try:
        return source, await source.list_tools(taken=taken)
    except BaseException as exc:
        await source.aclose()
        if isinstance(exc, TetherError):
            raise CliError(f"--mcp {path}: {exc}") from exc
        raise


TIMELINE_HELP = "print one line per event as it is committed, then the answer"

# `--tools` takes one value per flag (repeat it, or separate specs with commas), so the
# task after it is never taken for a tools module.
TOOLS_ARGUMENT: dict[str, Any] = {
    "action": "extend",
    "type": tool_specs,
    "default": [],
    "metavar": "MODULE:ATTR[,...]",
    "help": "tools to load: a tool, a function or a list of them (repeatable)",
}
