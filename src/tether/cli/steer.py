"""`tether sessions resume|send|approve|deny|answer|cancel|interrupt`: steering a session from any
process. Thin adapters over `Agent.run` and `tether.session.control`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether import documents
from tether.cli.args import COUNT, WAIT, nonblank
from tether.cli.common import (
    AGENTS_FILE_KEYS,
    TIMELINE_HELP,
    TOOLS_ARGUMENT,
    AgentsFile,
    CliError,
    agents_file,
    existing_store,
)
from tether.cli.secrets import add_secret_flags
from tether.errors import UsageError
from tether.events import SessionCreated, SessionForked
from tether.session import control
from tether.session.fork import config_of
from tether.store.base import Store

if TYPE_CHECKING:
    from tether.output import OutputType


def add_steering_commands(ssub: Any) -> None:

    resume = ssub.add_parser("resume", help="continue a session from its log in this process")
    send = ssub.add_parser(
        "send", help="add a message to a session and run its turn here (--no-run: only add it)"
    )
    send.add_argument("id")
    send.add_argument("text", type=nonblank)
    send.add_argument(
        "--no-run",
        action="store_true",
        help="only add the message: a worker, or a later resume, runs the turn",
    )
    resume.add_argument("id")
    for p in (resume, send):
        p.add_argument("--model", default=None, help="default: the model the session ran with")
        p.add_argument("--tools", **{**TOOLS_ARGUMENT, "default": None})
        p.add_argument("--mcp", default=None, metavar="FILE")
        add_secret_flags(p)
        p.add_argument("--max-steps", type=COUNT, default=50)
        p.add_argument(
            "--lease-wait",
            type=WAIT,
            default=0.0,
            metavar="SECONDS",
            help="wait this long for another worker's lease to be released or expire",
        )
        p.add_argument("--timeline", action="store_true", help=TIMELINE_HELP)
    for name, text in (
        ("approve", "allow a call that waits for approval"),
        ("deny", "deny a call that waits for approval"),
    ):
        p = ssub.add_parser(name, help=text)
        p.add_argument("id")
        p.add_argument("call")
        if name == "deny":
            p.add_argument("--reason", default=None)
    answer = ssub.add_parser(
        "answer", help="answer the input a running call waits for (an MCP elicitation)"
    )
    answer.add_argument("id")
    answer.add_argument("call")
    answer.add_argument(
        "data", nargs="?", default=None, help="a JSON object meeting the requested schema"
    )
    answer.add_argument(
        "--action",
        choices=("accept", "decline", "cancel"),
        default="accept",
        help="decline or cancel instead of answering (no JSON then)",
    )
    for name, text in (
        ("cancel", "end the session (terminal)"),
        ("interrupt", "end the running turn; the session stays usable"),
    ):
        p = ssub.add_parser(name, help=text)
        p.add_argument("id")
        p.add_argument("--reason", default=None)


async def cmd_resume(args: argparse.Namespace) -> int:
    return await continue_session(args, None)


async def cmd_send(args: argparse.Namespace) -> int:
    """By default the turn runs here, as `resume` runs it; `--no-run` only adds the message
    (for a session that `tether worker` processes run, or to resume later)."""
    if not args.no_run:
        return await continue_session(args, args.text)

    async def send(store: Any) -> str:
        sent = await control.send_message(store, args.id, args.text)
        return "message sent" if sent else "sent already"

    return await _steer(args, send)


async def continue_session(args: argparse.Namespace, task: str | None) -> int:
    """Run session `args.id` here with `task` as its next message (None: its open turn),
    with the model and tools it ran with unless `args` names others."""
    from tether.cli.main import cmd_run

    store = existing_store(args.store)
    try:
        setup = await stored_setup(store, args.id)
    finally:
        await store.close()
    model = args.model or setup.model
    tools = args.tools if args.tools is not None else setup.tools
    args.mcp = args.mcp or setup.mcp
    args.agents_loaded = setup.agents
    args.output = setup.output
    args.recorded_settings = setup.settings  # the flags given now go over them
    args.system = setup.system
    args.session_id = args.id
    return await cmd_run(args, task=task, model=model, tool_specs=tools)


@dataclass(frozen=True, slots=True)
class StoredSetup:
    """What a session ran with, as `session.created` (a fork's `session.forked`) recorded it: the model string and
    tools specs the command line gave (`metadata.cli`), else the model's name; the
    sub-agents and caps of its `--agents` file, if it had one."""

    model: str
    tools: list[str]
    mcp: str | None
    system: str | None
    agents: AgentsFile | None = None
    output: OutputType | None = None  # `--output-schema`'s schema, as the session recorded it
    settings: dict[str, Any] | None = None  # `metadata.model_settings`, as recorded


async def stored_setup(store: Store, session_id: str) -> StoredSetup:
    created = await config_of(store, session_id)  # a fork's: its own session.forked
    recorded: dict[str, Any] = {}
    if isinstance(created.metadata.get("cli"), dict):
        recorded = dict(created.metadata["cli"])  # type: ignore[arg-type]
    mcp = recorded.get("mcp")
    agents = None
    if "agents" in recorded:
        try:
            agents = agents_file({k: recorded[k] for k in AGENTS_FILE_KEYS if k in recorded})
        except UsageError as exc:
            raise CliError(f"session {session_id}: its recorded sub-agents: {exc}") from exc
    return StoredSetup(
        str(recorded.get("model") or created.model),
        [str(t) for t in recorded.get("tools") or []],
        str(mcp) if mcp else None,
        created.system,
        agents,
        _recorded_output(session_id, created, recorded),
        settings if isinstance(settings := created.metadata.get("model_settings"), dict) else None,
    )


def _recorded_output(
    session_id: str, created: SessionCreated | SessionForked, recorded: dict[str, Any]
) -> OutputType | None:
    """The schema a `tether run --output-schema` session's answers must match: the one its
    `session.created` recorded (the file may have changed or gone since)."""
    described = created.metadata.get("output_type")
    if "output_schema" not in recorded or not isinstance(described, dict):
        return None
    schema = described.get("schema")
    if not isinstance(schema, dict):
        return None
    from tether.output import OutputType

    try:
        return OutputType.from_schema(schema, str(described.get("name") or "output"))
    except UsageError as exc:
        raise CliError(f"session {session_id}: its recorded output schema: {exc}") from exc


async def _steer(
    args: argparse.Namespace, act: Callable[[Any], Awaitable[str | None]], done: str = ""
) -> int:

    store = existing_store(args.store)
    try:
        done = await act(store) or done
    finally:
        await store.close()
    print(json.dumps({"session_id": args.id, "done": done}) if args.json else f"{args.id}: {done}")
    return 0


async def cmd_approve(args: argparse.Namespace) -> int:
    return await _steer(
        args, lambda s: control.decide(s, args.id, args.call, True), f"{args.call} allowed"
    )


async def cmd_deny(args: argparse.Namespace) -> int:
    return await _steer(
        args,
        lambda s: control.decide(s, args.id, args.call, False, args.reason),
        f"{args.call} denied",
    )


async def cmd_answer(args: argparse.Namespace) -> int:
    data: dict[str, object] | None = None
    if args.data is not None:
        try:
            given = documents.parse(args.data, "json")
        except ValueError as exc:
            raise CliError(f"the answer: {exc}") from None
        if not isinstance(given, dict):
            raise CliError(f"the answer must be a JSON object, not {args.data[:40]!r}")
        data = given
    elif args.action == "accept":
        raise CliError("give the answer as a JSON object, or --action decline|cancel")
    return await _steer(
        args,
        lambda s: control.answer(s, args.id, args.call, data, args.action),
        f"{args.call} answered ({args.action})",
    )


async def cmd_cancel(args: argparse.Namespace) -> int:
    return await _steer(args, lambda s: control.request_stop(s, args.id, "session", args.reason))


async def cmd_interrupt(args: argparse.Namespace) -> int:
    return await _steer(args, lambda s: control.request_stop(s, args.id, "turn", args.reason))


STEERING_COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "resume": cmd_resume,
    "send": cmd_send,
    "approve": cmd_approve,
    "deny": cmd_deny,
    "answer": cmd_answer,
    "cancel": cmd_cancel,
    "interrupt": cmd_interrupt,
}
