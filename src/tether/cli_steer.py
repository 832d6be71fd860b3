"""`tether sessions resume|approve|deny|cancel|interrupt`: steering a session from any
process. Thin adapters over `Agent.resume` and `tether.control`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import Any

from tether import control
from tether.errors import SessionNotFound
from tether.events import SessionCreated


def add_steering_commands(ssub: Any) -> None:
    from tether.cli import TOOLS_ARGUMENT

    resume = ssub.add_parser("resume", help="continue a session from its log in this process")
    resume.add_argument("id")
    resume.add_argument("--model", default=None, help="default: the model the session ran with")
    resume.add_argument("--tools", **{**TOOLS_ARGUMENT, "default": None})
    resume.add_argument("--mcp", default=None, metavar="FILE")
    resume.add_argument("--max-steps", type=int, default=50)
    resume.add_argument(
        "--lease-wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for another worker's lease to be released or expire",
    )
    for name, text in (
        ("approve", "allow a call that waits for approval"),
        ("deny", "deny a call that waits for approval"),
    ):
        p = ssub.add_parser(name, help=text)
        p.add_argument("id")
        p.add_argument("call")
        if name == "deny":
            p.add_argument("--reason", default=None)
    for name, text in (
        ("cancel", "end the session (terminal)"),
        ("interrupt", "end the running turn; the session stays usable"),
    ):
        p = ssub.add_parser(name, help=text)
        p.add_argument("id")
        p.add_argument("--reason", default=None)


async def cmd_resume(args: argparse.Namespace) -> int:
    from tether.cli import cmd_run, existing_store

    store = existing_store(args.store)
    try:
        events = await store.read(args.id, after_seq=0)
    finally:
        await store.close()
    if not events:
        raise SessionNotFound(args.id)
    created = events[0].payload
    recorded: dict[str, Any] = {}
    if isinstance(created, SessionCreated) and isinstance(created.metadata.get("cli"), dict):
        recorded = dict(created.metadata["cli"])  # type: ignore[arg-type]
    model = (
        args.model
        or recorded.get("model")
        or (created.model if isinstance(created, SessionCreated) else "")
    )
    tools = args.tools if args.tools is not None else list(recorded.get("tools") or [])
    args.mcp = args.mcp or recorded.get("mcp")
    args.system = created.system if isinstance(created, SessionCreated) else None
    args.session_id = args.id
    return await cmd_run(args, task=None, model=model, tool_specs=tools)


async def _steer(
    args: argparse.Namespace, act: Callable[[Any], Awaitable[str | None]], done: str = ""
) -> int:
    from tether.cli import existing_store

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


async def cmd_cancel(args: argparse.Namespace) -> int:
    return await _steer(args, lambda s: control.request_stop(s, args.id, "session", args.reason))


async def cmd_interrupt(args: argparse.Namespace) -> int:
    return await _steer(args, lambda s: control.request_stop(s, args.id, "turn", args.reason))


STEERING_COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "resume": cmd_resume,
    "approve": cmd_approve,
    "deny": cmd_deny,
    "cancel": cmd_cancel,
    "interrupt": cmd_interrupt,
}
