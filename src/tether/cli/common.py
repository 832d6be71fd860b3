"""What the `tether` subcommands share: the one-line error, exit codes by stop reason,
opening the store a command names, loading `--tools`, `--mcp` and `--agents`, and common
arguments.

It runs nothing; each subcommand's module does (`main`, `steer`, `chat`, `experiment`,
`serve`, `db`).
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether import documents
from tether.errors import LeaseHeld, TetherError, UsageError
from tether.events import Event
from tether.retrying import DEFAULT_RETRY
from tether.scheduler.retry import RetryPolicy
from tether.session.threads import DEFAULT_MAX_DEPTH, DEFAULT_MAX_THREADS
from tether.store.base import Store
from tether.store.credentials import open_credentials
from tether.store.open import DEFAULT_STORE_URL, open_store, sqlite_path
from tether.store.sealing import Keyring
from tether.tools import load
from tether.tools.base import Tool

if TYPE_CHECKING:
    from tether.runtime.base import AgentSpec


class CliError(Exception):
    """A problem with what the user typed; printed as one line."""


# How `tether run` (and `sessions resume`) exits, by how its turn ended (README: exit codes).
EXIT_ANSWERED = 0  # end_turn, or a custom stop condition's own reason
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_LIMIT = 3
EXIT_AWAITING_APPROVAL = 4
EXIT_LEFT_OPEN = 5  # failed (the store, mostly) after storing events: resume goes on
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


@dataclass(slots=True)
class Kept:
    """What this command has stored: the session of the last event it committed (its
    observers see committed events only), and that event's seq."""

    session_id: str | None = None
    seq: int = 0

    def saw(self, event: Event) -> None:
        self.session_id, self.seq = event.session_id, event.seq


def failed(exc: Exception, kept: Kept, store_arg: str | None) -> int:
    """The one line a command that failed prints, and its exit code: 2 for what was refused
    before this command stored anything; 5 when it failed after storing events (a store
    that filled up or went away mid-run): the line then says what its session keeps and
    how to go on, and the turn is left open for that."""
    line = f"tether: error: {error_text(exc)}"
    if kept.session_id is not None:
        store = f" --store {store_arg}" if store_arg else ""
        line += (
            f"; session {kept.session_id} keeps the {kept.seq} events stored before the "
            f"failure: `tether sessions resume {kept.session_id}{store}` goes on from there"
        )
    print(line, file=sys.stderr)
    return EXIT_BAD_INPUT if kept.session_id is None else EXIT_LEFT_OPEN


def load_tools(specs: Sequence[str]) -> list[Tool]:
    """`--tools` specs (see `tether.tools.load`), a bad one as a one-line `CliError`."""
    try:
        return load.load_tools(specs, label="--tools")
    except UsageError as exc:
        raise CliError(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class AgentsFile:
    """What an `--agents` file says: sub-agents by name (`AgentSpec`), and the caps on how
    deep they nest and how many run at once."""

    agents: dict[str, AgentSpec]
    max_depth: int = DEFAULT_MAX_DEPTH
    max_threads: int = DEFAULT_MAX_THREADS


AGENTS_FILE_KEYS = ("agents", "max_depth", "max_threads")


def load_agents(path: str) -> AgentsFile:
    """An `--agents` file, TOML or JSON (by its suffix; JSON if it is `.json`): an `agents`
    table of sub-agents by name, each as `SessionSpec.agents` takes them, and optionally
    `max_depth` and `max_threads`. What is wrong is a one-line `CliError` naming the file."""
    try:
        data = documents.read(path, "json" if path.endswith(".json") else "toml")
    except OSError as exc:
        raise CliError(f"--agents {path}: cannot read it: {exc}") from exc
    except ValueError as exc:
        raise CliError(f"--agents {path}: {exc}") from exc
    try:
        return agents_file(data)
    except UsageError as exc:
        raise CliError(f"--agents {path}: {exc}") from exc


def agent_tools(loaded: AgentsFile, where: str, settings: Any = None) -> list[Tool]:
    """The tools that offer the file's sub-agents to the main agent (`tether.runtime.sessions.
    subagent_tools`: those no other sub-agent lists), their models and tools loaded now;
    `where` names the file (or the record) in an error; `settings`: the run's
    (`ModelSettings`), checked with each sub-agent's own as it will run them."""
    from tether.runtime.sessions import build_runner, subagent_tools

    try:
        return subagent_tools(
            loaded.agents, lambda _, agent: build_runner(agent.model, agent.tools), settings
        )
    except UsageError as exc:
        raise CliError(f"{where}: {exc}") from exc


def agents_record(loaded: AgentsFile) -> dict[str, Any]:
    """What `session.created` records of the file (`metadata.cli`), as a runtime records a
    spec's sub-agents (`metadata.runner`), so a worker rebuilds them."""
    from tether.runtime.base import agent_json

    return {
        "agents": {name: agent_json(agent) for name, agent in loaded.agents.items()},
        "max_depth": loaded.max_depth,
        "max_threads": loaded.max_threads,
    }


def agents_file(data: object) -> AgentsFile:
    """An `--agents` file's table (or what `agents_record` recorded of one), checked."""
    # Here, not at the top: the runtime (and pydantic) would slow every command's start.
    from tether.runtime.base import agents_from_json, check_agents

    if not isinstance(data, dict):
        raise UsageError("the file must hold a table with an agents table")
    unknown = sorted(set(data) - set(AGENTS_FILE_KEYS))
    if unknown or "agents" not in data:
        raise UsageError(
            f"unknown keys {', '.join(unknown)}; expected {', '.join(AGENTS_FILE_KEYS)}"
            if unknown
            else 'no agents table (e.g. [agents.researcher] model = "...")'
        )
    depth, threads = (
        data.get("max_depth", DEFAULT_MAX_DEPTH),
        data.get("max_threads", DEFAULT_MAX_THREADS),
    )
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
        raise UsageError(f"max_depth must be an integer 0 or more, not {depth!r}")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise UsageError(f"max_threads must be an integer 1 or more, not {threads!r}")
    agents = agents_from_json(data["agents"])
    if not agents:
        raise UsageError("the agents table is empty")
    check_agents(agents, depth)
    return AgentsFile(agents, depth, threads)


def retry_policy(retries: int | None) -> RetryPolicy | None:
    """`--retries N`: N retries after the first attempt (0: none); not given, the default."""
    if retries is None:
        return DEFAULT_RETRY
    return dataclasses.replace(DEFAULT_RETRY, max_attempts=retries + 1) if retries else None


def store_url(url: str | None) -> str:
    """The URL of the store `--store` names, else `$TETHER_STORE`, else the default."""
    return url or os.environ.get("TETHER_STORE") or DEFAULT_STORE_URL


def store_from(url: str | None) -> Store:
    """The store `--store` names, else `$TETHER_STORE`, else the default (made if new)."""
    return open_store(store_url(url))


def existing_store(url: str | None) -> Store:
    """The store of a command that reads or steers sessions already stored: a SQLite file
    that does not exist, or is no tether store (empty, another database), is an error
    naming it, never made into a new store."""
    resolved = store_url(url)
    path = _sqlite_file(resolved)
    if path is not None and not Path(path).exists():
        raise CliError(
            f"no store at {path} (store {resolved}): the file does not exist; "
            "check --store or $TETHER_STORE"
        )
    if path is not None and (problem := _not_a_store(Path(path))):
        raise CliError(
            f"{path} is not a tether store ({problem}; store {resolved}): "
            "check --store or $TETHER_STORE"
        )
    return open_store(resolved)


def _not_a_store(path: Path) -> str | None:
    """Why the SQLite file at `path` is no tether store, found without writing to it; None
    when it is one, or when only opening it can tell (the store then says what is wrong)."""
    try:
        with path.open("rb") as file:
            head = file.read(len(SQLITE_HEADER))
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    if not head:
        return "the file is empty"
    if head != SQLITE_HEADER:
        return "not a SQLite database"
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            marked = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'tether_meta'"
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return None if marked else "a SQLite database tether has not written"


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


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


async def load_mcp_tools(
    path: str, taken: Sequence[str], *, store: str | None, keyring: Keyring | None = None
) -> tuple[Any, list[Tool]]:
    """The tools of the MCP servers in the file, with the source that must be closed.
    `store`: the command's `--store`; its database (or `$TETHER_STORE`'s, or the default's,
    as the command's own store) keeps the servers' OAuth tokens, sealed with `keyring`
    (none: the environment's keys)."""
    try:
        from tether.tools.mcp import McpToolSource, load_mcp_config
    except ImportError as exc:
        raise CliError(f"--mcp {path}: {exc}") from exc
    try:
        credentials = open_credentials(store_url(store), keyring)
        source = McpToolSource(load_mcp_config(path), credentials=credentials)
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
